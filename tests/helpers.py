"""Helpers for tests that drive a real server and real kernels."""

import asyncio
import json
import time
from pathlib import Path

#: this repository: on a server's PYTHONPATH, its kernels import this checkout
REPO = Path(__file__).resolve().parent.parent


async def start_session(jp_fetch, path):
    r = await jp_fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps(
            {"path": path, "type": "notebook", "name": "demo.ipynb", "kernel": {"name": "python3"}}
        ),
    )
    return json.loads(r.body)


def start_client(jp_serverapp, kernel_id):
    """A client of the server's kernel, its channels started: without the heartbeat,
    which the kernel manager makes needless, and whose thread, stopped as it starts
    (a client closed at once), spins making sockets until zmq refuses ("Too many open
    files" in a test worker, thousands of descriptors meanwhile)."""
    client = jp_serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels(hb=False)
    return client


async def wait_for_state(jp_serverapp, kernel_id, state="idle", timeout=60):
    """Wait until the server reports ``state`` for the kernel.

    A new kernel reports "starting" until it answers a request that the
    server sees on IOPub, so keep asking for kernel_info meanwhile.
    """
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    client = kernel.client()
    client.start_channels(hb=False)  # see start_client
    try:
        for _ in range(int(timeout / 0.2)):
            if kernel.execution_state == state:
                return
            if kernel.execution_state == "starting":
                client.kernel_info()
            await asyncio.sleep(0.2)
    finally:
        client.stop_channels()
    raise AssertionError(f"kernel never became {state} (it is {kernel.execution_state})")


async def execute(jp_serverapp, kernel_id, code, timeout=60):
    """Run ``code`` in the kernel as a user cell; returns the text of its result."""
    client = start_client(jp_serverapp, kernel_id)
    outputs = []

    def hook(msg):
        if msg["msg_type"] in ("execute_result", "stream", "error"):
            outputs.append(msg["content"])

    try:
        await client.wait_for_ready(timeout=timeout)
        reply = await client.execute_interactive(code, timeout=timeout, output_hook=hook)
    finally:
        client.stop_channels()
    if reply["content"]["status"] != "ok":
        raise AssertionError(f"cell failed: {reply['content'].get('evalue')} {outputs}")
    # the server learns that the kernel is idle from its own IOPub, a little later
    # (or the cell paused the notebook, and the kernel is gone)
    kernels = jp_serverapp.kernel_manager
    await wait_until(
        lambda: kernel_id not in kernels or kernels.get_kernel(kernel_id).execution_state != "busy",
        timeout=timeout,
        what="the server seeing the cell end",
    )
    texts = []
    for out in outputs:
        if "data" in out:
            texts.append(out["data"]["text/plain"])
        elif "text" in out:
            texts.append(out["text"])
    return "".join(texts).strip()


