"""Incremental equals full (issue #36): Hypothesis writes notebooks, sequences of cells that
make, change, alias, view, slice and delete pandas frames, series and indexes, numpy arrays
and their views, arrays of Python objects, memmaps, torch tensors, their views and sparse
tensors, a fitted scikit-learn estimator, dicts and lists holding them, and an instance of
a class made in a cell.

A real IPython shell in a process of its own runs the cells (its events drive the change
tracker, as in a kernel). After each cell it takes two checkpoints: an incremental one,
which reuses what no cell touched, and a full one. Each is restored into a fresh process
that has imported nothing, and what it holds (tests/engine/fingerprint.py: every variable's
value, which are one object, which arrays share memory) must be what the shell held.

Both legs run: with pyarrow, and without it (made unimportable in every process), where
pandas keeps its strings in arrays of Python objects: the case the incremental checkpoint
used to drop silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
WITHOUT_PYARROW = HERE / "without_pyarrow"

CELLS = [
    "df = pd.DataFrame({{'n': np.arange({n}), 'x': np.arange({n}) * 0.5,"
    " 't': [f'w{{i % 7}}' for i in range({n})]}})",
    "try:\n    s = df['t']\nexcept NameError:\n    pass",
    "try:\n    v = df.iloc[{a}:{b}]\nexcept NameError:\n    pass",
    "try:\n    idx = df.index\n    fr = df['x'].to_frame()\nexcept NameError:\n    pass",
    "try:\n    df.loc[{a}, 't'] = 'changed'\nexcept NameError:\n    pass",
    "try:\n    del v\nexcept NameError:\n    pass",
    "a = np.arange({n}, dtype=np.float64)",
    "try:\n    av = a[::{step}]\nexcept NameError:\n    pass",
    "try:\n    a[{a} % len(a)] = -1.0\nexcept NameError:\n    pass",
    "o = np.array([f'item{{i}}' for i in range(5000)], dtype=object)",
    "try:\n    ov = o[{a}:{b}]\n    o[{a}] = 'mutated'\nexcept NameError:\n    pass",
    "mm = np.memmap(MMAP, dtype=np.float32, mode='r+', shape=(64,))",
    "t = torch.arange({n}, dtype=torch.float32)",
    "try:\n    tv = t[{a}:]\n    t.add_(1)\nexcept NameError:\n    pass",
    "sp = torch.sparse_coo_tensor([[0, 1], [1, {a} % 2]], [1.0, float({n})], (2, 2))",
    "from sklearn.linear_model import LogisticRegression\n"
    "clf = LogisticRegression(max_iter=200).fit(np.arange(40.0).reshape(20, 2) + {a},"
    " np.array([['yes', 'no'][i % 2] for i in range(20)], dtype=object))",
    "try:\n    box = {{'df': df, 'a': a, 'items': [s, {n}]}}\nexcept NameError:\n    box = {{'n': {n}}}",
    "class Thing:\n    def __init__(self, value):\n        self.value = value\n\n"
    "thing = Thing([{n}, 'x'])",
    "try:\n    thing.value.append({n})\nexcept NameError:\n    pass",
    "k = {n}",
]

KERNEL = r"""
import json, sys
from IPython.core.interactiveshell import InteractiveShell
work = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import fingerprint
sh = InteractiveShell.instance()
setup = sh.run_cell(
    "import numpy as np, pandas as pd, torch, jupyter_pause as jp\n"
    f"MMAP = {work + '/data.f32'!r}\n"
    "np.memmap(MMAP, dtype=np.float32, mode='w+', shape=(64,)).flush()"
)
assert setup.success, setup.error_in_exec
for name in ("np", "pd", "torch", "jp", "MMAP"):
    sh.user_ns_hidden[name] = sh.user_ns[name]
import jupyter_pause as jp
for line in sys.stdin:
    code = json.loads(line)
    ran = sh.run_cell(code).success
    inc = jp.checkpoint(dir=work, notebook="incremental", keep=100, progress=False)
    full = jp.checkpoint(dir=work, notebook="full", keep=100, full=True, progress=False)
    step = {"ran": ran, "incremental": inc.id, "full": full.id, "reused": inc.records_reused,
            "fingerprint": fingerprint.fingerprint(
                {k: v for k, v in sh.user_ns.items() if k not in sh.user_ns_hidden})}
    print(json.dumps(step), flush=True)
"""

RESTORE = r"""
import json, sys
sys.path.insert(0, sys.argv[4])
import fingerprint
early = [m for m in ("numpy", "pandas", "torch", "sklearn") if m in sys.modules]
assert not early, f"imported before the restore: {early}"
import jupyter_pause as jp
from jupyter_pause.engine import lazy
ns = {"__name__": "__main__"}
res = jp.restore(sys.argv[3], namespace=ns, dir=sys.argv[1], notebook=sys.argv[2],
                 progress=False, lazy=sys.argv[2] == "incremental")
