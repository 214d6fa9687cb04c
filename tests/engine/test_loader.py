"""The record loader after a record fails half-way: no crash, no wrong object, and every
record that does not depend on the failed one still loads."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_pause.engine import pickling, tensors


class Bomb:
    """Pickles fine; unpickling it fails (like a class that no longer rebuilds)."""

    def __init__(self, tag):
        self.tag = tag

    def __reduce__(self):
        return (_explode, (self.tag,))


def _explode(tag):
    raise ValueError(f"bomb {tag}")


class NoTensors:
    def rebuild_tensor(self, *args):
        raise AssertionError("no tensors here")

    rebuild_array = rebuild_tensor


def dump_records(records):
    f = io.BytesIO()
    pickler = pickling.StatePickler(f, tensors.Collector(), {})
    offsets = []
    for r in records:
        offsets.append(f.tell())
        pickler.dump(r)
    return f.getvalue(), offsets


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    pool_bombs=st.lists(st.booleans(), min_size=1, max_size=8),
    picks=st.lists(st.lists(st.integers(0, 7), max_size=4), min_size=1, max_size=8),
)
def test_records_failing_half_way(pool_bombs, picks):
    # a pool of shared objects, some holding a bomb deep inside; each record picks some
    pool = [
        [i, {"tag": f"obj{i}"}, *([Bomb(i)] if bomb else [])] for i, bomb in enumerate(pool_bombs)
    ]
    records = [[pool[p % len(pool)] for p in ps] for ps in picks]
    data, offsets = dump_records(records)
    objs, failures = pickling.load_records(data, offsets, len(records) - 1, NoTensors(), {})

    first = {}  # pool index -> the record that pickled it first (where its memo slot is)
    for j, ps in enumerate(picks):
        for p in ps:
            first.setdefault(p % len(pool), j)
    clean: dict[int, bool] = {}
    for j, ps in enumerate(picks):
        ids = [p % len(pool) for p in ps]
        clean[j] = not any(pool_bombs[i] for i in ids) and all(
            first[i] == j or clean[first[i]] for i in ids
        )
    assert set(objs) | set(failures) == set(range(len(records)))
    for j in range(len(records)):
        if clean[j]:
            assert j in objs, failures.get(j)
        if j in objs:  # whatever loads is exactly what was saved, never a wrong object
            assert objs[j] == records[j]
    # sharing survives between records that loaded
    for j in objs:
        for k in objs:
            for a, pa in zip(objs[j], picks[j], strict=True):
                for b, pb in zip(objs[k], picks[k], strict=True):
                    assert (a is b) == (pa % len(pool) == pb % len(pool))


def test_failed_generic_class_never_kills_the_process(tmp_path):
    """A cell-defined ``class Box(Generic[T])`` used to fail to rebuild, and the next record
    then crashed the interpreter (SIGSEGV) inside the loader. Fresh processes, as a resume."""
    env_code = textwrap.dedent(
        f"""
        import os, sys
        os.environ["JUPYTER_DATA_DIR"] = {str(tmp_path / "data")!r}
        import jupyter_pause as jp
        ck = dict(dir={str(tmp_path / "ck")!r}, notebook="nb", progress=False)
        """
    )
    save = env_code + textwrap.dedent(
        """
        from typing import Generic, TypeVar
        T = TypeVar("T")
        class Box(Generic[T]):
            def __init__(self, v):
                self.v = v
            def get(self) -> T:
                return self.v
        b = Box(3)
        c = [b, Box, {"x": 1}]
        d = {"b": b, "c": c}
        res = jp.checkpoint(namespace=globals(), **ck)
        assert {"T", "Box", "b", "c", "d"} <= set(res.saved), res.skipped
        """
    )
    load = env_code + textwrap.dedent(
        """
        res = jp.restore(namespace=globals(), **ck)
        assert not res.failed, res.failed
        assert b.get() == 3 and isinstance(b, Box) and d["c"][0] is b and c[1] is Box
        assert Box[int] is not None and Box.__parameters__ == (T,)
        print("ok")
        """
    )
    for code in (save, load):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip().endswith("ok")
