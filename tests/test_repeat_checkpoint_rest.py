"""The issue-36 repro on the main path: ``%checkpoint``, one more cell, then a pause and a
resume through REST (the toolbar's buttons), in a real server whose kernels have pandas
with and without pyarrow. The pause after an earlier checkpoint used to drop the frame
where pandas had no pyarrow (its strings are then an array of Python objects)."""

import os
from pathlib import Path

import pytest

from jupyter_pause.client import LocalServer

from .test_restart import notebook_and_env

pytestmark = pytest.mark.slow

WITHOUT_PYARROW = Path(__file__).parent / "engine" / "without_pyarrow"

CELLS = [
    "import pandas as pd\n"
    "df = pd.DataFrame({'a': range(1000), 't': [f'w{i}' for i in range(1000)]})\n"
    "s = df['a']\nkeep = [1, 2]",
    "%checkpoint",
    "y = 1",
]

CHECK = """
import json, sys
print(json.dumps({
    "pyarrow": "pyarrow" in sys.modules,
    "names": sorted(n for n in ("df", "s", "keep", "y") if n in globals()),
    "df": [len(df), int(df["a"].sum()), df["t"].iloc[-1]],
    "s": int(s.sum()),
}))
"""


@pytest.mark.parametrize("pyarrow", [False, True], ids=["without-pyarrow", "with-pyarrow"])
def test_a_pause_after_a_checkpoint_keeps_every_frame(pyarrow, tmp_path):
    if pyarrow:
        pytest.importorskip("pyarrow")
    root, env = notebook_and_env(tmp_path)
    if not pyarrow:  # the server's kernels inherit it: pyarrow is unimportable there
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(WITHOUT_PYARROW), os.environ.get("PYTHONPATH")])
        )
    with LocalServer(root, tmp_path / "state", env=env) as server:
        client = server.start()
        kernel_id = client.open_notebook("nb.ipynb")["kernel"]["id"]
        for cell in CELLS:
            result = client.execute(kernel_id, cell)
            assert result.ok, (cell, result.error, result.stderr)
        assert (
            client.evaluate(
                kernel_id, "import json, sys; print(json.dumps('pyarrow' in sys.modules))"
            )
            is pyarrow
        )

        op = client.wait(client.pause("nb.ipynb"))
        assert op["outcome"] == "succeeded", op
        op = client.wait(client.resume("nb.ipynb"))
        assert op["outcome"] == "succeeded", op

        kernel_id = client.session_status("nb.ipynb")["kernel_id"]
        restored = client.evaluate(kernel_id, CHECK)
        assert restored == {
            "pyarrow": pyarrow,
            "names": ["df", "keep", "s", "y"],
            "df": [1000, 499500, "w999"],
            "s": 499500,
        }
