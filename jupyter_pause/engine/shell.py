"""The IPython shell's own state a notebook set up: recorded by a checkpoint, set up again
by a restore into a fresh kernel.

Variables are not all a notebook makes. A cell that registers a magic (``@register_cell_magic``),
loads an extension (``%load_ext``), turns on ``%autoreload`` or picks a matplotlib backend
changes the shell, not the namespace: the function behind a magic comes back with the
variables, but ``%%magic`` would be "not found" after a restore, and nothing would say so.

What is recorded (the manifest's ``shell``, JSON):

* ``magics``: {"line"|"cell": {magic name: the variable holding its function}}, for the
  magics whose function is a variable of the namespace; a magic made from anything else
  (a lambda, a cell-defined ``Magics`` class) cannot come back and is named as skipped
  (``%name`` / ``%%name``);
* ``extensions``: the extensions loaded (``%load_ext`` names), loaded again;
* ``autoreload``: its level (0-3) and the modules ``%aimport`` named, when it is loaded;
* ``matplotlib``: the backend, when matplotlib was imported.

A restore sets each up again after the variables are back, and says in its notes what
could not be (an extension that no longer imports, say).
"""

from __future__ import annotations

import sys
from typing import Any

AUTORELOAD = "IPython.extensions.autoreload"
_GUIS = {  # matplotlib backend -> the `%matplotlib` name IPython knows it by
    "module://matplotlib_inline.backend_inline": "inline",
    "module://ipympl.backend_nbagg": "widget",
    "qtagg": "qt",
    "qt5agg": "qt",
    "tkagg": "tk",
    "macosx": "osx",
    "gtk3agg": "gtk3",
    "wxagg": "wx",
}


def shell_of(ns: dict) -> Any | None:
    """The running IPython shell, if ``ns`` is its user namespace."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    shell = get_ipython()
    return shell if shell is not None and getattr(shell, "user_ns", None) is ns else None


def capture(shell, ns: dict) -> tuple[dict[str, Any], dict[str, str]]:
    """(the shell's state, {name: why} of the magics that cannot come back)."""
    state: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    by_id = {id(v): k for k, v in ns.items() if not k.startswith("_")}
    magics: dict[str, dict[str, str]] = {}
    for kind, table in shell.magics_manager.magics.items():
        for name, func in table.items():
            if not _made_in_a_cell(func):
                continue
            held = by_id.get(id(func))
            shown = ("%" if kind == "line" else "%%") + name
            if held is None:
                skipped[shown] = (
                    "a magic made from something the namespace does not hold cannot come "
                    "back; run the cell that registers it again"
                )
            else:
                magics.setdefault(kind, {})[name] = held
    if magics:
        state["magics"] = magics
    loaded = sorted(getattr(shell.extension_manager, "loaded", ()))
    if loaded:
        state["extensions"] = loaded
    reloader = getattr(shell.magics_manager.registry.get("AutoreloadMagics"), "_reloader", None)
    if AUTORELOAD in loaded and reloader is not None:
        level = 0
        if reloader.enabled:
            level = 1 + bool(reloader.check_all) + bool(getattr(reloader, "autoload_obj", False))
        state["autoreload"] = {
            "level": level,
            "aimport": sorted(getattr(reloader, "modules", {})),
            "skip": sorted(getattr(reloader, "skip_modules", {})),
        }
    mpl = sys.modules.get("matplotlib")
    if mpl is not None:
        # the value as set, read past RcParams (whose reading may pick and import a GUI
        # backend); the "not chosen yet" sentinel is not a str
        backend = dict.get(getattr(mpl, "rcParams", {}), "backend")
        if isinstance(backend, str):
            state["matplotlib"] = backend
    return state, skipped


def _made_in_a_cell(func) -> bool:
    target = getattr(func, "__func__", func)  # a bound method of a Magics class
    return getattr(target, "__module__", None) == "__main__"


def apply(shell, state: dict[str, Any], ns: dict) -> list[str]:
    """Set the shell up as ``state`` says; what could not be, as notes."""
    notes: list[str] = []
    for ext in state.get("extensions", ()):
        if ext in shell.extension_manager.loaded:
            continue
        try:
            shell.extension_manager.load_extension(ext)
        except Exception as e:
            notes.append(f"the IPython extension {ext} could not be loaded again ({_why(e)})")
    auto = state.get("autoreload")
    if auto is not None and AUTORELOAD in shell.extension_manager.loaded:
        try:
            for mod in auto.get("aimport", ()):
                shell.run_line_magic("aimport", mod)
            for mod in auto.get("skip", ()):
                shell.run_line_magic("aimport", f"-{mod}")
            shell.run_line_magic("autoreload", str(int(auto.get("level", 0))))
        except Exception as e:
            notes.append(f"%autoreload could not be set up again ({_why(e)})")
    for kind, table in state.get("magics", {}).items():
        for name, held in table.items():
            shown = ("%" if kind == "line" else "%%") + name
            func = ns.get(held)
            if not callable(func):
                notes.append(f"the magic {shown} did not come back: {held!r} was not restored")
                continue
            shell.register_magic_function(func, magic_kind=kind, magic_name=name)
    backend = state.get("matplotlib")
    if backend is not None:
        try:
            _backend(shell, backend)
        except Exception as e:
            notes.append(f"the matplotlib backend {backend} could not be set again ({_why(e)})")
    return notes


def _backend(shell, backend: str) -> None:
    gui = _GUIS.get(backend.lower())
    if gui is not None:
        shell.enable_matplotlib(gui)
        return
    import matplotlib

    matplotlib.use(backend)


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"
