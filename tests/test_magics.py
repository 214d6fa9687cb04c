"""%checkpoint / %restore: in-process (InteractiveShell) and in real ipykernel kernels."""

from __future__ import annotations

import os
import queue

import pytest
from IPython.core.error import UsageError


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("JUPYTER_PAUSE_CHECKPOINT_DIR", str(tmp_path / "ck"))
    monkeypatch.setenv("JPY_SESSION_NAME", "work/demo.ipynb")
    monkeypatch.setenv("JUPYTER_PAUSE_PROGRESS_AFTER", "3600")
    from jupyter_pause.engine import tracking

    untrack_all(tracking)
    yield tmp_path
    untrack_all(tracking)


@pytest.fixture
def ip(env):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_pause")
    yield shell
    InteractiveShell.clear_instance()


def test_load_extension_is_idempotent(ip):
    from jupyter_pause import load_ipython_extension
    from jupyter_pause.magics import PauseMagics

    first = ip.magics_manager.registry["PauseMagics"]
    load_ipython_extension(ip)
    load_ipython_extension(ip)
    assert ip.magics_manager.registry["PauseMagics"] is first
    assert isinstance(first, PauseMagics)
    assert {"checkpoint", "restore"} <= set(ip.magics_manager.magics["line"])


def test_checkpoint_list_restore(ip, capsys):
    ip.run_cell(
        "import numpy as np\nclass Box:\n    def __init__(self, v): self.v = v\nb = Box(np.arange(3))\nn = 5"
    )
    ip.run_line_magic("checkpoint", "")
    ip.run_line_magic("checkpoint", "n")
    capsys.readouterr()
    ip.run_line_magic("checkpoint", "--list")
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:2] == ["id", "time"] and len(lines) == 3
    first_id = lines[1].split()[0]
    assert "Box, b, n" in lines[1] and lines[2].endswith(" n")
    ip.run_cell("del b, Box\nn = 0")
    ip.run_line_magic("restore", "")  # latest: only n
    assert ip.user_ns["n"] == 5 and "b" not in ip.user_ns
    ip.run_line_magic("restore", f"{first_id} b")
    assert ip.user_ns["b"].v.tolist() == [0, 1, 2] and "Box" not in ip.user_ns
    ip.run_line_magic("restore", f"--device cpu {first_id}")
    assert type(ip.user_ns["b"]) is ip.user_ns["Box"]


def test_errors_are_usage_errors(ip):
    with pytest.raises(UsageError, match="CheckpointNotFound"):
        ip.run_line_magic("restore", "")
    with pytest.raises(UsageError, match="UnknownName.*'missing'"):
        ip.run_line_magic("checkpoint", "missing")


@pytest.mark.parametrize(
    "magic, option", [("checkpoint", "--keep"), ("restore", "--device"), ("pause", "--resume-at")]
)
def test_help_prints_the_options_and_does_nothing_else(ip, env, capsys, magic, option):
    ip.run_cell("x = 1")
    for flag in ("--help", "-h"):
        assert ip.run_line_magic(magic, flag) is None
        out = capsys.readouterr().out
        assert f"%{magic} [" in out and option in out and "--help" in out
    assert not (env / "ck").exists()  # nothing saved, nothing restored


def test_dir_and_trust_options(ip, env):
    other = env / "elsewhere"
    ip.run_cell("z = 3")
    ip.run_line_magic("checkpoint", f"--dir {other}")
    ip.run_cell("z = 0")
    ip.run_line_magic("restore", f"--dir {other} --trust")
    assert ip.user_ns["z"] == 3


# ------------------------------------------------------------------ real kernels
def _run(kc, code, timeout=60):
    """Execute code; return (status, stdout+stderr text, display messages)."""
    msg_id = kc.execute(code)
    out, displays = [], []
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"timeout running {code!r}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        t = msg["msg_type"]
        if t == "stream":
            out.append(msg["content"]["text"])
        elif t in ("display_data", "update_display_data"):
            displays.append(msg)
        elif t == "error":
            out.append("\n".join(msg["content"]["traceback"]))
        elif t == "status" and msg["content"]["execution_state"] == "idle":
            break
    # the reply to this request: a slow kernel start can leave extra
    # kernel_info replies (wait_for_ready asks again) ahead of it
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"]["status"], "".join(out), displays


