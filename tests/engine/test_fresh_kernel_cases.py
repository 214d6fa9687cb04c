"""What ML notebooks hold, restored into a process that has imported nothing yet.

Each case is saved from a notebook-like namespace (cell code lives in ``__main__``)
and restored in a fresh Python process, which checks that none of the case's
modules is imported before the restore: a test that pre-imports them misses what
goes wrong while they are imported during it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jupyter_pause as jp

from .conftest import main_ns


def restore_fresh(ck, checks: str, *, not_imported=(), before: str = "", path=(), lazy=False):
    """Restore ``ck``'s latest checkpoint into a fresh process's ``ns`` (``res`` is the
    result), run ``checks`` there, and fail with its output unless they pass."""
    script = "\n".join(
        [
            "import sys",
            "import jupyter_pause as jp",
            f"for name in {list(not_imported)!r}:",
            "    assert name not in sys.modules, f'{name} was imported before the restore'",
            textwrap.dedent(before),
            "ns = {'__name__': '__main__'}",
            f"res = jp.restore(namespace=ns, progress=False, lazy={lazy!r}, **{ck!r})",
            textwrap.dedent(checks),
            "print('OK')",
        ]
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


# -------------------------------------------- modules imported during the restore

#: A package whose import, begun on another thread, is still under way when the main
#: thread imports one of its submodules (as pandas' is when a DataFrame is unpickled):
#: ``a`` goes on only once the main thread, importing ``b``, waits for ``a``; then ``a``
#: imports ``b`` in turn. Each thread holds the lock the other waits for, so Python hands
#: ``a`` a half-built ``b``; the background import fails and takes the package out of
#: ``sys.modules`` under the main thread (pandas came back as a second, broken module).
RACEPKG = {
    "__init__.py": "from . import a  # noqa: F401\n",
    "_wait.py": '''
        import sys
        import threading
        import time


        def main_thread_waits_for(name):
            """The main thread is blocked on ``name``'s import lock, or joins a thread."""
            frame = sys._current_frames().get(threading.main_thread().ident)
            while frame is not None:
                code = frame.f_code.co_name
                if code == "_wait_for_tstate_lock":
                    return True
                if code == "acquire" and getattr(frame.f_locals.get("self"), "name", "") == name:
                    return True
                frame = frame.f_back
            return False


        def until(condition, seconds=30.0):
            deadline = time.monotonic() + seconds
            while not condition() and time.monotonic() < deadline:
                time.sleep(0.002)
    ''',
    "a.py": """
        import threading

        from . import _wait


        def x():
            return "ready"


        if threading.current_thread() is not threading.main_thread():
            _wait.until(lambda: _wait.main_thread_waits_for(__name__))
        from .b import Thing  # noqa: E402,F401
    """,
    "b.py": """
        from racepkg.a import x


        class Thing:
            def __init__(self, v):
                self.v = v

            def ready(self):
                return x()
    """,
}

#: the main thread unpickles only once the package's background import has begun
#: (as it does behind ``import pandas``, which takes far longer than reading a small
#: checkpoint)
AFTER_THE_IMPORT_BEGAN = """
    import time
    from jupyter_pause.engine import api

    api._IMPORT_SOON.add("racepkg")  # imported in the background, as pandas is
    _load_groups = api._load_groups


    def _load_once_the_import_began(*args):
        deadline = time.monotonic() + 30
        while "racepkg.a" not in sys.modules and time.monotonic() < deadline:
            time.sleep(0.001)
        return _load_groups(*args)


    api._load_groups = _load_once_the_import_began
"""


def test_no_module_is_imported_in_the_background_while_its_objects_are_built(
    ck, tmp_path, monkeypatch
):
    for name, source in RACEPKG.items():
        (tmp_path / "racepkg").mkdir(exist_ok=True)
        (tmp_path / "racepkg" / name).write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    ns = main_ns("import racepkg\nfrom racepkg.b import Thing\nt = Thing(3)\npair = [t, t]")
    jp.checkpoint(namespace=ns, progress=False, **ck)
    for lazy in (False, True):
        restore_fresh(
            ck,
            """
            assert res.failed == {}, res.failed
            assert ns["t"].ready() == "ready" and ns["pair"][0] is ns["t"]
            assert type(ns["t"]) is sys.modules["racepkg"].b.Thing is ns["Thing"]
            assert ns["racepkg"] is sys.modules["racepkg"]
            """,
            not_imported=["racepkg"],
            before=AFTER_THE_IMPORT_BEGAN,
            path=[tmp_path],
            lazy=lazy,
        )


def test_a_dataframe_and_its_shared_index_leave_pandas_whole(ck):
    ns = main_ns(
        "import pandas as pd\n"
        "df = pd.DataFrame({'a': [1, 2, 3], 't': pd.date_range('2026-01-01', periods=3)})\n"
        "idx = df.index\n"
    )
    jp.checkpoint(namespace=ns, progress=False, **ck)
    for lazy in (False, True):
        restore_fresh(
            ck,
            """
            import pandas
            assert res.failed == {}, res.failed
            assert ns["idx"] is ns["df"].index and ns["pd"] is pandas
            assert ns["df"].to_json(date_format="iso").startswith('{"a":{"0":1')
            assert pandas.DataFrame({"b": [1.5]}).to_json() == '{"b":{"0":1.5}}'
            """,
            not_imported=["pandas", "numpy"],
            lazy=lazy,
        )


# ------------------------------------------------------------ classes from cells


def test_a_typing_namedtuple_class_and_its_instances(ck):
    ns = main_ns(
        "from typing import NamedTuple\n"
        "class Pt(NamedTuple):\n"
        "    x: int\n"
        "    y: float = 0.5\n"
        "    def norm(self):\n"
        "        return abs(self.x) + self.y\n"
        "p = Pt(3)\n"
        "path = [p, Pt(-1, 2.0)]\n"
    )
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert not res.skipped
    restore_fresh(
        ck,
        """
        assert res.failed == {}, res.failed
        Pt, p = ns["Pt"], ns["p"]
        assert type(p) is Pt and p == (3, 0.5) and p.norm() == 3.5 and ns["path"][0] is p
        assert Pt(1) == Pt(x=1, y=0.5) and Pt._fields == ("x", "y") and Pt.__slots__ == ()
        assert Pt._make([4, 5])._replace(y=6) == (4, 6) and ns["path"][1].norm() == 3.0
        """,
    )


def test_a_pydantic_model_with_a_field_validator(ck):
    ns = main_ns(
        "from pydantic import BaseModel, field_validator\n"
        "class Run(BaseModel):\n"
        "    name: str\n"
        "    lr: float = 0.1\n"
        "    @field_validator('name')\n"
        "    @classmethod\n"
        "    def lower(cls, v):\n"
        "        return v.lower()\n"
        "    def tag(self):\n"
        "        return f'{self.name}@{self.lr}'\n"
        "run = Run(name='ABC', lr=0.5)\n"
    )
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert not res.skipped
    restore_fresh(
        ck,
        """
        import pydantic
        assert res.failed == {}, res.failed
        Run, run = ns["Run"], ns["run"]
        assert type(run) is Run and run.tag() == "abc@0.5" and list(Run.model_fields) == ["name", "lr"]
        assert Run(name="XY").name == "xy" and Run.model_validate({"name": "Q"}).tag() == "q@0.1"
        try:
            Run(name=3)
        except pydantic.ValidationError:
            pass
        else:
            raise AssertionError("the restored model no longer validates")
        """,
        not_imported=["pydantic"],
    )


STRICT = """
class Strict(type):  # a metaclass that reads the class body, as ORMs and validators do
    def __new__(mcls, name, bases, body):
        if "fields" not in body:
            raise TypeError("a Strict class needs its fields")
        return super().__new__(mcls, name, bases, body)

class Form(metaclass=Strict):
    fields = ("name",)

form = Form()
kept = [1, 2]
"""


def test_a_class_that_would_not_load_is_not_called_saved(ck):
    res = jp.checkpoint(namespace=main_ns(STRICT), progress=False, **ck)
    why = "class Form would not load again: TypeError: a Strict class needs its fields"
    assert why in res.skipped["Form"] and why in res.skipped["form"]
    assert "Strict" not in res.skipped and "kept" not in res.skipped
    restore_fresh(
        ck,
        """
        assert res.failed == {} and ns["kept"] == [1, 2], res.failed
        assert {"Form", "form"} <= set(res.skipped) and "form" not in ns
        """,
    )


# ---------------------------------------------------------------------- modules

#: a package whose submodules exist only as its attributes, as an extension module's do
#: (``from tokenizers import trainers``: Rust code puts them on the package; they are not
#: in ``sys.modules``; pyo3 names them by their last part only)
EXTPKG = """
import types

trainers = types.ModuleType("extpkg.trainers")
trainers.Bpe = type("Bpe", (), {"__module__": "extpkg.trainers"})
models = types.ModuleType("models")
models.kind = "wordpiece"
"""


def test_a_submodule_that_is_only_an_attribute_of_its_package(ck, tmp_path, monkeypatch):
    (tmp_path / "extpkg.py").write_text(EXTPKG)
    monkeypatch.syspath_prepend(str(tmp_path))
    ns = main_ns("from extpkg import trainers, models\nkeep = {'m': models, 'n': 1}")
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert set(res.skipped) == {"trainers", "models"}  # modules: re-imported, not saved
    restore_fresh(
        ck,
        """
        import extpkg
        assert res.failed == {}, res.failed
        assert ns["trainers"] is extpkg.trainers and ns["trainers"].Bpe.__name__ == "Bpe"
        assert ns["models"] is extpkg.models and ns["keep"]["m"] is extpkg.models
        """,
        not_imported=["extpkg"],
        path=[tmp_path],
    )


def test_a_module_that_cannot_come_back_is_said_so_when_saving(ck):
    import types

    ns = main_ns()
    ns["made"] = types.ModuleType("made_in_a_cell")
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert "cannot be imported again" in res.skipped["made"]


# ----------------------------------------------------------------------- arrays


def test_a_recarray_view_keeps_sharing_memory_with_its_base(ck):
    ns = main_ns(
        "import numpy as np\n"
        "base = np.zeros(4, dtype=[('x', 'f8'), ('y', 'i4')])\n"
        "rec = base.view(np.recarray)\n"
        "rec.x[1] = 2.5\n"
        "table = np.rec.fromarrays([np.arange(6.0), np.arange(6)], names='a,b')\n"
        "head = table[:3]\n"
    )
    jp.checkpoint(namespace=ns, progress=False, **ck)
    restore_fresh(
        ck,
        """
        import numpy as np
        assert res.failed == {}, res.failed
        base, rec, table, head = ns["base"], ns["rec"], ns["table"], ns["head"]
        assert type(rec) is np.recarray and rec.x[1] == 2.5 and np.shares_memory(rec, base)
        rec.y[0] = 7
        assert base["y"][0] == 7
        assert type(head) is np.recarray and np.shares_memory(head, table)
        table.b[2] = 40
        assert head.b[2] == 40 and head.a.tolist() == [0.0, 1.0, 2.0]
        """,
        not_imported=["numpy"],
    )


def test_a_slice_of_a_memmap_comes_back_mapped_from_its_file(ck, tmp_path):
    import numpy as np

    path = tmp_path / "big.f32"
    mm = np.memmap(path, dtype="float32", mode="w+", shape=(4096, 4096))  # 64 MiB
    mm[100:104] = np.arange(4 * 4096, dtype="float32").reshape(4, 4096)
    mm[:, 7] = 7
    ns = main_ns()
    ns.update(rows=mm[100:104], col=mm[:, 7], tail=mm[-1, ::-512])
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert not res.skipped and res.bytes_written < 64 * 1024  # the file is 64 MiB
    del ns, mm
    restore_fresh(
        ck,
        f"""
        import numpy as np
        assert res.failed == {{}}, res.failed
        rows, col, tail = ns["rows"], ns["col"], ns["tail"]
        for a in (rows, col, tail):
            assert type(a) is np.memmap and a.filename == {str(path)!r}
        assert rows.shape == (4, 4096) and rows[3, 4095] == 4 * 4096 - 1
        assert col.shape == (4096,) and (col == 7).all() and tail.shape == (8,)
        rows[0, 0] = -1
        rows.flush()
        again = np.memmap({str(path)!r}, dtype="float32", mode="r", shape=(4096, 4096))
        assert again[100, 0] == -1 and again[100, 7] == 7
        """,
        not_imported=["numpy"],
    )
    os.utime(path, ns=(0, 0))  # the file changed: the slices' bytes are no longer known
    restore_fresh(
        ck,
        """
        assert set(res.failed) == {"rows", "col", "tail"}, res.failed
        assert "changed since the checkpoint" in res.failed["rows"]
        """,
    )
