"""Checkpoints mirrored to object storage (``s3://bucket/prefix``, ``gs://bucket/prefix``).

The local checkpoint folder (the cache of a :class:`paths.Bucket`) keeps today's layout,
and every file of it has the same relative key in the bucket::

    <prefix>/<user folder>/<notebook folder>/blobs/<xxh3>.safetensors
    <prefix>/<user folder>/<notebook folder>/<id>/objects.pkl
    <prefix>/<user folder>/<notebook folder>/<id>/manifest.json
    <prefix>/<user folder>/<notebook folder>/<id>/manifest.sig     <- the commit point

A checkpoint is in the bucket once its ``manifest.sig`` is: it is uploaded last, after
every other file of the checkpoint was uploaded (blobs the bucket already has are not
sent again) and listed back with its size.  Deleting goes the other way round: the
signature first.  What a crashed upload leaves behind (files of a checkpoint without a
signature, blobs no signed manifest references, unfinished multipart uploads) is swept
once it is older than a grace period, so that a writer still uploading is never robbed.

This module only moves files; the store decides what to move (engine/mirror.py), checks
signatures and hashes (engine/checks.py), and keeps the retention policy (engine/store.py).  The client is ``obstore`` (Rust,
parallel multipart uploads and ranged reads, S3 and GCS): docs/engine.md says why.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import hmac
import math
import mmap
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from . import paths
from .errors import RemoteStoreError
from .manifest import BLOBS, SESSION, SIGNATURE

PART = 16 << 20  # bytes per ranged GET, and the largest multipart part
MIN_PART = 5 << 20  # S3's smallest multipart part (all but the last)
PARALLEL = 16  # requests in flight
FILES_AT_ONCE = 4  # files uploaded at once, each in PARALLEL // 2 parts at a time
SWEEP_GRACE = timedelta(hours=1)  # leftovers younger than this may be an upload under way
#: an upload part is sized to take about this long on one connection at the measured rate
PART_SECONDS = 4.0
#: an upload request's timeout: this many times its expected time at the measured rate
#: (before anything was measured, at GUESSED_RATE), at least MIN_TIMEOUT
TIMEOUT_FACTOR = 4.0
MIN_TIMEOUT = 30.0
MAX_TIMEOUT = 3600.0
GUESSED_RATE = 2 << 20
#: the slowest link an estimate goes down to (bytes a second)
SLOWEST = 10_000
#: the timeout of the other requests (listings, reads)
DEFAULT_TIMEOUT = 120.0
#: an upload that fails is tried again this many times in a row without a part going
#: through (each time with smaller parts and longer timeouts), and at most PROGRESS_TRIES
#: times in all
NO_PROGRESS_TRIES = 3
PROGRESS_TRIES = 8


@dataclass(frozen=True)
class Listed:
    size: int
    modified: datetime


def open_store(bucket: paths.Bucket, timeout: float = DEFAULT_TIMEOUT):
    """An obstore client for ``bucket``, configured the standard way: the AWS variables
    and credential chain (``AWS_ENDPOINT_URL`` included) for S3, Google's for GCS
    (``STORAGE_EMULATOR_HOST`` for an emulator).  ``timeout``: seconds a request may take
    (an upload's are sized to the link: :class:`Link`); a request that fails sooner is
    tried again within that time."""
    try:
        from obstore.store import GCSStore, S3Store
    except ImportError as e:
        raise RemoteStoreError(
            bucket.url,
            "open",
            "obstore is not installed: pip install 'jupyter-pause[objectstore]' (or obstore)",
        ) from e
    options = {"timeout": f"{math.ceil(timeout)}s", "connect_timeout": "10s"}
    retry = {"max_retries": 3, "retry_timeout": timedelta(seconds=timeout)}
    if bucket.scheme == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        config = {}
        if endpoint:
            config["endpoint"] = endpoint
            options["allow_http"] = endpoint.startswith("http://")
        if not os.environ.get("AWS_REGION") and not os.environ.get("AWS_DEFAULT_REGION"):
            config["region"] = "us-east-1"
        return S3Store(bucket.bucket, config=config, client_options=options, retry_config=retry)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        if "://" not in emulator:
            emulator = f"http://{emulator}"
        options["allow_http"] = emulator.startswith("http://")
        return GCSStore(
            bucket.bucket,
            config={"base_url": emulator},
            client_options=options,
            retry_config=retry,
            credential_provider=lambda: {"token": "emulator", "expires_at": None},
        )
    return GCSStore(bucket.bucket, client_options=options, retry_config=retry)


def describe(e: BaseException) -> str:
    """What went wrong, in a line, and what to check: the S3 error code when the
    server sent one (``<Code>NoSuchBucket</Code>``), else the first line of the error."""
    import obstore.exceptions as oe

    full = str(e)
    line = full.strip().splitlines()[0] if full.strip() else type(e).__name__
    code = re.search(r"<Code>([A-Za-z]+)</Code>", full)
    code = code.group(1) if code else ""
    status = re.search(r"status code: (\d{3})", full)
    status = status.group(1) if status else ""
    if code == "NoSuchBucket" or "bucket does not exist" in full.lower():
        return "the bucket does not exist: create it, or correct the URL"
    if code in ("QuotaExceeded", "EntityTooLarge", "InsufficientStorage", "StorageFull"):
        return f"the bucket is out of space or quota ({code})"
    if (
        isinstance(e, oe.PermissionDeniedError | oe.UnauthenticatedError)
        or code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied")
        or status in ("401", "403")
    ):
        return (
            f"access denied ({code or status or line}): check the credentials "
            "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or GOOGLE_APPLICATION_CREDENTIALS)"
        )
    if code and status.startswith("5"):  # how SeaweedFS answers a write to a full bucket
        message = re.search(r"<Message>([^<]*)</Message>", full)
        return (
            f"the store refused the request ({status} {code}"
            + (f": {message.group(1)}" if message else "")
            + "): the bucket may be out of quota or space; see the store's log"
        )
    if "connect" in full.lower() or "error sending request" in full:
        return f"the store does not answer ({line})"
    return line


def lasting(e: BaseException) -> bool:
    """Whether an upload that failed so would fail again however often it is tried (wrong
    credentials, a missing bucket, one out of quota), rather than a link that was slow or
    cut (a timeout, a connection reset), which a new try with smaller parts may pass."""
    said = describe(e)
    return said.startswith(("the bucket does not exist", "access denied", "the bucket is out"))


class Stopped(Exception):
    """An upload was told to stop (:class:`Pace`'s ``stop``) before it was done."""


def _ewma(old: float | None, new: float, weight: float = 0.5) -> float:
    return new if old is None else (1 - weight) * old + weight * new


class Link:
    """What this process measured of its link to the store: the bytes a second one
    connection carries (every upload of at least a MiB), and all of them together (those
    with several parts in flight).  Uploads are cut into parts that take about
    :data:`PART_SECONDS` each on one connection (16 MiB at most, S3's 5 MiB at least), and
    each request may take :data:`TIMEOUT_FACTOR` times its expected time: a slow link is
    never failed by a timeout fixed for a fast one.  A timeout halves the estimate."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: bytes a second one connection carried (a moving average); None: not measured
        self.per_connection: float | None = None
        #: bytes a second several connections carried together; None: not measured
        self.aggregate: float | None = None
        #: bytes this process has uploaded, and the monotonic time of the last measurement
        self.sent = 0
        self.measured_at: float | None = None

    def observe(self, nbytes: int, seconds: float, connections: int = 1) -> None:
        """``nbytes`` went up in ``seconds`` over ``connections`` connections at once."""
        with self._lock:
            self.sent += nbytes
            if seconds <= 0 or nbytes < (1 << 20):
                return  # too little to tell a rate from the requests' own cost
            rate = nbytes / seconds
            self.per_connection = _ewma(self.per_connection, rate / max(1, connections))
            if connections > 1:
                self.aggregate = _ewma(self.aggregate, rate)
            self.measured_at = time.monotonic()

    def slower(self, part: int, timeout: float) -> None:
        """A request of ``part`` bytes did not finish in ``timeout`` seconds."""
        with self._lock:
            bound = part / timeout
            self.per_connection = max(SLOWEST, min(self.per_connection or bound, bound) / 2)
            if self.aggregate is not None:
                self.aggregate = min(self.aggregate, self.per_connection * PARALLEL)

    def part_size(self) -> int:
        if self.per_connection is None:
            return PART
        want = int(self.per_connection * PART_SECONDS) >> 20 << 20
        return max(MIN_PART, min(PART, want))

    def timeout(self, nbytes: int) -> float:
        """Seconds a request carrying ``nbytes`` on one connection may take."""
        rate = self.per_connection or GUESSED_RATE
        return min(MAX_TIMEOUT, max(MIN_TIMEOUT, TIMEOUT_FACTOR * nbytes / rate))

    def rate(self, connections: int) -> float | None:
        """Bytes a second an upload on ``connections`` connections may expect; None:
        nothing measured yet.  Several connections are expected to carry what they were
        measured to carry together, and until then what one does: a link is usually
        limited in all (a NIC, a node's share), so one connection's rate times their
        number would promise what the link never gives (the spot drill: 369 MB/s
        expected of a 20 MB/s link that background staging had measured one part at a
        time)."""
        with self._lock:
            if self.per_connection is None:
                return None
            if connections > 1 and self.aggregate is not None:
                return self.aggregate
            return self.per_connection

    def to_json(self) -> dict[str, Any]:
        return {
            "per_connection": self.per_connection,
            "aggregate": self.aggregate,
            "sent": self.sent,
        }


#: what this process measured of its link to the store
LINK = Link()


@dataclass
class Pace:
    """How an upload shares the link.  ``share`` (0 < share <= 1): a background upload
    (staging) sends one part at a time on one connection, and after each part waits so
    that the link is its for at most that share of the time: at most ``share`` of the
    upload bandwidth, whatever the link's speed, measured part by part.  1: as fast as
    it goes.  ``stop()`` true: no new part starts (:class:`Stopped`).  ``on_bytes(n)``
    hears each part once the store took it."""

    share: float = 1.0
    stop: Callable[[], bool] | None = None
    on_bytes: Callable[[int], None] | None = None

    @property
    def background(self) -> bool:
        return self.share < 1.0

    def check(self) -> None:
        if self.stop is not None and self.stop():
            raise Stopped("the upload was stopped")

    def rest(self, busy: float) -> None:
        """The link was the upload's for ``busy`` seconds: leave it to others for long
        enough (waking early to stop)."""
        if not self.background or busy <= 0:
            return
        until = time.monotonic() + busy * (1 / self.share - 1)
        while (left := until - time.monotonic()) > 0:
            self.check()
            time.sleep(min(left, 0.2))


FULL_SPEED = Pace()


class Remote:
    """One notebook folder's mirror in the bucket: ``rel`` is the folder relative to the
    local root (``<user folder>/<notebook folder>``)."""

    def __init__(self, bucket: paths.Bucket, rel: str, link: Link = LINK):
        self.bucket = bucket
        self.rel = rel
        self.store = open_store(bucket)
        self.base = "/".join(p for p in (bucket.prefix, rel) if p)
        self.link = link
        self._stores: dict[int, Any] = {}
        self._stores_lock = threading.Lock()

    def store_for(self, timeout: float):
        """A client whose requests may take ``timeout`` seconds (rounded up to a power of
        two: a few clients serve every size)."""
        seconds = 1 << max(0, math.ceil(math.log2(max(timeout, MIN_TIMEOUT, 1.0))))
        with self._stores_lock:
            if seconds not in self._stores:
                self._stores[seconds] = open_store(self.bucket, seconds)
            return self._stores[seconds]

    def key(self, name: str) -> str:
        return f"{self.base}/{name}"

    def _fail(self, action: str, e: BaseException) -> RemoteStoreError:
        return RemoteStoreError(self.bucket.url, action, describe(e))

    def listing(self) -> dict[str, Listed]:
        """Every object of this notebook folder: name relative to it -> size, time."""
        import obstore

        out = {}
        try:
            for batch in obstore.list(self.store, prefix=self.base + "/", chunk_size=1000):
                for meta in batch:
                    name = meta["path"][len(self.base) + 1 :]
                    out[name] = Listed(meta["size"], meta["last_modified"])
        except Exception as e:
            raise self._fail("list", e) from e
        return out

    # --------------------------------------------------------------- up
    def upload(
        self, files: Iterable[tuple[str, Path]], progress=None, pace: Pace | None = None
    ) -> None:
        """Upload files (name relative to the notebook folder, local path), a few at a
        time, each large one in parallel parts (:meth:`put`); ``progress(n)`` hears each
        file's size once it is up.  A background ``pace`` sends one file at a time, in
        the order given."""
        pace = pace or FULL_SPEED

        def one(name: str, path: Path) -> None:
            with open(path, "rb", buffering=0) as f:
                size = self.put(name, f, pace)
            if progress:
                progress(size)

        jobs = [(one, (n, p)) for n, p in files]
        self._parallel("upload", jobs, 1 if pace.background else FILES_AT_ONCE)

    def put(self, name: str, f, pace: Pace | None = None) -> int:
        """Upload the open file ``f`` (read-only, never changed again: a staged blob or a
        committed file) as ``name``; returns its size.  The bytes go straight from a
        mapping of the file, from the page cache where it was just written: read into
        buffers of the client's instead, every byte would be copied once more, into fresh
        memory, on the cores the upload needs.  A file larger than a part goes in parts
        sized to the link (:class:`Link`), several in flight (one for a background
        ``pace``), each request with a timeout sized to its part.  A try that fails for a
        slow or cut link is made again with smaller parts and longer timeouts while parts
        go through (:data:`NO_PROGRESS_TRIES` in a row without one, :data:`PROGRESS_TRIES`
        in all)."""
        import obstore

        pace = pace or FULL_SPEED
        key = self.key(name)
        size = os.fstat(f.fileno()).st_size
        pace.check()
        if size == 0:
            obstore.put(self.store, key, b"")
            return 0
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                self._put_view(key, view, pace)
            finally:
                view.release()
        return size

    def _put_view(self, key: str, view: memoryview, pace: Pace) -> None:
        import obstore

        size, link = len(view), self.link
        tries = stalled = 0
        while True:
            pace.check()
            part = link.part_size()
            timeout = link.timeout(min(part, size))
            store = self.store_for(timeout)
            watch = _Watch()
            started = time.monotonic()
            try:
                if size <= part:
                    obstore.put(store, key, view, use_multipart=False)
                    busy = time.monotonic() - started
                    link.observe(size, busy)
                    pace.rest(busy)
                    return
                width = 1 if pace.background else PARALLEL // 2
                chunks = _parts(view, part, pace, link, watch)
                obstore.put(store, key, chunks, chunk_size=part, max_concurrency=width)
                now = time.monotonic()
                if pace.background:  # the last part, which no later one was handed after
                    busy = now - (watch.handed or started)
                    link.observe(size - (size - 1) // part * part, busy)
                    pace.rest(busy)
                else:
                    link.observe(size, now - started, min(width, -(-size // part)))
                return
            except Stopped:
                raise
            except Exception as e:
                tries += 1
                stalled = 0 if watch.parts else stalled + 1
                if lasting(e) or stalled >= NO_PROGRESS_TRIES or tries >= PROGRESS_TRIES:
                    raise
                if time.monotonic() - started >= 0.9 * timeout:  # timed out: slower than hoped
                    link.slower(min(part, size), timeout)

    def uploads(self) -> Uploads:
        """A background upload that takes files while the caller is still writing others:
        see :class:`Uploads`."""
        return Uploads(self, self.listing())

    def delete(self, names: Iterable[str]) -> None:
        import obstore

        names = [self.key(n) for n in names]
        if not names:
            return
        try:
            for start in range(0, len(names), 1000):
                obstore.delete(self.store, names[start : start + 1000])
        except FileNotFoundError:
            pass
        except Exception as e:
            raise self._fail("delete", e) from e

    # --------------------------------------------------------------- down
    def download(self, files: Iterable[tuple[str, int, Path]], progress=None) -> None:
        """Download files (name, size, local path) with parallel ranged GETs: each is
        written into ``<path>.part-<pid>-<thread>`` and renamed into place once complete."""
        import obstore

        jobs = []
        done: list[tuple[Path, Path]] = []
        for name, size, path in files:
            tmp = path.with_name(f"{path.name}.part-{os.getpid()}-{threading.get_ident()}")
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.ftruncate(fd, size)
            os.close(fd)
            done.append((tmp, path))

            def piece(name=name, tmp=tmp, start=0, end=0):
                data = obstore.get_range(self.store, self.key(name), start=start, end=end)
                fd = os.open(tmp, os.O_WRONLY)
                try:
                    os.pwrite(fd, memoryview(data), start)
                finally:
                    os.close(fd)
                if progress:
                    progress(end - start)

            def whole(name=name, tmp=tmp):
                data = obstore.get(self.store, self.key(name)).bytes()
                with open(tmp, "wb") as f:
                    f.write(memoryview(data))

            if size == 0:
                jobs.append((whole, ()))
            for start in range(0, size, PART):
                jobs.append((piece, (name, tmp, start, min(start + PART, size))))
        try:
            self._parallel("download", jobs)
        except BaseException:
            for tmp, _ in done:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            raise
        for tmp, path in done:
            os.replace(tmp, path)

    def read_into(
        self, files: dict[str, list[tuple[int, Any]]], on_part=None, on_failed=None, stopped=None
    ) -> None:
        """Read byte ranges of files straight into memory (a restore's buffers), with
        parallel ranged GETs of at most :data:`PART` bytes, in the order ``files`` names
        them: ``files`` maps a name to its pieces, ``(offset, array)`` with flat uint8
        arrays, sorted by offset and not overlapping; adjacent pieces are read together.
        ``on_part(name, filled)`` hears, after each GET, the ``(piece index, bytes)`` it
        filled.  Nothing is written to disk.  The first GET that fails stops the others
        and raises :class:`RemoteStoreError`; with ``on_failed(name, error)``, it stops
        only the rest of its file, which that call names, and the others go on.  Once
        ``stopped()`` is true, no GET starts."""
        import numpy as np
        import obstore

        failed: set[str] = set()
        lock = threading.Lock()

        def part(name: str, start: int, end: int) -> None:
            if name in failed or (stopped is not None and stopped()):
                return
            pieces = files[name]
            try:
                got = obstore.get_range(self.store, self.key(name), start=start, end=end)
            except Exception as e:
                if on_failed is None:
                    raise
                with lock:  # its other GETs in flight may fail too: said once
                    first = name not in failed
                    failed.add(name)
                if first:
                    on_failed(name, self._fail("download", e))
                return
            data = np.frombuffer(got, dtype=np.uint8)
            filled = []
            k = max(0, bisect.bisect_right(pieces, start, key=lambda p: p[0]) - 1)
            while k < len(pieces) and pieces[k][0] < end:
                off, arr = pieces[k]
                lo, hi = max(start, off), min(end, off + len(arr))
                if lo < hi:
                    arr[lo - off : hi - off] = data[lo - start : hi - start]
                    filled.append((k, hi - lo))
                k += 1
            if on_part is not None:
                on_part(name, filled)

        jobs = []
        for name, pieces in files.items():
            spans: list[list[int]] = []  # [start, end) of runs of adjacent pieces
            for off, arr in pieces:
                if spans and spans[-1][1] == off:
                    spans[-1][1] = off + len(arr)
                elif len(arr):
                    spans.append([off, off + len(arr)])
            for start, end in spans:
                jobs += [(part, (name, s, min(s + PART, end))) for s in range(start, end, PART)]
        self._parallel("download", jobs)

    def read_range(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of one file (a safetensors header, before its data)."""
        import obstore

        try:
            return bytes(obstore.get_range(self.store, self.key(name), start=start, end=end))
        except Exception as e:
            raise self._fail("download", e) from e

    def _parallel(
        self, action: str, jobs: list[tuple[Callable, tuple]], width: int = PARALLEL
    ) -> None:
        if not jobs:
            return
        failed: list[BaseException] = []
        stop = threading.Event()
        todo = iter(jobs)
        lock = threading.Lock()

        def worker() -> None:
            while not stop.is_set():
                with lock:
                    job = next(todo, None)
                if job is None:
                    return
                fn, args = job
                try:
                    fn(*args)
                except BaseException as e:
                    failed.append(e)
                    stop.set()

        # daemon threads: a process that exits (a server whose grace ended, a killed
        # kernel) is never held by a request still in flight
        workers = [
            threading.Thread(target=worker, name=f"jp-{action}", daemon=True)
            for _ in range(min(width, len(jobs)))
        ]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        if failed:
            e = failed[0]
            if isinstance(e, RemoteStoreError | OSError | Stopped) and not _is_obstore(e):
                raise e
            raise self._fail(action, e) from e


@dataclass
class _Watch:
    """How one try of a multipart upload went: the parts the store took during it, and when
    the last one was handed over whole (monotonic)."""

    parts: int = 0
    handed: float | None = None


def _parts(view: memoryview, part: int, pace: Pace, link: Link, watch: _Watch):
    """``view`` in slices for obstore's multipart put (``part`` bytes a part), watching it
    take them: it asks for the next slice only while fewer parts than its concurrency are
    in flight, so a ``yield`` that waits ends when a part went through.  For a background
    ``pace`` (one part in flight), that wait is the part's time on the link: measured, then
    matched by a rest.  ``pace.stop`` is heard before each slice."""
    step = min(part, 1 << 20)
    size = len(view)
    for start in range(0, size, step):
        pace.check()
        asked = time.monotonic()
        yield view[start : start + step]
        now = time.monotonic()
        if now - asked > 0.005 and watch.handed is not None:  # a part in flight went through
            watch.parts += 1
            if pace.background:
                busy = now - watch.handed
                link.observe(part, busy)
                pace.rest(busy)
        end = start + step
        if end % part == 0 or end >= size:
            watch.handed = time.monotonic()


class Uploads:
    """Files uploaded in the background, :data:`FILES_AT_ONCE` at a time, while the caller
    goes on writing others: the blobs of a checkpoint, each sent as soon as it is staged,
    so that the upload overlaps the writing of the local copy.

    ``add`` opens the file at once, so it may be renamed or unlinked afterwards (its
    transaction commits it); a name ``listed`` already holds with that size is not sent
    again.  Bytes are counted in ``total`` and ``sent`` until ``report(progress)`` hands
    them, and those still to come, to a progress bar.  ``wait`` returns once every upload
    has ended; failures are kept in ``failed``, not raised: what is not in the bucket then
    is found by ``mirror.push``, which lists the bucket, uploads it, or fails with the
    cause.  The signature, the commit, is never sent here."""

    def __init__(self, remote: Remote, listed: dict[str, Listed]):
        self.remote = remote
        self.listed = listed
        self.total = 0
        self.sent = 0
        self.failed: list[BaseException] = []
        self._progress = None
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(FILES_AT_ONCE, thread_name_prefix="jp-upload")
        self._stop = threading.Event()

    def add(self, name: str, path: Path) -> None:
        size = path.stat().st_size
        known = self.listed.get(name)
        if known is not None and known.size == size:
            return
        f = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by _one)
        with self._lock:
            self.total += size
            if self._progress is not None:
                self._progress.add_total(size)
        self._pool.submit(self._one, name, f, size)

    def report(self, progress) -> None:
        """From now on, count in ``progress`` (what was counted so far included)."""
        with self._lock:
            progress.add_total(self.total)
            progress.update(self.sent)
            self._progress = progress

    def _one(self, name: str, f, size: int) -> None:
        with f:
            if self._stop.is_set():
                return
            try:
                self.remote.put(name, f)
            except BaseException as e:
                self.failed.append(e)
                return
        with self._lock:
            self.sent += size
            if self._progress is not None:
                self._progress.update(size)

    def wait(self) -> None:
        self._pool.shutdown(wait=True)

    def cancel(self) -> None:
        """Send nothing more; wait for what is being sent (a failed checkpoint's blobs are
        swept like any blob no manifest references)."""
        self._stop.set()
        self._pool.shutdown(wait=True)


def probe(bucket: paths.Bucket) -> None:
    """Ask the store for one object under the prefix: :class:`RemoteStoreError` when it
    cannot be used (no such bucket, access denied, no answer)."""
    import obstore

    store = open_store(bucket)
    try:
        next(iter(obstore.list(store, prefix=bucket.prefix or None, chunk_size=1)), None)
    except Exception as e:
        raise RemoteStoreError(bucket.url, "list", describe(e)) from e


def folders(bucket: paths.Bucket, rel: str) -> list[str]:
    """The names of the folders directly under ``rel`` in the bucket (a user's notebook
    folders)."""
    import obstore

    store = open_store(bucket)
    base = "/".join(p for p in (bucket.prefix, rel) if p)
    try:
        found = obstore.list_with_delimiter(store, prefix=base + "/")
    except Exception as e:
        raise RemoteStoreError(bucket.url, "list", describe(e)) from e
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in found["common_prefixes"])


# ------------------------------------------------------------------ unfinished multipart
# object_store (obstore) aborts the multipart uploads it gives up on, but not those of a
# writer that died; it has no call to list them, so these two S3 requests are made here,
# signed with AWS Signature V4 from the standard variables.
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _s3_request(bucket: paths.Bucket, method: str, key: str = "", query=()) -> bytes:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    access = os.environ.get("AWS_ACCESS_KEY_ID", "")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    if endpoint:
        base = endpoint.rstrip("/")
        path = f"/{bucket.bucket}/{key}" if key else f"/{bucket.bucket}"
    else:
        base = f"https://{bucket.bucket}.s3.{region}.amazonaws.com"
        path = f"/{key}"
    path = urllib.parse.quote(path, safe="/-_.~")
    cq = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in sorted(query)
    )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    headers = {
        "host": urllib.parse.urlsplit(base).netloc,
        "x-amz-content-sha256": _EMPTY_SHA256,
        "x-amz-date": stamp,
    }
    if os.environ.get("AWS_SESSION_TOKEN"):
        headers["x-amz-security-token"] = os.environ["AWS_SESSION_TOKEN"]
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [method, path, cq, "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed,
         _EMPTY_SHA256]
    )  # fmt: skip
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    k = ("AWS4" + secret).encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, "
        f"Signature={signature}"
    )
    del headers["host"]
    url = base + path + (f"?{cq}" if cq else "")
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
        raise RemoteStoreError(
            bucket.url, f"{method} {key or '?uploads'}", f"{e.code}: {body[:300]}"
        ) from e
    except OSError as e:
        raise RemoteStoreError(bucket.url, f"{method} {key or '?uploads'}", str(e)) from e


