"""A checkpoint near the kernel's memory limit (issue #31): real kernels in a memory
cgroup of their own (v2, else v1; skipped where neither can be made, e.g. not root).

At 45 % and 65 % of the limit the checkpoint succeeds and restores into a fresh kernel,
in a cgroup of the same limit, that has imported nothing; at 85 % it succeeds or is
refused up front, the kernel alive with its objects; a kernel with less room than a
checkpoint may need is refused before anything is written.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

LIMIT = 512 << 20
DEADLINE = 120

pytestmark = pytest.mark.slow


class Cgroup:
    """A memory cgroup with ``limit`` bytes, removed at the end."""

    def __init__(self, limit: int):
        root = Path("/sys/fs/cgroup")
        name = f"jp-test-{uuid.uuid4().hex[:8]}"
        if "memory" in _read(root / "cgroup.subtree_control").split():
            self.path, limit_file = root / name, "memory.max"
        elif (root / "memory" / "memory.limit_in_bytes").exists():
            self.path, limit_file = root / "memory" / name, "memory.limit_in_bytes"
        else:
            pytest.skip("no memory cgroup controller here")
        try:
            self.path.mkdir()
            (self.path / limit_file).write_text(str(limit))
        except OSError as e:
            self.remove()
            pytest.skip(f"cannot make a memory cgroup here ({e})")
        # a process must be able to join it (cgroup v2 refuses some placements)
        joined = subprocess.run(
            ["sh", "-c", f"echo $$ > {self.path / 'cgroup.procs'} && cat /proc/self/cgroup"],
            capture_output=True,
            text=True,
        )
        if joined.returncode != 0 or name not in joined.stdout:
            self.remove()
            pytest.skip(f"cannot join a memory cgroup here ({joined.stderr.strip()})")

    @property
    def oom_kills(self) -> int:
        for name in ("memory.events", "memory.oom_control"):
            for line in _read(self.path / name).splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def remove(self) -> None:
        if self.path.exists():
            os.rmdir(self.path)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class Kernel:
    """A real IPython kernel started inside ``cgroup`` (its launcher joins it, then execs)."""

    def __init__(self, cgroup: Cgroup, tmp_path: Path):
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager

        spec = tmp_path / f"kernels-{uuid.uuid4().hex[:6]}" / "limited"
        spec.mkdir(parents=True)
        join = f'echo $$ > {cgroup.path / "cgroup.procs"} && exec "$@"'
        argv = ["sh", "-c", join, "sh", sys.executable, "-m", "ipykernel_launcher"]
        argv += ["-f", "{connection_file}"]
        spec.joinpath("kernel.json").write_text(
            json.dumps({"argv": argv, "display_name": "limited", "language": "python"})
        )
        ksm = KernelSpecManager(kernel_dirs=[str(spec.parent)])
        self.km = KernelManager(kernel_name="limited", kernel_spec_manager=ksm)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=DEADLINE)

    def run(self, code: str):
        """Run a cell; its reply (``_out``, as JSON, in its user expressions)."""
        reply = self.kc.execute_interactive(
            code,
            timeout=DEADLINE,
            user_expressions={"out": "__import__('json').dumps(_out)"},
            output_hook=lambda msg: None,
        )
        return reply["content"]

    def value(self, code: str):
        """The value of ``_out`` after the cell (read from the reply, not from a
        stream: a loaded machine may deliver the output in pieces)."""
        content = self.run(code)
        assert content["status"] == "ok", content
        out = content["user_expressions"]["out"]
        assert out["status"] == "ok", out
        return json.loads(ast.literal_eval(out["data"]["text/plain"]))

    def alive(self) -> bool:
        return self.km.is_alive()

    def stop(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


USAGE = """
from pathlib import Path
def _usage():
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _i, ctl, path = line.split(":", 2)
        for f in ("/sys/fs/cgroup" + path + "/memory.current",
                  "/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes"):
            if (ctl == "" or "memory" in ctl.split(",")) and Path(f).exists():
                return int(Path(f).read_text())
"""

FILL = (
    USAGE
    + """
