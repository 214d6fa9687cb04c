"""The checkpoint store's shape (issue #42 item 2): ``engine/store.py`` stays short
(its layers below it: tests/test_import_cycles.py), and a call resolves the checkpoint
root once, handing the resolved root (``paths.CheckpointRoot``) down."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jupyter_pause
from jupyter_pause.engine import errors, mirror, paths, plan, store

STORE = Path(jupyter_pause.__file__).parent / "engine" / "store.py"
MAX_LINES = 700
MAX_RESOLVING = 3
#: what reads a raw ``dir`` (a path, a URL, a Bucket, None: the environment) into a root
RESOLVERS = {"location", "bucket_of", "checkpoint_root", "user_root", "user_folder"}
RESOLVERS |= {"notebook_dir", "root_of", "kernel_env"}


def test_store_py_stays_under_700_lines():
    lines = len(STORE.read_text().splitlines())
    assert lines < MAX_LINES, f"engine/store.py has {lines} lines"


def test_store_py_resolves_the_root_in_at_most_3_places():
    calls = [
        node.lineno
        for node in ast.walk(ast.parse(STORE.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "paths"
        and node.func.attr in RESOLVERS
    ]
    assert 0 < len(calls) <= MAX_RESOLVING, f"engine/store.py resolves a root at lines {calls}"


def test_a_resolved_root_is_taken_as_it_is(tmp_path):
    root = paths.root_of(str(tmp_path))
    assert root == paths.CheckpointRoot(tmp_path)
    assert paths.root_of(root) is root
    assert paths.location(root) == tmp_path
    assert paths.bucket_of(root) is None
    assert root.notebook_dir("a.ipynb") == paths.notebook_dir(str(tmp_path), "a.ipynb")

    in_bucket = paths.root_of(paths.parse_bucket("s3://bucket/prefix", tmp_path / "cache"))
    assert in_bucket.bucket is not None and in_bucket.bucket.url == "s3://bucket/prefix"
    assert in_bucket.folder == in_bucket.bucket.cache
    assert paths.location(in_bucket) is in_bucket.bucket
    assert paths.checkpoint_root(in_bucket) == in_bucket.folder


@pytest.mark.parametrize(
    "call",
    [
        lambda d: store.list_checkpoints(d, "a.ipynb"),
        lambda d: store.latest_checkpoint(d, "a.ipynb"),
        lambda d: store.expire(d, 0),
        lambda d: plan.choose_for_resume(d, "a.ipynb"),
        lambda d: mirror.notebook_folders(d),
    ],
    ids=["list_checkpoints", "latest_checkpoint", "expire", "choose_for_resume", "folders"],
)
def test_a_call_reads_the_root_once(tmp_path, monkeypatch, call):
    """The raw ``dir`` is read once per call; what the call hands down (to the mirror,
    to the notebook's folder) is the resolved root, not read again."""
    read = []
    parse = paths.parse_bucket
    monkeypatch.setattr(paths, "parse_bucket", lambda *a, **kw: read.append(a) or parse(*a, **kw))
    call(str(tmp_path))
    assert len(read) == 1


def test_a_call_with_a_checkpoint_id_reads_the_root_once(tmp_path, monkeypatch):
    read = []
    parse = paths.parse_bucket
    monkeypatch.setattr(paths, "parse_bucket", lambda *a, **kw: read.append(a) or parse(*a, **kw))
    with pytest.raises(errors.CheckpointNotFound):
        store.verify_checkpoint(str(tmp_path), "a.ipynb")
    with pytest.raises(errors.CheckpointNotFound):
        store.delete_checkpoint(str(tmp_path), "a.ipynb", "2026-01-01T00-00-00")
    assert len(read) == 2
