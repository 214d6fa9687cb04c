"""Functions are short, and the engine's take few parameters (issue #42 item 3): no
production function is over 120 lines, and no engine function takes more than 6.

The ones that are today are listed with their size now as a ceiling: a listed one may
shrink but not grow, and leaves the list once it is within the limit (the test says so),
so the lists only get shorter.  A function is measured by ``ast`` from its ``def`` to its
last line (docstring and comments included, decorators not)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import jupyter_pause

PACKAGE = Path(jupyter_pause.__file__).parent
MAX_LINES = 120
MAX_ENGINE_PARAMETERS = 6

#: over MAX_LINES: none now (issue #42 item 3 split the last); a listed one would be a ceiling
LONG: dict[str, int] = {}

#: engine functions over MAX_ENGINE_PARAMETERS today (issue #42 item 3): a ceiling
MANY_PARAMETERS = {
    # The three below rebuild objects from a checkpoint's pickle, which names each with
    # its arguments (rebuild_tensor through tensors._rebuild_tensor, which
    # pickling._Resolving resolves to it): tensors.Collector's reduce of a tensor,
    # pickling.reduce_enum and pickling's reduce of a memmap's slice.  Checkpoints written
    # already call them so: they keep their parameters.
    "engine/api.py:_Loader.rebuild_tensor": 7,
    "engine/pickling.py:_make_enum": 7,
    "engine/pickling.py:_open_memmap_slice": 9,
    # rebuild_tensor's pickled arguments, passed on one for one (the buffer for the index)
    "engine/tensors.py:rebuild_torch": 7,
    "engine/records.py:_pickle_namespace": 8,
    "engine/records.py:pickle_namespace": 8,
    "engine/mirror.py:fetch": 7,
    "engine/mirror.py:stream": 8,
    "engine/tensors.py:read_storages": 7,
    "engine/tensors.py:read_storage": 7,
}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions(tree: ast.AST, rel: str) -> Iterator[tuple[str, Function]]:
    """Every function of a module, nested ones too, by ``file:Qual.name``."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, Function]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{rel}:{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    return walk(tree, "")


def lines(node: Function) -> int:
    return node.end_lineno - node.lineno + 1


def parameters(node: Function) -> int:
    """Parameters by their names: each named one, and ``*args`` and ``**options`` as one
    each (a ``**options: Unpack[SomeOptions]`` is one parameter, its keys documented in
    its ``TypedDict``); ``self`` and ``cls`` not counted."""
    args = node.args
    named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    rest = [a for a in (args.vararg, args.kwarg) if a is not None]
    return len(named) + len(rest) - (1 if named[:1] in (["self"], ["cls"]) else 0)


def measure(size_of: Callable[[Function], int], limit: int, where: str) -> dict[str, int]:
    """What is over ``limit`` in the package (or its sub-folder ``where``)."""
    return {
        name: size
        for path in sorted((PACKAGE / where).rglob("*.py"))
        for name, node in functions(
            ast.parse(path.read_text(), str(path)), path.relative_to(PACKAGE).as_posix()
        )
        if (size := size_of(node)) > limit
    }


def check(over: dict[str, int], ceilings: dict[str, int], limit: int, what: str) -> None:
    new = {name: n for name, n in over.items() if name not in ceilings}
    grown = {name: (n, ceilings[name]) for name, n in over.items() if n > ceilings.get(name, n)}
    shrunk = sorted(set(ceilings) - set(over))
    assert not new, f"over {limit} {what} (split it at its seams): {new}"
    assert not grown, f"grew (now, ceiling): {grown}"
    assert not shrunk, f"within {limit} {what} now, or gone: take them off the list: {shrunk}"
    tighter = {name: n for name, n in over.items() if n < ceilings[name]}
    assert not tighter, f"shorter now: lower their ceilings to {tighter}"


def test_no_function_is_over_120_lines():
    check(measure(lines, MAX_LINES, "."), LONG, MAX_LINES, "lines")


def test_no_engine_function_takes_more_than_6_parameters():
    check(
        measure(parameters, MAX_ENGINE_PARAMETERS, "engine"),
        MANY_PARAMETERS,
        MAX_ENGINE_PARAMETERS,
        "parameters",
    )


def test_the_measures_see_methods_nested_functions_and_every_parameter():
    source = (
        "class A:\n"
        "    def m(self, a, /, b, *args, c, **kw):\n"
        "        def inner(x):\n"
        "            return x\n"
        "        return inner\n"
    )
    tree = ast.parse(source)
    method = tree.body[0].body[0]
    assert parameters(method) == 5  # a, b, *args, c, **kw
    assert lines(method) == 4
    names = [name for name, _ in functions(tree, "engine/probe.py")]
    assert names == ["engine/probe.py:A.m", "engine/probe.py:A.m.inner"]
