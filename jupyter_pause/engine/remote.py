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

This module only moves files; the store (engine/store.py) decides what to move, checks
signatures and hashes, and keeps the retention policy.  The client is ``obstore`` (Rust,
parallel multipart uploads and ranged reads, S3 and GCS): docs/engine.md says why.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from . import paths
from .errors import RemoteStoreError
from .manifest import BLOBS, SIGNATURE

PART = 16 << 20  # bytes per multipart part and per ranged GET
PARALLEL = 16  # requests in flight
FILES_AT_ONCE = 4  # files uploaded at once, each in PARALLEL // 2 parts at a time
SWEEP_GRACE = timedelta(hours=1)  # leftovers younger than this may be an upload under way


@dataclass(frozen=True)
class Listed:
    size: int
    modified: datetime


def open_store(bucket: paths.Bucket):
    """An obstore client for ``bucket``, configured the standard way: the AWS variables
    and credential chain (``AWS_ENDPOINT_URL`` included) for S3, Google's for GCS
    (``STORAGE_EMULATOR_HOST`` for an emulator)."""
    try:
        from obstore.store import GCSStore, S3Store
    except ImportError as e:
        raise RemoteStoreError(
            bucket.url, "open", "obstore is not installed: pip install 'jupyter-pause[objectstore]'"
        ) from e
    options = {"timeout": "120s", "connect_timeout": "10s"}
    retry = {"max_retries": 3, "retry_timeout": timedelta(seconds=10)}
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
    if "connect" in full.lower() or "connection" in full.lower():
        return f"the store does not answer ({line})"
    return line


class Remote:
    """One notebook folder's mirror in the bucket: ``rel`` is the folder relative to the
    local root (``<user folder>/<notebook folder>``)."""

    def __init__(self, bucket: paths.Bucket, rel: str):
        self.bucket = bucket
        self.rel = rel
        self.store = open_store(bucket)
        self.base = "/".join(p for p in (bucket.prefix, rel) if p)

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
    def upload(self, files: Iterable[tuple[str, Path]], progress=None) -> None:
        """Upload files (name relative to the notebook folder, local path), a few at a
        time, each large one in parallel parts read by obstore itself; ``progress(n)``
        hears each file's size once it is up."""
        import obstore

        def one(name: str, path: Path) -> None:
            size = path.stat().st_size
            obstore.put(
                self.store, self.key(name), path, chunk_size=PART, max_concurrency=PARALLEL // 2
            )
            if progress:
                progress(size)

        self._parallel("upload", [(one, (n, p)) for n, p in files], FILES_AT_ONCE)

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
        written into ``<path>.part-<pid>`` and renamed into place once complete."""
        import obstore

        jobs = []
        done: list[tuple[Path, Path]] = []
        for name, size, path in files:
            tmp = path.with_name(f"{path.name}.part-{os.getpid()}")
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

    def _parallel(
        self, action: str, jobs: list[tuple[Callable, tuple]], width: int = PARALLEL
    ) -> None:
        if not jobs:
            return
        failed: list[BaseException] = []
        stop = threading.Event()

        def run(fn, args):
            if stop.is_set():
                return
            try:
                fn(*args)
            except BaseException as e:
                failed.append(e)
                stop.set()

        with ThreadPoolExecutor(min(width, len(jobs))) as pool:
            for fn, args in jobs:
                pool.submit(run, fn, args)
        if failed:
            e = failed[0]
            if isinstance(e, RemoteStoreError | OSError) and not _is_obstore(e):
                raise e
            raise self._fail(action, e) from e


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
        if head in ids or name in referenced:
            continue
        if now - meta.modified >= (blob_grace if head == BLOBS else grace):
            out.append(name)
    return out
