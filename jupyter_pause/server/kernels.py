"""Kernels as the server sees them: start them ready for pausing, talk to them.

Two jobs:

* :class:`PauseKernelManager` starts IPython kernels with the jupyter_pause
  IPython extension loaded (so ``%checkpoint`` and ``%pause`` work with no
  user action) and tells each kernel which notebook it belongs to.
* :func:`call_in_kernel` runs one function of :mod:`jupyter_pause.kernel_ops`
  inside a kernel and returns its JSON result, without touching the user's
  execution counter or history; how far a long call has got (the kernel's
  :class:`~jupyter_pause.protocol.CallProgress`) is handed to ``on_progress`` as it runs.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import time
from collections.abc import Callable
from queue import Empty
from typing import Any

from jupyter_server.services.kernels.kernelmanager import ServerKernelManager
from traitlets import Callable as CallableTrait
from traitlets import Dict

from ..protocol import (
    NOTEBOOK_ENV,
    PROGRESS_MIME,
    SERVER_TOKEN_ENV,
    SERVER_URL_ENV,
    CallProgress,
)

#: Seconds between two looks at whether a kernel we wait on is still alive.
DEATH_POLL_INTERVAL = 0.5


class KernelCallError(Exception):
    """The kernel raised, or did not answer in time."""


class KernelDied(KernelCallError):
    """The kernel's process exited (or Jupyter restarted it) while we waited on it:
    whatever it held in memory is gone."""


def _is_ipykernel(argv: list[str]) -> bool:
    return any("ipykernel" in part for part in argv)


class PauseKernelManager(ServerKernelManager):
    """A ServerKernelManager that prepares IPython kernels for pausing."""

    pause_settings = Dict(
        help="The server's settings the kernel's magics and engine honour (where "
        "checkpoints live, how many are kept), as environment variables: handed over by "
        "PauseApp when it builds the manager (Checkpointer.kernel_settings)."
    )

    before_stop = CallableTrait(
        None,
        allow_none=True,
        help="``async (pid)``, awaited before the kernel's process is stopped or restarted "
        "(a shutdown, a cull, a restart): the hibernator locks and checkpoints a process "
        "whose GPU memory it ever restored (server/hibernate.py). Handed over by PauseApp.",
    )

    async def shutdown_kernel(self, now: bool = False, restart: bool = False):
        await self._before_stop()
        return await super().shutdown_kernel(now=now, restart=restart)

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False):
        # a restart reaches here without passing through shutdown_kernel
        await self._before_stop()
        return await super()._async_shutdown_kernel(now=now, restart=restart)

    async def _before_stop(self) -> None:
        if self.before_stop is not None:
            await self.before_stop(_pid(self))

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        # a shutdown waits for the process to exit: heard as it exits (its pidfd), not at
        # jupyter_client's next look (every 0.1 s, then again in the provisioner's wait)
        pid = _pid(self)
        if pid is not None and await self._async_is_alive():
            await process_exit(pid)
        await super()._async_wait(pollinterval)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        if _is_ipykernel(cmd) and "--ext=jupyter_pause" not in cmd:
            cmd.append("--ext=jupyter_pause")
        return cmd

    async def _async_pre_start_kernel(self, **kw: Any):
        kw["env"] = {**(kw.get("env") or os.environ), **self._pause_env(kw.get("env") or {})}
        return await super()._async_pre_start_kernel(**kw)

    def _pause_env(self, env: dict[str, str]) -> dict[str, str]:
        """What the kernel-side helpers need to know about their server.

        The notebook's server-relative path keys its checkpoints; the server
        URL and token let ``%pause`` ask this server to pause the notebook.
        The token is the user's own (any process of the user can read it from
        the runtime directory), so handing it to the user's kernel grants
        nothing new.
        """
        extra: dict[str, str] = {}
        mapping = self.parent  # the server's MappingKernelManager
        serverapp = getattr(mapping, "parent", None)
        session_name = env.get("JPY_SESSION_NAME")
        root_dir = getattr(mapping, "root_dir", None)
        if session_name and root_dir:
            notebook = session_name
            if os.path.isabs(session_name):
                notebook = os.path.relpath(session_name, root_dir)
            extra[NOTEBOOK_ENV] = notebook.replace(os.sep, "/")
        extra.update(self.pause_settings)
        if serverapp is not None:
            extra[SERVER_URL_ENV] = serverapp.connection_url
            token = getattr(serverapp.identity_provider, "token", "")
            if token:
                extra[SERVER_TOKEN_ENV] = token
        return extra


async def call_in_kernel(
    kernel_manager,
    function: str,
    timeout: float = 60,
    on_progress: Callable[[CallProgress], None] | None = None,
    on_answering: Callable[[], None] | None = None,
    **kwargs: Any,
) -> Any:
    """Call ``jupyter_pause.kernel_ops.<function>(**kwargs)`` in a kernel.

    The call travels as a *user expression* of a silent execute request: it
    leaves no trace in the notebook (no execution count, no history, no
    output) and its JSON return value comes back in the reply.  What the call
    says of its progress meanwhile (display data of :data:`PROGRESS_MIME` on
    IOPub, under this request) goes to ``on_progress``; ``on_answering`` is called
    once the kernel has answered (its ``kernel_info`` reply), just before the call is
    sent.
    """
    expression = (
        "__import__('jupyter_pause.kernel_ops', fromlist=['_']).call("
        f"{function!r}, {json.dumps(json.dumps(kwargs))})"
    )
    client = kernel_manager.client()
    # no heartbeat: the kernel's death is watched below, and jupyter_client's heartbeat
    # thread, stopped as it starts (a call that ends at once), spins making sockets
    # until zmq refuses ("Too many open files"), thousands of descriptors meanwhile
    client.start_channels(hb=False)
    died = asyncio.ensure_future(wait_for_death(kernel_manager))
    call = asyncio.ensure_future(_execute(client, expression, timeout, on_progress, on_answering))
    try:
        await asyncio.wait({call, died}, return_when=asyncio.FIRST_COMPLETED)
        if not call.done():
            failed = died.exception()
            raise KernelDied(
                f"its process cannot be reached: {failed}" if failed else died.result()
            )
        reply = call.result()
    except TimeoutError as e:
        message = str(e) or f"the kernel did not answer within {timeout:.0f} s"
        raise KernelCallError(message) from e
    finally:
        for task in (call, died):
            task.cancel()
        client.stop_channels()
    result = reply["content"].get("user_expressions", {}).get("result", {})
    if result.get("status") != "ok":
        name, value = result.get("ename", "Error"), result.get("evalue", "")
        raise KernelCallError(f"{name}: {value}" if value else name)
    payload = json.loads(ast.literal_eval(result["data"]["text/plain"]))
    if payload.get("error"):
        raise KernelCallError(payload["error"])
    return payload.get("result")


async def _execute(
    client,
    expression: str,
    timeout: float,
    on_progress: Callable[[CallProgress], None] | None,
    on_answering: Callable[[], None] | None,
) -> dict:
    """The reply to a silent execute request of ``expression``: its shell reply, which
    holds the result. Not its ``idle`` status on IOPub (``execute_interactive`` waits for
    that first): the kernel publishes it after the reply, from a thread that shares the
    interpreter lock with the background work a restore starts then (``import torch``)."""
    await _wait_for_ready(client, min(timeout, 60))
    if on_answering is not None:
        on_answering()
    asked = client.execute(
        "", silent=True, store_history=False, user_expressions={"result": expression}
    )
    progress = asyncio.ensure_future(_progress(client, asked, on_progress)) if on_progress else None
    try:
        reply = await _shell_reply(client, asked, timeout)
        if reply is None:
            raise TimeoutError
        return reply
    finally:
        if progress is not None:
            progress.cancel()


async def _progress(client, asked: str, on_progress: Callable[[CallProgress], None]) -> None:
    """Hand what the call says of its progress (display data under its request) to
    ``on_progress``, until cancelled."""
    while True:
        msg = await client.iopub_channel.get_msg()
        if msg["parent_header"].get("msg_id") != asked or msg["msg_type"] != "display_data":
            continue
        progress = msg["content"].get("data", {}).get(PROGRESS_MIME)
        if progress is not None:
            on_progress(CallProgress.from_json(progress))


async def _shell_reply(client, asked: str, timeout: float) -> dict | None:
    """The shell reply to the request ``asked``, the replies to earlier ones dropped;
    None when it has not come within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = await client.shell_channel.get_msg(
                timeout=max(0.0, deadline - time.monotonic())
            )
        except Empty:
            return None
        if reply["parent_header"].get("msg_id") == asked:
            return reply