def abort_unfinished(bucket: paths.Bucket, rel: str, grace: timedelta = SWEEP_GRACE) -> list[str]:
    """Abort the multipart uploads under ``rel`` begun more than ``grace`` ago (a writer
    that died in the middle of one): their parts are invisible but kept, and billed, until
    then.  S3 only (GCS's XML multipart uploads are not swept here).  Returns their keys."""
    if bucket.scheme != "s3":
        return []
    prefix = "/".join(p for p in (bucket.prefix, rel) if p) + "/"
    xml = _s3_request(bucket, "GET", query=[("prefix", prefix), ("uploads", "")])
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    root = ET.fromstring(xml)
    now = datetime.now(timezone.utc)
    aborted = []
    for upload in root.findall("s3:Upload", ns) or root.findall("Upload"):

        def text(tag, upload=upload):
            node = upload.find(f"s3:{tag}", ns)
            node = node if node is not None else upload.find(tag)
            return node.text if node is not None else ""

        key, upload_id, begun = text("Key"), text("UploadId"), text("Initiated")
        try:
            started = datetime.fromisoformat(begun.replace("Z", "+00:00"))
        except ValueError:
            started = now - grace  # no date: old enough
        if not key.startswith(prefix) or now - started < grace:
            continue
        _s3_request(bucket, "DELETE", key, [("uploadId", upload_id)])
        aborted.append(key[len(prefix) :])
    return aborted


