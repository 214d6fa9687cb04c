"""Which user variables a checkpoint saves, and why the others are skipped.

dill's ``dump_session`` saves everything or nothing (dill#66, #255, #319, #537):
one open file or generator anywhere and the whole dump fails. We instead save
every variable we can, skip the rest and *say which and why*. This module makes
the cheap decisions up front (IPython's own history variables, modules, types
that can never be pickled); anything else is attempted and skipped only if
pickling it actually fails.
"""

from __future__ import annotations

import importlib
import io
import re
import sys
import threading
import types

from ..protocol import MODULE_REIMPORTED

# IPython's own names in user_ns (history, output cache, helpers)
IPYTHON_NAMES = {
    "In",
    "Out",
    "exit",
    "quit",
    "get_ipython",
    "open",
    "_ih",
    "_oh",
    "_dh",
    "_",
    "__",
    "___",
    "_i",
    "_ii",
    "_iii",
    "_exit_code",
}
_HISTORY_RE = re.compile(r"^(_i\d+|_\d+|__\w*__)$")

_UNSAVABLE_TYPES: tuple[tuple[type, str], ...] = (
    (types.GeneratorType, "a generator cannot be saved; re-run the cell that creates it"),
    (types.CoroutineType, "a coroutine cannot be saved"),
    (types.AsyncGeneratorType, "an async generator cannot be saved"),
    (types.FrameType, "a frame cannot be saved"),
    (types.TracebackType, "a traceback cannot be saved"),
    (io.IOBase, "an open file/stream cannot be saved; re-open it after restore"),
    (threading.Thread, "a thread cannot be saved"),
    (type(threading.Lock()), "a lock cannot be saved"),
    (type(threading.RLock()), "a lock cannot be saved"),
)
_INTERNAL_MODULES = ("IPython.", "ipykernel.", "zmq.", "tornado.", "jupyter_client.", "comm.")
# IPython's display objects (HTML, Markdown, Image, ...) are the user's data
_DISPLAY_MODULES = ("IPython.core.display", "IPython.lib.display", "IPython.display")
_IN_MEMORY_STREAMS = (io.StringIO, io.BytesIO)


def user_namespace() -> tuple[dict, dict]:
    """(namespace dict, names hidden by IPython) of the running kernel, or __main__ outside IPython."""
    ip = None
    if "IPython" in sys.modules:
        from IPython import get_ipython

        ip = get_ipython()
    if ip is not None:
        return ip.user_ns, dict(getattr(ip, "user_ns_hidden", {}))
    return sys.modules["__main__"].__dict__, {}


def _hidden(name: str, obj, hidden: dict) -> bool:
    return (
        name in IPYTHON_NAMES
        or bool(_HISTORY_RE.match(name))
        or (name in hidden and hidden[name] is obj)
    )


def module_name(mod: types.ModuleType) -> str | None:
    """How a module comes back in a fresh process (:func:`reimport`), or None.

    Its ``__name__`` when ``sys.modules`` holds it under that name. Otherwise
    ``package:attr`` when it is only an attribute of a loaded package: the submodules
    of extension modules (``from tokenizers import trainers``: Rust or C code puts
    them on the package; they are not in ``sys.modules``, and their name may be
    their last part only, or that of a different, pure-Python module).
    """
    name = getattr(mod, "__name__", None)
    if not isinstance(name, str) or name == "__main__":
        return None
    if sys.modules.get(name) is mod:
        return name
    parent, _, attr = name.rpartition(".")
    packages = [parent] if parent else []
    for package in [*packages, *list(sys.modules)]:
        if package == "__main__":
            continue
        if getattr(sys.modules.get(package), "__dict__", {}).get(attr) is mod:
            return f"{package}:{attr}"
    return None


def reimport(name: str) -> types.ModuleType:
    """The module :func:`module_name` named: imported by name, or an attribute of its
    package (``package:attr``)."""
    package, colon, attr = name.partition(":")
    module = importlib.import_module(package)
    if not colon:
        return module
    sub = getattr(module, attr, None)
    if not isinstance(sub, types.ModuleType):
        raise ImportError(f"module {package} has no submodule {attr!r}", name=package)
    return sub


def quick_skip(name: str, obj, hidden: dict) -> str | None:
    """Reason to skip ``name`` without trying to pickle it, or None."""
    if _hidden(name, obj, hidden):
        return "IPython history/internal variable"
    if isinstance(obj, types.ModuleType):
        if module_name(obj) is None:
            return f"module {obj.__name__!r}, which cannot be imported again (not restored)"
        return MODULE_REIMPORTED
    if isinstance(obj, _IN_MEMORY_STREAMS):
        return None  # a buffer, not a file: pickled with its contents and position
    if isinstance(obj, io.IOBase) and _closed(obj):  # e.g. what `with open(...) as f` left
        return "a closed file cannot be saved; open it again after the restore"
    for typ, reason in _UNSAVABLE_TYPES:
        if isinstance(obj, typ):
            return reason
    mod = getattr(type(obj), "__module__", "") or ""
    if mod.startswith(_INTERNAL_MODULES) and not mod.startswith(_DISPLAY_MODULES):
        return f"Jupyter/IPython internal object ({mod}.{type(obj).__qualname__})"
    return None


def _closed(f) -> bool:
    try:
        return f.closed is True
    except Exception:  # a stream whose ``closed`` itself fails: not known to be closed
        return False


HISTORY_KEY = "<IPython history>"


def select(ns: dict, hidden: dict | None = None) -> tuple[dict, dict, dict]:
    """Split a namespace into (candidates, skipped {name: reason}, modules {name: module name}).

    IPython's own variables (In, Out, _, _i1, ...) are reported as one entry, not one each."""
    hidden = hidden or {}
    candidates, skipped, modules = {}, {}, {}
    history: list[str] = []
    for name, obj in list(ns.items()):
        reason = quick_skip(name, obj, hidden)
        if reason is None:
            candidates[name] = obj
            continue
        if isinstance(obj, types.ModuleType) and not name.startswith("_"):
            modname = module_name(obj)
            if modname is not None:
                modules[name] = modname
        if _hidden(name, obj, hidden):
            if not name.startswith("__"):
                history.append(name)
        else:
            skipped[name] = reason
    if history:
        shown = ", ".join(history[:8]) + (", ..." if len(history) > 8 else "")
        skipped[HISTORY_KEY] = f"{len(history)} IPython history/internal variables ({shown})"
    return candidates, skipped, modules
