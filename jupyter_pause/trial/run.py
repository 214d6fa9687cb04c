"""The pause/resume trial a team runs before enabling pause.

Steps (each timed, each with PASS/FAIL checks):

1. **run**: open the notebook, run its code cells, record the resources
   before pausing (kernel RSS, accelerator memory) and fingerprint the live
   state; plant the release-check probe (:mod:`.probe`).
2. **pause**: request a pause and wait; check the session is ``paused``, the
   kernel (and its process) is gone, the accelerator holds nothing for it,
   and what storage remains (checkpoint bytes, files).
3. **resume**: request a resume (a second, concurrent request must not
   start a competing restore); optionally expect ``waiting-for-capacity``
   first; check files and live state against the fingerprints, the probe's
   outcome, and run one cell that uses the loaded model: request-to-usable.
4. **checkpoint restore**: the comparison path - restart the kernel (a fresh
   process) and restore the saved checkpoint into it, run the model cell.
5. **cleanup**: close the notebook, delete its checkpoints and the probe
   file, and check that nothing of them remains.

Which cell "uses the loaded model": notebook metadata
``jupyter_pause.trial.use_model`` (source), else the last code cell.
Names to leave out of the state comparison: ``jupyter_pause.trial.ignore``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client import ClientError, LocalServer, PauseClient
from ..formatting import format_bytes, text_table
from ..processes import pid_alive
from . import probe as probe_mod


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "result": "PASS" if self.ok else "FAIL", "detail": self.detail}


@dataclass
class Step:
    name: str
    seconds: float | None = None
    bytes: int | None = None
    checks: list[Check] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        return bool(ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "checks": [c.to_json() for c in self.checks],
            "info": self.info,
        }


@dataclass
class TrialResult:
    notebook: str
    server: str
    backend: dict[str, Any]
    steps: list[Step]
    started: float
    finished: float = 0.0
    error: str = ""

    @property
    def passed(self) -> bool:
        return (
            not self.error and all(c.ok for s in self.steps for c in s.checks) and bool(self.steps)
        )

    def timings(self) -> dict[str, float | None]:
        by = {s.name: s for s in self.steps}
        return {
            "run_s": by["run"].seconds if "run" in by else None,
            "pause_s": by["pause"].seconds if "pause" in by else None,
            "resume_to_usable_s": by["resume"].seconds if "resume" in by else None,
            "checkpoint_restore_to_usable_s": (
                by["checkpoint-restore"].seconds if "checkpoint-restore" in by else None
            ),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "notebook": self.notebook,
            "server": self.server,
            "backend": self.backend,
            "started": self.started,
            "finished": self.finished,
            "passed": self.passed,
            "error": self.error,
            "timings": self.timings(),
            "steps": [s.to_json() for s in self.steps],
        }

    def to_text(self) -> str:
        rows = []
        for s in self.steps:
            first = True
            for c in s.checks or [Check("-", True)]:
                rows.append(
                    [
                        s.name if first else "",
                        (f"{s.seconds:.2f}" if s.seconds is not None else "") if first else "",
                        (format_bytes(s.bytes) if s.bytes is not None else "") if first else "",
                        c.name,
                        "PASS" if c.ok else "FAIL",
                        _clip(c.detail, 70),
                    ]
                )
                first = False
        lines = [
            f"Pause/resume trial: {self.notebook} on {self.server}"
            f" (backend {self.backend.get('name', '?')})",
            "",
            *text_table(
                ["step", "time s", "size", "check", "result", "detail"], rows, right=(1, 2)
            ),
            "",
        ]
        if self.error:
            lines.append(f"ERROR: {self.error}")
        n = sum(len(s.checks) for s in self.steps)
        failed = sum(1 for s in self.steps for c in s.checks if not c.ok)
        lines.append(f"{'PASS' if self.passed else 'FAIL'}: {n - failed} of {n} checks passed")
        return "\n".join(lines) + "\n"


def _clip(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------------- kernel snippets

FINGERPRINT = r"""
def __jupyter_pause_fingerprint():
    import hashlib, json, sys
    ip = get_ipython()
    hidden = getattr(ip, "user_ns_hidden", {})
    skip = {"In", "Out", "exit", "quit", "get_ipython"}
    out = {}
    for k, v in list(ip.user_ns.items()):
        if k.startswith("_") or k in skip or k in hidden:
            continue
        if type(v).__name__ in ("module", "function", "type", "builtin_function_or_method", "method"):
            continue
        try:
            fp = None
            torch = sys.modules.get("torch")
            if torch is not None:
                if isinstance(v, torch.nn.Module):
                    sd = v.state_dict()
                    fp = "module:%d:%r" % (len(sd), sum(float(t.double().sum()) for t in sd.values()))
                elif isinstance(v, torch.Tensor):
                    fp = "tensor:%s:%r" % (tuple(v.shape), float(v.double().sum()))
            np = sys.modules.get("numpy")
            if fp is None and np is not None and isinstance(v, np.ndarray):
                fp = "ndarray:%s:%s" % (v.shape, hashlib.sha1(np.ascontiguousarray(v).tobytes()).hexdigest()[:16])
            if fp is None and isinstance(v, (set, frozenset)):
                fp = "set:" + hashlib.sha1(repr(sorted(map(repr, v))).encode()).hexdigest()[:16]
            if fp is None and isinstance(v, (int, float, str, bool, bytes, list, tuple, dict, type(None))):
                fp = "%s:%s" % (type(v).__name__, hashlib.sha1(repr(v).encode()).hexdigest()[:16])
            out[k] = fp or "object:" + type(v).__name__
        except Exception as e:
            out[k] = "error:" + type(e).__name__
    print(json.dumps(out))
