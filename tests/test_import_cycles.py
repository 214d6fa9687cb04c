"""The modules of jupyter_pause import each other in no circle, function-local imports
included: each layer can be read, tested and changed without the ones above it."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import jupyter_pause

PACKAGE = Path(jupyter_pause.__file__).parent


def module_names() -> dict[str, Path]:
    """Every module of the package, by dotted name (a package by its own name)."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["jupyter_pause", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its body (module level,
    in functions, under ``if TYPE_CHECKING``), relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from a import b``: the module a.b where there is one, else a name of a
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        # a module of another package, or one made by the build (``_version``), is no edge
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    return {name: imported(name, path, set(names)) for name, path in names.items()}


def test_the_graph_sees_relative_and_function_local_imports():
    graph = import_graph()
    # module level, relative: ``from .kernels import ...``
    assert "jupyter_pause.server.kernels" in graph["jupyter_pause.server.manager"]
    # inside a function: ``from .engine.api import checkpoint as engine_checkpoint``
    assert "jupyter_pause.engine.api" in graph["jupyter_pause.kernel_ops"]
    # ``from . import plan`` names a module, not a name of the package
    assert "jupyter_pause.engine.plan" in graph["jupyter_pause.engine.handoff"]


def test_no_module_of_jupyter_pause_imports_itself_through_others():
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as e:
        circle = " -> ".join(e.args[1])
        raise AssertionError(f"an import circle: {circle}") from None


def test_the_backends_do_not_import_the_hub_service():
    """A single-user server's backend and the ``jupyter-pause-hub`` service both talk to
    the Hub: what they share (``hub_api``) stands below both, so no backend reaches up
    into the service's package."""
    graph = import_graph()
    reaching_up = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("jupyter_pause.backends")
        for target in targets
        if target == "jupyter_pause.hub" or target.startswith("jupyter_pause.hub.")
    }
    assert not reaching_up
    assert "jupyter_pause.hub_api" in graph["jupyter_pause.backends.jupyterhub"]
    assert "jupyter_pause.hub_api" in graph["jupyter_pause.hub.service"]


#: the checkpoint store's layers (issue #42 item 2), lowest first: each imports only
#: those below it, so that a plain split into modules makes no circle
STORE_LAYERS = ["checks", "mirror", "plan", "store"]


def test_the_checkpoint_store_is_layered():
    graph = import_graph()
    reaching_up = {
        (low, high)
        for i, low in enumerate(STORE_LAYERS)
        for high in STORE_LAYERS[i + 1 :]
        if f"jupyter_pause.engine.{high}" in graph[f"jupyter_pause.engine.{low}"]
    }
    assert not reaching_up, f"a lower layer of the store imports a higher one: {reaching_up}"
    assert "jupyter_pause.engine.checks" in graph["jupyter_pause.engine.mirror"]
    assert "jupyter_pause.engine.mirror" in graph["jupyter_pause.engine.plan"]