@pytest.fixture
def kernel_env(env):
    e = dict(os.environ)
    e["JUPYTER_PAUSE_PROGRESS_AFTER"] = "0"  # show the bar even for small data
    return e


def start(kernel_env):
    from jupyter_client.manager import start_new_kernel

    return start_new_kernel(kernel_name="python3", env=kernel_env, startup_timeout=60)


@pytest.mark.timeout(180)
def test_pause_in_one_kernel_restore_in_another(kernel_env):
    km, kc = start(kernel_env)
    try:
        status, out, displays = _run(
            kc,
            "%load_ext jupyter_pause\n"
            "import torch\n"
            "class Head(torch.nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = torch.nn.Linear(256, 256)\n"
            "    def forward(self, x): return self.fc(x) * 2\n"
            "torch.manual_seed(0)\n"
            "model = Head().to(torch.bfloat16)\n"
            "tied = model.fc.weight\n"
            "expected = model(torch.ones(256, dtype=torch.bfloat16))\n"
            "%checkpoint\n",
        )
        assert status == "ok", out
        texts = [d["content"]["data"].get("text/plain", "") for d in displays]
        assert any("checkpoint [" in t for t in texts), texts  # the bar, in the cell
        assert any(t.startswith("checkpoint 20") for t in texts), texts  # then the summary
        assert any(d["msg_type"] == "update_display_data" for d in displays)
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()

    km, kc = start(kernel_env)
    try:
        status, out, _ = _run(
            kc,
            "%load_ext jupyter_pause\n%restore\n"
            "assert torch.equal(model(torch.ones(256, dtype=torch.bfloat16)), expected)\n"
            "assert type(model).__name__ == 'Head' and isinstance(model, torch.nn.Module)\n"
            "assert tied is model.fc.weight\n"
            "print('RESTORED', type(model).__module__)\n",
        )
        assert status == "ok", out
        assert "RESTORED __main__" in out
        status, out, _ = _run(kc, "%restore 1999-01-01T00-00-00")
        assert status == "error" and "CheckpointNotFound" in out
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()


@pytest.mark.timeout(120)
def test_extension_does_not_import_torch_at_load(kernel_env):
    km, kc = start(kernel_env)
    try:
        status, out, _ = _run(
            kc,
            "import sys\n%load_ext jupyter_pause\nprint('torch' in sys.modules, 'numpy' in sys.modules)",
        )
        assert status == "ok" and "False" in out.split()[0], out
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()


@pytest.mark.timeout(300)
def test_lazy_restore_in_a_real_kernel(kernel_env):
    """%restore returns before a 36 MB tensor is read; the next cell that uses it sees it
    whole (the pre_run_cell hook waits for it), one that does not runs at once;
    %restore --eager reads everything first."""
    km, kc = start(kernel_env)
    try:
        status, out, _ = _run(
            kc,
            "%load_ext jupyter_pause\nimport torch\ntorch.manual_seed(0)\n"
            "big = torch.randn(3000, 3000)\nopt_like = [big]\nn = 3\nexpected = float(big.sum())\n"
            "%checkpoint -q",
        )
        assert status == "ok", out
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()
    km, kc = start(kernel_env)
    try:
        status, out, displays = _run(kc, "%load_ext jupyter_pause\n%restore")
        summary = out + "".join(m["content"]["data"].get("text/plain", "") for m in displays)
        assert status == "ok" and "loading in the background: big, opt_like" in summary, summary
        status, out, _ = _run(kc, "print(n * 2)")
        assert status == "ok" and "6" in out, out
        status, out, _ = _run(
            kc,
            "assert float(big.sum()) == expected and opt_like[0] is big\nprint('WHOLE')",
        )
        assert status == "ok" and "WHOLE" in out, out
        status, out, _ = _run(
            kc,
            "del big, opt_like\n%restore --eager\n"
            "import jupyter_pause.engine.lazy as lz\nprint('ACTIVE', lz.active())",
        )
        assert status == "ok" and "ACTIVE None" in out, out
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()


def untrack_all(tracking) -> None:
    for name in tracking.tracked():
        tracking.untrack(name)