async def running_notebook(jp_fetch, jp_serverapp, path, code):
    """A notebook session whose kernel has run ``code``; returns the kernel id."""
    model = await start_session(jp_fetch, path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await execute(jp_serverapp, kernel_id, code)
    return kernel_id


async def api(jp_fetch, *parts, method="GET", body=None, **kwargs):
    """Call jupyter-pause's API; returns (status code, JSON)."""
    if body is not None:
        kwargs["body"] = json.dumps(body)
    response = await jp_fetch(
        "jupyter-pause", "api", *parts, method=method, raise_error=False, **kwargs
    )
    return response.code, (json.loads(response.body) if response.body else None)


async def wait_operation(jp_fetch, operation_id, timeout=120):
    for _ in range(int(timeout / 0.1)):
        code, op = await api(jp_fetch, "operations", operation_id)
        assert code == 200, op
        if op["outcome"] != "running":
            return op
        await asyncio.sleep(0.1)
    raise AssertionError(f"operation {operation_id} did not finish")


async def operate(jp_fetch, verb, path, **body):
    """POST sessions/<verb> for ``path``, expect 202, and wait for the operation's end."""
    code, answer = await api(jp_fetch, "sessions", verb, method="POST", body={"path": path, **body})
    assert code == 202, answer
    return await wait_operation(jp_fetch, answer["operation"]["id"])


async def session_status(jp_fetch, path):
    _, status = await api(jp_fetch, "status")
    return next(s for s in status["sessions"] if s["path"] == path)


async def wait_until(condition, timeout=60, what="the condition", interval=0.1):
    """Poll ``condition()`` (sync or async) until it is truthy; returns its value.

    Generous deadlines: a loaded 2-core machine is slow, and only the deadline
    (never a fixed sleep) decides that something did not happen.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        await asyncio.sleep(interval)


def held_cell(release, deadline=300):
    """A cell that keeps its kernel busy until the test creates the file ``release``
    (or ``deadline`` seconds pass, so that a failed test leaves no kernel spinning):
    a busy window that no loaded machine can make too short to see."""
    return (
        "import os, time\n"
        f"end = time.monotonic() + {deadline}\n"
        f"while not os.path.exists({str(release)!r}) and time.monotonic() < end:\n"
        "    time.sleep(0.02)"
    )


def gate_code(folder, *, exit_code=None):
    """Kernel code defining ``gate``, an object whose pickling (during a
    checkpoint's write, with the notebook's lock held) announces itself with
    ``<folder>/started`` and then waits for ``<folder>/release``, or, with
    ``exit_code``, kills its own kernel process on the spot."""
    action = (
        f"os._exit({exit_code})"
        if exit_code is not None
        else f"""while not os.path.exists({str(folder / "release")!r}):
            time.sleep(0.05)"""
    )
    return f"""
import os, time
class Gate:
    def __reduce__(self):
        open({str(folder / "started")!r}, "w").close()
        {action}
        return (Gate, ())
gate = Gate()
"""


def torch_gate(open_file, *, refuse=False, deadline=120) -> str:
    """Python source that holds ``import torch`` in the process that runs it first (a
    child's first lines, or a ``sitecustomize`` on a kernel's ``PYTHONPATH``): torch's own
    loader waits, before running torch's code, until ``open_file`` exists, so "this
    happened before torch was in" is certain, not a race. Only torch's module lock is held
    meanwhile, as during a slow real import. ``refuse``: torch cannot be imported at all."""
    return f"""
import importlib.abc, importlib.machinery, os, sys, time

class _HeldLoader(importlib.abc.Loader):
    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        end = time.monotonic() + {deadline}
        while not os.path.exists({str(open_file)!r}):
            if time.monotonic() > end:
                raise ImportError("the test never let torch in")
            time.sleep(0.05)
        self.real.exec_module(module)

class _TorchGate(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        if {refuse!r}:
            raise ModuleNotFoundError("No module named 'torch' (refused by the test)")
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = _HeldLoader(spec.loader)
        return spec

sys.meta_path.insert(0, _TorchGate())
"""


def kernel_torch_gate(folder, *, deadline=300):
    """Write ``<folder>/sitecustomize.py``: with ``folder`` on a server's ``PYTHONPATH``,
    its kernels (and only they: jupyter_client gives them ``JPY_PARENT_PID``) hold
    ``import torch`` until ``<folder>/open`` exists (:func:`torch_gate`), so a lazy
    restore into them stays in its background load as long as a test needs."""
    folder.mkdir(exist_ok=True)
    code = torch_gate(folder / "open", deadline=deadline)
    (folder / "sitecustomize.py").write_text(
        f"import os\nif 'JPY_PARENT_PID' in os.environ:\n    exec({code!r})\n"
    )
    return folder


def empty_notebook() -> dict:
    """A notebook with no cells, of the python3 kernel (its file's JSON)."""
    return {
        "cells": [],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip


def write_notebooks(folder: Path, *names: str) -> Path:
    """Empty python3 notebooks ``names`` in ``folder`` (made if missing); returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(json.dumps(empty_notebook()))
    return folder


def server_env(home: Path) -> dict[str, str]:
    """The environment of a server of its own: its data (the key, the cache) and its
    config under ``home``, and this checkout importable by it and its kernels."""
    return {
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "PYTHONPATH": str(REPO),
    }


def wait_for(condition, timeout=60, what="the condition", interval=0.2):
    """The blocking twin of :func:`wait_until`, for tests that drive whole
    processes (servers, hubs) from a plain thread: poll ``condition()`` until it
    is truthy, return its value; only the deadline says it did not happen.

    ``what`` may be a callable, asked only then (say, for the tail of a log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            what = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def cached_bytes(path) -> int:
    """Bytes of ``path`` in the page cache now: ``mincore`` over a private map of it
    (mapping a file reads none of it)."""
    import ctypes
    import mmap
    import os

    size = os.path.getsize(path)
    if not size:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        first = ctypes.c_char.from_buffer(m)
        status = libc.mincore(ctypes.c_void_p(ctypes.addressof(first)), ctypes.c_size_t(size), vec)
        del first  # the map closes only once nothing points into it
    if status != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return sum(v & 1 for v in vec) * mmap.PAGESIZE


def drop_cached(path) -> bool:
    """Drop ``path``'s clean pages from the page cache; False where they stay (tmpfs)."""
    import os

    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return cached_bytes(path) < os.path.getsize(path) // 4


def memfd_links(prefix: str = "/memfd:jupyter-pause-") -> list[str]:
    """What this process's descriptors open on memfds whose name starts with ``prefix``
    point at (engine/handoff.py names them ``jupyter-pause-<nonce>``)."""
    import contextlib
    import os

    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [x for x in links if x.startswith(prefix)]