def _is_obstore(e: BaseException) -> bool:
    return type(e).__module__.startswith("obstore")


def committed(listing: dict[str, Listed]) -> list[str]:
    """Ids of the checkpoints whose signature is in the bucket (committed), oldest first."""
    ids = {
        name.split("/", 1)[0]
        for name in listing
        if name.endswith("/" + SIGNATURE) and paths.is_checkpoint_id(name.split("/", 1)[0])
    }
    return sorted(ids, key=paths.id_sort_key)


def leftovers(
    listing: dict[str, Listed],
    referenced: set[str],
    grace: timedelta = SWEEP_GRACE,
    blob_grace: timedelta | None = None,
    now: datetime | None = None,
) -> list[str]:
    """What no committed checkpoint needs: files of checkpoints without a signature and
    anything stray, older than ``grace``; blobs that ``referenced`` (the blobs of every
    manifest the caller knows) does not name, older than ``blob_grace`` (default:
    ``grace``; 0 for the notebook's own writer, which holds its lock)."""
    now = now or datetime.now(timezone.utc)
    blob_grace = grace if blob_grace is None else blob_grace
    ids = set(committed(listing))
    out = []
    for name, meta in listing.items():
        head = name.split("/", 1)[0]
        if head in ids or head == SESSION or name in referenced:
            continue  # SESSION: the notebook's record (engine/session_record.py) is no leftover
        if now - meta.modified >= (blob_grace if head == BLOBS else grace):
            out.append(name)
    return out
