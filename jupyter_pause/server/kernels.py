"""Kernels as the server sees them: start them ready for pausing, talk to them.

Two jobs:

* :class:`PauseKernelManager` starts IPython kernels with the jupyter_pause
  IPython extension loaded (so ``%checkpoint`` and ``%pause`` work with no
  user action) and tells each kernel which notebook it belongs to.
* :func:`call_in_kernel` runs one function of :mod:`jupyter_pause.kernel_ops`
  inside a kernel and returns its JSON result, without touching the user's
  execution counter or history.
"""

from __future__ import annotations

import ast
import json
import os
from typing import Any

from jupyter_server.services.kernels.kernelmanager import ServerKernelManager

NOTEBOOK_ENV = "JUPYTER_PAUSE_NOTEBOOK"
CHECKPOINT_DIR_ENV = "JUPYTER_PAUSE_CHECKPOINT_DIR"
SERVER_URL_ENV = "JUPYTER_PAUSE_SERVER_URL"
SERVER_TOKEN_ENV = "JUPYTER_PAUSE_SERVER_TOKEN"


class KernelCallError(Exception):
    """The kernel raised, or did not answer in time."""


def _is_ipykernel(argv: list[str]) -> bool:
    return any("ipykernel" in part for part in argv)


class PauseKernelManager(ServerKernelManager):
    """A ServerKernelManager that prepares IPython kernels for pausing."""

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
        if serverapp is not None:
            manager = serverapp.web_app.settings.get("jupyter_pause_manager")
            if manager is not None and manager.checkpoint_dir:
                extra[CHECKPOINT_DIR_ENV] = manager.checkpoint_dir
            extra[SERVER_URL_ENV] = serverapp.connection_url
            token = getattr(serverapp.identity_provider, "token", "")
            if token:
                extra[SERVER_TOKEN_ENV] = token
        return extra


async def call_in_kernel(kernel_manager, function: str, timeout: float = 60, **kwargs: Any) -> Any:
    """Call ``jupyter_pause.kernel_ops.<function>(**kwargs)`` in a kernel.

    The call travels as a *user expression* of a silent execute request: it
    leaves no trace in the notebook (no execution count, no history, no
    output) and its JSON return value comes back in the reply.
    """
    expression = (
        "__import__('jupyter_pause.kernel_ops', fromlist=['_']).call("
        f"{function!r}, {json.dumps(json.dumps(kwargs))})"
    )
    client = kernel_manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=min(timeout, 60))
        reply = await client.execute_interactive(
            "",
            silent=True,
            store_history=False,
            user_expressions={"result": expression},
            timeout=timeout,
            output_hook=lambda msg: None,
        )
    except TimeoutError as e:
        raise KernelCallError(f"the kernel did not answer within {timeout:.0f} s") from e
    finally:
        client.stop_channels()
    result = reply["content"].get("user_expressions", {}).get("result", {})
    if result.get("status") != "ok":
        name, value = result.get("ename", "Error"), result.get("evalue", "")
        raise KernelCallError(f"{name}: {value}" if value else name)
    payload = json.loads(ast.literal_eval(result["data"]["text/plain"]))
    if payload.get("error"):
        raise KernelCallError(payload["error"])
    return payload.get("result")