__jupyter_pause_fingerprint(); del __jupyter_pause_fingerprint
"""

RESOURCES = r"""
def __jupyter_pause_resources():
    import json, os, sys
    out = {"pid": os.getpid(), "rss_bytes": None, "accelerator": None, "accelerator_bytes": 0}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        out["accelerator"] = torch.cuda.get_device_name(0)
        out["accelerator_bytes"] = int(torch.cuda.memory_allocated())
    print(json.dumps(out))
__jupyter_pause_resources(); del __jupyter_pause_resources
"""

RESTORE = r"""
import json as __j
from jupyter_pause import kernel_ops as __ko
print(__j.dumps(__ko.restore(notebook={path!r}, dir=None, checkpoint_id=None)))
del __j, __ko
"""


def _code_cells(nb: dict[str, Any]) -> list[str]:
    out = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            if src.strip():
                out.append(src)
    return out


def _gpu_pids() -> set[int] | None:
    """PIDs holding an NVIDIA accelerator, or None when there is no nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {int(x) for x in out.split() if x.strip().isdigit()}


# ---------------------------------------------------------------------- the trial


class Trial:
    def __init__(
        self,
        client: PauseClient,
        path: str,
        *,
        local: bool = True,
        checkpoint_dir: Path | None = None,
        expect_live: str = "auto",
        expect_capacity_wait: bool = False,
        timeout: float = 900.0,
        log=None,
    ):
        self.client = client
        self.path = path
        self.local = local  # the server runs on this machine (process checks possible)
        self.checkpoint_dir = checkpoint_dir
        self.expect_live = expect_live
        self.expect_capacity_wait = expect_capacity_wait
        self.timeout = timeout
        self.log = log or (lambda msg: None)
        self.steps: list[Step] = []

    def _step(self, name: str) -> Step:
        self.log(f"trial: {name}")
        step = Step(name)
        self.steps.append(step)
        return step

    def run(self) -> TrialResult:
        status = self.client.status()
        backend = status.get("backend", {})
        result = TrialResult(self.path, self.client.base_url, backend, self.steps, time.time())
        if self.expect_live == "auto":
            self.expect_live = (
                "restored"
                if "snapshot" in str(backend.get("name", ""))
                else "fresh-with-checkpoint"
            )
        try:
            self._run()
        except Exception as e:  # reported, never hidden: the table shows where it stopped
            result.error = f"{type(e).__name__}: {e}"
        finally:
            try:
                self._cleanup()
            except Exception as e:
                result.error = result.error or f"cleanup: {type(e).__name__}: {e}"
        result.finished = time.time()
        return result

    # .................................................................. steps
    def _run(self) -> None:
        """The trial's steps, in order; each raises where the next cannot go on."""
        kernel_id = self._run_notebook()
        self._pause(kernel_id)
        kernel_id, outcome = self._resume()
        self._checkpoint_restore(kernel_id, outcome)

    def _run_notebook(self) -> str:
        """1. Run the notebook's code cells, record what it holds, plant the probe: the
        kernel's id."""
        c, path = self.client, self.path
        model = c.request("GET", f"api/contents/{path}", content=1, type="notebook")
        nb = model["content"]
        meta = (nb.get("metadata") or {}).get("jupyter_pause", {}).get("trial", {})
        cells = _code_cells(nb)
        self.use_model = meta.get("use_model") or (cells[-1] if cells else "")
        self.ignore = set(meta.get("ignore", []))
        step = self._step("run")
        t0 = time.monotonic()
        session = c.open_notebook(path)
        kernel_id = session["kernel"]["id"]
        c.status()  # let the server see the new kernel (it watches cell activity from then on)
        failed = None
        for i, src in enumerate(cells):
            res = c.execute(kernel_id, src, self.timeout)
            if not res.ok:
                failed = f"cell {i + 1}: {res.error or res.status}"
                break
        step.seconds = time.monotonic() - t0
        if not step.check("all cells ran", failed is None, failed or f"{len(cells)} code cells"):
            raise RuntimeError(f"the notebook failed: {failed}")
        res = c.evaluate(kernel_id, RESOURCES)
        step.info["resources"] = res
        step.info["allocation_time"] = time.time()
        acc = res.get("accelerator")
        step.check(
            "resources recorded",
            True,
            f"pid {res['pid']}, RSS {format_bytes(res['rss_bytes'])}, "
            + (
                f"{acc}: {format_bytes(res['accelerator_bytes'])}"
                if acc
                else "no accelerator in use"
            ),
        )
        self.planted = probe_mod.plant(c, path, checkpoint=False, timeout=self.timeout)
        step.check(
            "probe planted", True, f"nonce in kernel memory, file {Path(self.planted.file).name}"
        )
        self.before = c.evaluate(kernel_id, FINGERPRINT)
        self.files_before = self._files()
        step.info["state_names"] = sorted(self.before)
        self.kernel_pid = res["pid"]
        return kernel_id

    def _pause(self, kernel_id: str) -> None:
        """2. Pause: the kernel and its accelerator are released, its checkpoint and the
        notebook's files kept."""
        c, path = self.client, self.path
        step = self._step("pause")
        t0 = time.monotonic()
        op = c.wait(c.pause(path), self.timeout)
        step.seconds = time.monotonic() - t0
        if not step.check("pause succeeded", op.get("outcome") == "succeeded", op.get("error", "")):
            raise RuntimeError(f"pause failed: {op.get('error')}")
        s = c.session_status(path) or {}
        step.check("session is paused", s.get("state") == "paused", f"state {s.get('state')}")
        step.check("kernel is gone", not c.kernel_exists(kernel_id), f"kernel {kernel_id[:8]}")
        if self.local:
            alive = pid_alive(self.kernel_pid)
            step.check("kernel process exited", not alive, f"pid {self.kernel_pid}")
            pids = _gpu_pids()
            if pids is None:
                step.check(
                    "accelerator free", not alive, "no nvidia-smi: the kernel process holds nothing"
                )
            else:
                step.check(
                    "accelerator free",
                    self.kernel_pid not in pids,
                    f"{len(pids)} other process(es) on the accelerator",
                )
        cps = c.checkpoints(path)
        step.bytes = cps[-1].get("bytes") if cps else None
        files = self._files()
        step.check(
            "checkpoint kept",
            bool(cps),
            f"{len(cps)} checkpoint(s), latest {format_bytes(step.bytes)}",
        )
        step.check(
            "files kept",
            files == self.files_before,
            f"{len(files)} files, {format_bytes(sum(files.values()))} in the notebook's folder",
        )
        step.info["storage"] = {"checkpoints": cps, "files": files}
        self.skipped = set()
        try:
            for e in c.events(since=time.time() - 3600):
                if e.get("path") == path and e.get("type") == "checkpoint-finished":
                    self.skipped = set(e.get("data", {}).get("skipped") or [])
        except ClientError:
            pass

    def _resume(self) -> tuple[str | None, dict[str, Any]]:
        """3. Resume, once however often it is asked: the model cell runs on the state it
        had (the new kernel's id, and what the probe found)."""
        c, path = self.client, self.path
        step = self._step("resume")
        t0 = time.monotonic()
        op = c.resume(path)
        competing = self._second_resume(op)
        step.check(
            "no competing restore",
            competing is None,
            competing or "second request refused or joined",
        )
        if self.expect_capacity_wait:
            seen = self._wait_for_state("waiting-for-capacity", op)
            step.check(
                "reports waiting-for-capacity", seen, "while compatible capacity is unavailable"
            )
        op = c.wait(op, self.timeout)
        if not step.check(
            "resume succeeded", op.get("outcome") == "succeeded", op.get("error", "")
        ):
            raise RuntimeError(f"resume failed: {op.get('error')}")
        kernel_id = probe_mod.kernel_of(c, path)
        res = c.execute(kernel_id, self.use_model, self.timeout) if kernel_id else None
        step.seconds = time.monotonic() - t0
        step.check(
            "model cell runs",
            bool(res and res.ok),
            (res.error if res else "no kernel") or "request -> usable",
        )
        self._compare_state(step, kernel_id)
        self._compare_files(step)
        outcome = probe_mod.check(c, self.planted, resume=False)
        step.info["probe"] = outcome
        step.check(
            "live state as expected",
            outcome["outcome"] == self.expect_live,
            f"probe: {outcome['outcome']} (expected {self.expect_live})",
        )
        step.check("probe file present", outcome["file"] == "present", outcome["file"])
        step.info["session"] = c.session_status(path) or {}
        return kernel_id, outcome

    def _checkpoint_restore(self, kernel_id: str | None, outcome: dict[str, Any]) -> None:
        """4. The comparison path: the checkpoint restored into a fresh kernel."""
        c, path = self.client, self.path
        step = self._step("checkpoint-restore")
        t0 = time.monotonic()
        c.restart_kernel(kernel_id)
        after_restart = c.evaluate(kernel_id, "import json, os; print(json.dumps(os.getpid()))")
        fresh = after_restart != outcome.get("pid_after")
        step.check("fresh kernel", fresh, f"pid {after_restart}")
        restored = c.evaluate(kernel_id, RESTORE.format(path=path), self.timeout)
        res = c.execute(kernel_id, self.use_model, self.timeout)
        step.seconds = time.monotonic() - t0
        step.bytes = restored.get("bytes")
        step.check(
            "checkpoint restored",
            bool(restored.get("id")),
            f"{restored.get('id')}: {len(restored.get('restored', []))} objects",
        )
        step.check("model cell runs", res.ok, res.error or "request -> usable")
        self._compare_state(step, kernel_id)
        outcome = probe_mod.check(c, self.planted, resume=False)
        step.check(
            "probe: fresh-with-checkpoint",
            outcome["outcome"] == "fresh-with-checkpoint",
            f"probe: {outcome['outcome']}",
        )

    # .................................................................. helpers
    def _second_resume(self, first: dict[str, Any]) -> str | None:
        """A second resume while the first runs must not start another restore."""
        try:
            second = self.client.resume(self.path)
        except ClientError as e:
            if e.status in (400, 409):
                return None
            return f"unexpected HTTP {e.status}: {e}"
        if second.get("id") == first.get("id"):
            return None
        first_now = self.client.operation(first["id"])
        if first_now.get("outcome") != "running":
            # the first had already finished: not concurrent; wait for this one too
            self.client.wait(second, self.timeout)
            return None
        return f"a second operation {second.get('id')} started while {first.get('id')} ran"

    def _wait_for_state(self, state: str, op: dict[str, Any], timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.client.session_status(self.path) or {}
            if s.get("state") == state:
                return True
            if self.client.operation(op["id"]).get("outcome") != "running":
                return False
            time.sleep(0.2)
        return False

    def _compare_state(self, step: Step, kernel_id: str | None) -> None:
        after = self.client.evaluate(kernel_id, FINGERPRINT) if kernel_id else {}
        expected = {
            k: v
            for k, v in self.before.items()
            if k not in self.ignore and k not in self.skipped and not v.startswith("error:")
        }
        missing = sorted(k for k in expected if k not in after)
        changed = sorted(k for k in expected if k in after and after[k] != expected[k])
        detail = (
            f"{len(expected) - len(missing) - len(changed)} of {len(expected)} objects identical"
        )
        if self.skipped:
            detail += f"; not saved by design: {', '.join(sorted(self.skipped))}"
        if missing:
            detail += f"; missing: {', '.join(missing)}"
        if changed:
            detail += f"; changed: {', '.join(changed)}"
        step.check("live state restored", not missing and not changed, detail)

    def _files(self) -> dict[str, int]:
        folder = os.path.dirname(self.path)
        try:
            listing = self.client.request("GET", f"api/contents/{folder}", content=1)
        except ClientError:
            return {}
        return {
            f["path"]: int(f.get("size") or 0)
            for f in listing.get("content", [])
            if f.get("type") != "directory" and f["path"] != self.path
        }

    def _compare_files(self, step: Step) -> None:
        now = self._files()
        missing = sorted(set(self.files_before) - set(now))
        changed = sorted(
            k for k in self.files_before if k in now and now[k] != self.files_before[k]
        )
        detail = f"{len(self.files_before)} files"
        if missing:
            detail += f"; missing: {', '.join(missing)}"
        if changed:
            detail += f"; changed size: {', '.join(changed)}"
        step.check("files as before", not missing and not changed, detail)

    def _cleanup(self) -> None:
        c, path = self.client, self.path
        step = self._step("cleanup")
        t0 = time.monotonic()
        with contextlib.suppress(ClientError):
            c.close_notebook(path)
        cps = []
        try:
            cps = c.checkpoints(path)
            for cp in cps:
                c.delete_checkpoint(path, cp["id"])
            left = c.checkpoints(path)
            step.check("checkpoints deleted", not left, f"{len(cps)} deleted, {len(left)} left")
        except ClientError as e:
            step.check("checkpoints deleted", False, str(e))
        planted = getattr(self, "planted", None)
        if planted is not None:
            rel = os.path.join(os.path.dirname(path), os.path.basename(planted.file)).lstrip("/")
            with contextlib.suppress(ClientError):
                c.delete_file(rel)
            try:
                c.request("GET", f"api/contents/{rel}", content=0)
                gone = False
            except ClientError as e:
                gone = e.status == 404
            step.check("probe file deleted", gone, rel)
        if self.checkpoint_dir is not None and self.checkpoint_dir.exists():
            left = [
                p
                for p in self.checkpoint_dir.rglob("*")
                if p.is_file() and not p.name.startswith(".")
            ]
            size = sum(p.stat().st_size for p in left)
            step.check(
                "no checkpoint data on disk",
                not any(p.suffix in (".safetensors", ".pickle", ".pkl") for p in left),
                f"{len(left)} file(s), {format_bytes(size)} left under the checkpoint folder",
            )
            step.bytes = size
        step.seconds = time.monotonic() - t0


def run_trial(
    notebook: str,
    *,
    url: str | None = None,
    token: str = "",
    backend: str = "local",
    expect_live: str = "auto",
    expect_capacity_wait: bool = False,
    timeout: float = 900.0,
    keep: bool = False,
    server_args: list[str] | None = None,
    server_env: dict[str, str] | None = None,
    log=None,
) -> TrialResult:
    """Run the trial on ``notebook``: a server-relative path with ``url``, else a
    local file copied into a fresh server of our own (stopped and removed after)."""
    if url:
        client = PauseClient(url, token)
        host = url.split("//", 1)[-1].split("/", 1)[0].split(":")[0]
        trial = Trial(
            client,
            notebook,
            local=host in ("localhost", "127.0.0.1", "::1"),
            expect_live=expect_live,
            expect_capacity_wait=expect_capacity_wait,
            timeout=timeout,
            log=log,
        )
        return trial.run()
    src = Path(notebook)
    if not src.is_file():
        raise FileNotFoundError(notebook)
    work = Path(tempfile.mkdtemp(prefix="jupyter-pause-trial-"))
    root = work / "root"
    (root / "trial").mkdir(parents=True)
    shutil.copy(src, root / "trial" / src.name)
    server = LocalServer(
        root_dir=root,
        state_dir=work / "state",
        backend=backend,
        extra_args=list(server_args or []),
        env=dict(server_env or {}),
    )
    try:
        client = server.start()
        trial = Trial(
            client,
            f"trial/{src.name}",
            local=True,
            checkpoint_dir=server.checkpoint_dir,
            expect_live=expect_live,
            expect_capacity_wait=expect_capacity_wait,
            timeout=timeout,
            log=log,
        )
        result = trial.run()
        if not result.passed:
            result.backend = {**result.backend, "server_log_tail": server.log_tail(2000)}
        return result
    finally:
        server.stop()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def write_json(result: TrialResult, path: str) -> None:
    with open(path, "w") as f:
        json.dump(result.to_json(), f, indent=1, default=str)