lazy.wait()
assert not res.failed, res.failed
print(json.dumps(fingerprint.fingerprint(ns)))
"""


def _env(pyarrow: bool) -> dict:
    env = dict(os.environ)
    if not pyarrow:
        env["PYTHONPATH"] = os.pathsep.join([str(WITHOUT_PYARROW), env.get("PYTHONPATH", "")])
    return env


def _restored(work: Path, notebook: str, cid: str, env: dict) -> dict:
    args = [sys.executable, "-c", RESTORE, str(work), notebook, cid, str(HERE)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, f"{notebook} {cid}:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cells():
    one = st.builds(
        lambda i, a, b, n, step: CELLS[i].format(a=a, b=a + b, n=n, step=step),
        st.integers(0, len(CELLS) - 1),
        st.integers(0, 9),
        st.integers(1, 20),
        st.integers(10, 40),
        st.integers(2, 4),
    )
    return st.lists(one, min_size=2, max_size=6)


def _check(cells: list[str], pyarrow: bool, work: Path) -> None:
    env = _env(pyarrow)
    work.mkdir(parents=True, exist_ok=True)
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, str(work), str(HERE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env, JUPYTER_DATA_DIR=str(work / "data")),
    )
    restore_env = dict(env, JUPYTER_DATA_DIR=str(work / "data"))
    try:
        with ThreadPoolExecutor(2) as pool:
            for code in cells:
                kernel.stdin.write(json.dumps(code) + "\n")
                kernel.stdin.flush()
                line = kernel.stdout.readline()
                assert line, kernel.stderr.read()
                step = json.loads(line)
                incremental, full = pool.map(
                    _restored,
                    [work, work],
                    ["incremental", "full"],
                    [step["incremental"], step["full"]],
                    [restore_env, restore_env],
                )
                live = step["fingerprint"]
                assert full == live, f"after {code!r}: the full checkpoint differs"
                assert incremental == live, f"after {code!r}: the incremental one differs"
    finally:
        kernel.stdin.close()
        kernel.wait(timeout=60)


EXAMPLES = int(os.environ.get("JP_DIFFERENTIAL_EXAMPLES", "5"))


@pytest.mark.slow
@pytest.mark.parametrize("pyarrow", [False, True], ids=["without-pyarrow", "with-pyarrow"])
def test_an_incremental_checkpoint_restores_what_a_full_one_does(pyarrow, tmp_path_factory):
    pytest.importorskip("sklearn")
    if pyarrow:
        pytest.importorskip("pyarrow")

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=not os.environ.get("JP_DIFFERENTIAL_RANDOM"),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(_cells())
    def run(cells):
        _check(cells, pyarrow, tmp_path_factory.mktemp("notebook"))

    run()


@pytest.mark.slow
@pytest.mark.parametrize("pyarrow", [False, True], ids=["without-pyarrow", "with-pyarrow"])
def test_the_reported_notebook_keeps_its_frame(pyarrow, tmp_path):
    """The issue's own cells: a frame, a column of it and a list; a checkpoint; one more
    name; a second checkpoint, which dropped the frame where pandas had no pyarrow."""
    if pyarrow:
        pytest.importorskip("pyarrow")
    _check(
        [
            "df = pd.DataFrame({'a': range(1000), 't': [str(i) for i in range(1000)]})\n"
            "s = df['a']\nkeep = [1, 2]",
            "y = 1",
            "k = 2",
        ],
        pyarrow,
        tmp_path / "nb",
    )


VARIANTS = {
    "a frame and its iloc slices": [
        "df = pd.DataFrame({'a': range(1000), 't': [str(i) for i in range(1000)]})\n"
        "top, tail = df.iloc[:10], df.iloc[-10:]",
    ],
    "an index, a series on it and to_frame": [
        "idx = pd.Index([f'r{i}' for i in range(500)])\n"
        "s = pd.Series(range(500), index=idx)\nframe = s.to_frame()",
    ],
    "an object-dtype array": ["o = np.array([f'x{i}' for i in range(9000)], dtype=object)"],
    "a fitted estimator that holds one": [
        "from sklearn.linear_model import LogisticRegressionCV\n"
        "clf_cv = LogisticRegressionCV(cv=2, max_iter=200).fit("
        "np.arange(80.0).reshape(40, 2), np.array(['x', 'y'] * 20, dtype=object))",
    ],
    "a memmap": ["mm = np.memmap(MMAP, dtype=np.float32, mode='r+', shape=(64,))"],
    "a sparse tensor": ["sp = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2))"],
}


@pytest.mark.slow
@pytest.mark.parametrize("pyarrow", [False, True], ids=["without-pyarrow", "with-pyarrow"])
def test_unchanged_variables_survive_later_checkpoints(pyarrow, tmp_path):
    """Each kind the issue found dropped, made one cell at a time, then two cells that never
    name any of them: every checkpoint on the way restores them all."""
    if pyarrow:
        pytest.importorskip("pyarrow")
    pytest.importorskip("sklearn")
    cells = [cell for kind in sorted(VARIANTS) for cell in VARIANTS[kind]]
    _check([*cells, "y = 1", "z = 2"], pyarrow, tmp_path / "nb")
