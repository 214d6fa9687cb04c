"""A pause whose checkpoint may not fit in the memory the kernel may still use is refused
up front (issue #31): the kernel keeps running with its objects, the session is `running`
and says why. The kernel's room is made small with a real limit it sets on itself
(``RLIMIT_DATA``, which binds every allocation of the process), so no root is needed."""

from .helpers import execute, operate, running_notebook, session_status

TIGHTEN = """
import resource
from pathlib import Path
_data = next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines()
             if l.startswith("VmData:"))
resource.setrlimit(resource.RLIMIT_DATA, (_data + (12 << 20), resource.getrlimit(resource.RLIMIT_DATA)[1]))
"""


async def test_a_pause_without_room_to_checkpoint_leaves_the_kernel_running(
    jp_fetch, jp_serverapp, notebook_path
):
    kernel_id = await running_notebook(
        jp_fetch, jp_serverapp, notebook_path, "kept = list(range(5))\n" + TIGHTEN
    )
    op = await operate(jp_fetch, "pause", notebook_path)

    assert op["outcome"] == "failed", op
    assert "not enough memory to checkpoint: needs ~" in op["error"], op["error"]
    assert "RLIMIT_DATA" in op["error"] and "keeps running" in op["error"]
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "running"
    assert "not enough memory to checkpoint" in session["error"]
    assert session["kernel_id"] == kernel_id
    assert session["last_checkpoint"] is None
    assert await execute(jp_serverapp, kernel_id, "sum(kept)") == "10"
