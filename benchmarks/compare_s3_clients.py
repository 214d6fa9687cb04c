"""obstore against fsspec's s3fs on the same bytes and the same local SeaweedFS: a
parallel upload and a parallel ranged download of 8 files (the numbers behind the
choice in docs/engine.md).  s3fs is not a dependency: run it in a venv that has both,

    pip install obstore s3fs numpy
    python benchmarks/compare_s3_clients.py [--mb 320]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=320)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    import obstore
    import s3fs
    from obstore.store import S3Store

    from tests.objectstores import Seaweed

    work = Path(tempfile.mkdtemp(prefix="s3clients-"))
    server = Seaweed(work / "weed")
    server.start()
    server.create_bucket("cmp")
    env = server.env()
    files = []
    for i in range(8):
        f = work / f"f{i}"
        f.write_bytes(os.urandom(args.mb * 1_000_000 // 8))
        files.append(f)
    total = sum(f.stat().st_size for f in files) / 1e9
    ob = S3Store("cmp", endpoint=env["AWS_ENDPOINT_URL"], access_key_id=env["AWS_ACCESS_KEY_ID"],
                 secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region="us-east-1",
                 client_options={"allow_http": True})  # fmt: skip
    fs = s3fs.S3FileSystem(key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"],
                           endpoint_url=env["AWS_ENDPOINT_URL"], max_concurrency=8)  # fmt: skip
    part = 16 << 20

    def ob_up(r):
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda f: obstore.put(ob, f"o{r}/{f.name}", f, chunk_size=part,
                                                max_concurrency=8), files))  # fmt: skip

    def ob_down(r):
        jobs = [(f, s) for f in files for s in range(0, f.stat().st_size, part)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda j: obstore.get_range(ob, f"o{r}/{j[0].name}", start=j[1],
                          end=min(j[1] + part, j[0].stat().st_size)), jobs))  # fmt: skip

    def fs_up(r):
        fs.put([str(f) for f in files], [f"cmp/s{r}/{f.name}" for f in files])

    def fs_down(r):
        async def go():
            jobs = [(f, s) for f in files for s in range(0, f.stat().st_size, part)]
            await asyncio.gather(*(fs._cat_file(f"cmp/s{r}/{f.name}", start=s,
                                 end=min(s + part, f.stat().st_size)) for f, s in jobs))  # fmt: skip

        s3fs.core.sync(fs.loop, go)

    times: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for name, fn in [("obstore upload", ob_up), ("s3fs upload", fs_up),
                         ("obstore ranged download", ob_down), ("s3fs ranged download", fs_down)]:  # fmt: skip
            t0 = time.perf_counter()
            fn(r)
            times.setdefault(name, []).append(time.perf_counter() - t0)
    print(f"{total:.2f} GB in 8 files, SeaweedFS on 127.0.0.1, best of {args.rounds}")
    for name, ts in times.items():
        print(f"  {name:26} {min(ts):6.2f} s  {total / min(ts):5.2f} GB/s")
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