import os, zlib, numpy as np
_room = int({fraction} * {limit}) - _usage()
blob = os.urandom(_room // 5)  # a large bytes object: pickled in-band
small = [{{"id": i, "name": f"item{{i}}", "tags": [i % 7, i % 11]}} for i in range(10_000)]
arrays = [np.random.default_rng(i).random((_room - _room // 5 - (8 << 20)) // 8 // 4) for i in range(4)]
_out = {{"usage": _usage(), "sum": float(sum(a.sum() for a in arrays)), "blob": zlib.crc32(blob)}}
"""
)

CHECKPOINT = """
import jupyter_pause as jp
from jupyter_pause.engine.errors import NotEnoughMemory
try:
    _r = jp.checkpoint(dir={dir!r}, notebook="nb", progress=False)
    _out = {{"id": _r.id, "bytes": _r.bytes_total}}
except NotEnoughMemory as e:
    _out = {{"refused": str(e)}}
"""


@pytest.mark.parametrize("fraction", [0.45, 0.65, 0.85])
def test_a_checkpoint_near_the_limit_fits_or_is_refused(tmp_path, fraction):
    groups, kernels = [], []
    try:
        groups.append(Cgroup(LIMIT))
        kernels.append(Kernel(groups[0], tmp_path))
        k = kernels[0]
        made = k.value(FILL.format(fraction=fraction, limit=LIMIT))
        assert made["usage"] >= (fraction - 0.05) * LIMIT
        out = k.value(CHECKPOINT.format(dir=str(tmp_path / "ck")))
        assert k.alive() and groups[0].oom_kills == 0
        if "refused" in out:
            assert fraction == 0.85, out  # 45 % and 65 % must fit
            assert out["refused"].startswith("not enough memory to checkpoint: needs ~")
            after = k.value(
                "_out = {'sum': float(sum(a.sum() for a in arrays)), 'blob': zlib.crc32(blob)}"
            )
            assert after == {"sum": made["sum"], "blob": made["blob"]}
            return
        # a fresh kernel under the same limit, that imported nothing, restores it all
        groups.append(Cgroup(LIMIT))
        kernels.append(Kernel(groups[1], tmp_path))
        back = kernels[1].value(
            f"import sys, zlib; _before = sorted(m for m in ('numpy', 'jupyter_pause') if m in sys.modules)\n"
            f"import jupyter_pause as jp, jupyter_pause.engine.lazy as _lazy\n"
            f"jp.restore(dir={str(tmp_path / 'ck')!r}, notebook='nb', progress=False)\n"
            "_lazy.wait()\n"
            "_out = {'before': _before, 'sum': float(sum(a.sum() for a in arrays)),"
            " 'blob': zlib.crc32(blob), 'small': len(small)}"
        )
        assert back == {"before": [], "sum": made["sum"], "blob": made["blob"], "small": 10_000}
        assert groups[1].oom_kills == 0
    finally:
        for k in kernels:
            k.stop()
        for g in groups:
            g.remove()


def test_a_kernel_without_room_for_a_checkpoint_is_refused_and_left_alone(tmp_path):
    cg = Cgroup(LIMIT)
    k = None
    try:
        k = Kernel(cg, tmp_path)
        # fill the kernel until less is free than a checkpoint may need
        made = k.value(
            "import numpy as np\n"
            "from jupyter_pause.engine import memory\n"
            "_fill = memory.headroom().free - memory.need() // 2\n"
            "big = np.ones(_fill // 8)\n"
            "_out = {'sum': float(big.sum()), 'free': memory.headroom().free,"
            " 'need': memory.need()}"
        )
        assert made["free"] < made["need"], made
        out = k.value(CHECKPOINT.format(dir=str(tmp_path / "ck")))
        assert out["refused"].startswith("not enough memory to checkpoint: needs ~"), out
        assert "free under the memory cgroup" in out["refused"]
        assert k.alive()
        assert k.value("_out = float(big.sum())") == made["sum"]
        assert not (tmp_path / "ck").exists() or not any((tmp_path / "ck").rglob("*.pkl"))
    finally:
        if k is not None:
            k.stop()
        cg.remove()