async def _wait_for_ready(client, timeout: float) -> None:
    """Return once the kernel answers on its shell channel and this client hears its
    IOPub: jupyter_client's ``wait_for_ready`` without its last step, which then waits
    for 0.2 s of silence on IOPub to drop what came before (0.2 s added to every call);
    :func:`_execute` reads only its own request's messages, so it has nothing to drop.
    A kernel that has not bound its sockets yet gets the request again each second, and
    answers each once it has: the answers to the earlier ones are passed over."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        asked = client.kernel_info()
        if await _shell_reply(client, asked, min(1.0, deadline - time.monotonic())) is None:
            continue
        try:  # its busy status for this request: IOPub is connected
            await client.iopub_channel.get_msg(timeout=0.2)
        except Empty:
            continue
        return
    raise TimeoutError(f"the kernel did not answer within {timeout:.0f} s")


async def wait_for_death(kernel_manager) -> str:
    """Return (with what happened) once the kernel's process is gone or replaced.

    Two sources, whichever speaks first: Jupyter's restarter callbacks (it
    noticed the death and restarts the kernel, or gave up), and the process
    itself, polled, so that a death is seen even with auto-restart off.
    A kernel that died is never waited on for the length of a call timeout.
    """
    loop = asyncio.get_running_loop()
    told: asyncio.Future[str] = loop.create_future()

    def on_restart() -> None:
        if not told.done():
            told.set_result("its process died and Jupyter restarted it as a fresh kernel")

    def on_dead() -> None:
        if not told.done():
            told.set_result("its process died and Jupyter could not restart it")

    # remote kernel managers (a gateway) have no restarter here: poll only
    callbacks = hasattr(kernel_manager, "add_restart_callback")
    if callbacks:
        kernel_manager.add_restart_callback(on_restart, "restart")
        kernel_manager.add_restart_callback(on_dead, "dead")
    pid = _pid(kernel_manager)
    try:
        while not told.done():
            if not await kernel_manager.is_alive():
                return "its process exited"
            if pid is not None and _pid(kernel_manager) not in (pid, None):
                return "its process died and Jupyter restarted it as a fresh kernel"
            await asyncio.wait({told}, timeout=DEATH_POLL_INTERVAL)
        return told.result()
    finally:
        if callbacks:
            kernel_manager.remove_restart_callback(on_restart, "restart")
            kernel_manager.remove_restart_callback(on_dead, "dead")


async def process_exit(pid: int) -> None:
    """Return once the process ``pid`` (a child of this one, not yet reaped) has exited,
    told by its pidfd (Linux); at once where there is none to open."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # another system, or it is gone already
        return
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    loop.add_reader(fd, lambda: exited.done() or exited.set_result(None))
    try:
        await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _pid(kernel_manager) -> int | None:
    return getattr(getattr(kernel_manager, "provisioner", None), "pid", None)
