"""Which variables the code run since the last checkpoint could have changed.

An incremental checkpoint re-pickles only the groups of variables that code could have
touched and copies the other groups' pickle records from the previous checkpoint
(docs/engine.md, *Incremental checkpoints*). Copying a record is only right when nothing
could have changed its objects, so this module errs on one side only: anything it cannot
account for makes the next checkpoint a full one.

It watches the kernel's user namespace through IPython's events:

* ``pre_execute`` fires for every execution, silent ones included; in a real kernel the
  request's code is read from ``kernel.get_parent()``. An execution whose code cannot be
  seen (silent, outside a kernel) makes the next checkpoint full.
* ``pre_run_cell`` gives a visible cell's code.

Of each piece of code it keeps every global name it mentions or binds (``x``, ``def f``,
``import m as x``, ``except E as x``, ...) and, through :func:`names_used`, the globals
of the notebook functions and classes it names. Code whose names cannot be known (``exec``,
``eval``, ``globals()``, a magic other than ``%checkpoint``) marks everything changed.

Code can also change variables outside any execution: a thread the notebook started keeps
running between cells. While such a thread is alive (seen at an execution's start or at
the checkpoint) everything counts as changed.
"""

from __future__ import annotations

import ast
import contextlib
import sys
import threading
import types
from typing import Any

# names that reach the namespace by other ways than by name: wait for everything
_OPAQUE = {"globals", "vars", "locals", "eval", "exec", "get_ipython", "dir", "__import__"}
_OPAQUE_MODULES = {"__main__"}  # its __dict__ is the user namespace (IPython's user_module)

# our own magic: a cell holding only ``%checkpoint ...`` changes nothing
_HARMLESS_MAGICS = {"checkpoint"}

# threads that were there before the notebook's code ran (the kernel's own)
_KERNEL_THREADS = {t.ident for t in threading.enumerate()}
# threads known to change no user variable: ours, tqdm's monitor, IPython's history writer
_HARMLESS_THREADS = ("jp-", "jupyter-pause")
_HARMLESS_THREAD_TYPES = {"TMonitor", "HistorySavingThread"}


def notebook_threads_alive() -> bool:
    """Is a thread the notebook's code started still running? It may change any variable."""
    for t in threading.enumerate():
        if t.ident in _KERNEL_THREADS or t is threading.current_thread():
            continue
        if t.name.startswith(_HARMLESS_THREADS) or type(t).__name__ in _HARMLESS_THREAD_TYPES:
            continue
        return True
    return False


class Tracker:
    """Names touched since the last checkpoint of one shell's user namespace."""

    def __init__(self, shell):
        self.shell = shell
        self.names: set[str] = set()
        self.everything = False  # some code could not be analysed
        self.unseen = False  # an execution began whose code we have not seen yet

    # -- IPython events -------------------------------------------------------
    def pre_execute(self) -> None:
        if self.unseen or notebook_threads_alive():  # code we could not see may have run
            self.everything = True
        self.unseen = True
        request = _current_request(self.shell)
        if request is not None and request.get("silent"):
            self.note(request.get("code", ""))

    def pre_run_cell(self, info=None) -> None:
        self.note(getattr(info, "raw_cell", None))

    # -- bookkeeping ----------------------------------------------------------
    def note(self, code: str | None) -> None:
        self.unseen = False
        if code is None:
            self.everything = True
            return
        names = names_touched(code, self.shell)
        if names is None:
            self.everything = True
        else:
            self.names |= names

    def changed(self) -> set[str] | None:
        """Names touched since the last :meth:`reset`; None: anything may have changed."""
        if self.everything or self.unseen or notebook_threads_alive():
            return None
        return set(self.names)

    def reset(self) -> None:
        """A checkpoint was committed: from now on only newer changes count. The execution
        running the checkpoint has been accounted for already (its code was noted)."""
        self.names.clear()
        self.everything = False

    def invalidate(self) -> None:
        """Something replaced objects behind the tracker's back (a restore, a re-run)."""
        self.everything = True


def _current_request(shell) -> dict | None:
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return None
    try:
        parent = kernel.get_parent("shell")
    except Exception:
        return None
    if not isinstance(parent, dict):
        return None
    header = parent.get("header") or {}
    content = parent.get("content") or {}
    if header.get("msg_type") != "execute_request" or not isinstance(content, dict):
        return None
    return content


def _drop_harmless_magics(tree: ast.Module) -> None:
    """Remove ``get_ipython().run_line_magic('checkpoint', ...)`` statements."""

    def harmless(stmt) -> bool:
        if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
            return False
        f = stmt.value.func
        return (
            isinstance(f, ast.Attribute)
            and f.attr == "run_line_magic"
            and isinstance(f.value, ast.Call)
            and isinstance(f.value.func, ast.Name)
            and f.value.func.id == "get_ipython"
            and bool(stmt.value.args)
            and isinstance(stmt.value.args[0], ast.Constant)
            and stmt.value.args[0].value in _HARMLESS_MAGICS
        )

    tree.body = [s for s in tree.body if not harmless(s)]


def names_touched(code: str, shell=None) -> set[str] | None:
    """Every global name ``code`` mentions or binds, plus the globals of the notebook
    functions and classes it names; None when that cannot be known."""
    if shell is not None:
        with contextlib.suppress(Exception):
            code = shell.transform_cell(code)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    _drop_harmless_magics(tree)
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name == "*":
                    return None  # binds names we cannot list
                bound.add(a.asname or a.name.split(".")[0])
        elif (
            isinstance(node, ast.ExceptHandler)
            and node.name
            or isinstance(node, (ast.MatchAs, ast.MatchStar))
            and node.name
        ):
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
    ns = getattr(shell, "user_ns", None) or {}
    used = names_used(ast.unparse(tree), ns)
    if used is None:
        return None
    return used | bound


# ----------------------------------------------------------------- names a cell uses
def names_used(code: str, ns: dict) -> set[str] | None:
    """Global names ``code`` may read, directly or through the functions and classes of
    ``ns`` it names; None when that cannot be known (then wait for everything)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif (
            isinstance(node, ast.Import)
            and {a.name for a in node.names} & _OPAQUE_MODULES
            or isinstance(node, ast.ImportFrom)
            and node.module in _OPAQUE_MODULES
        ):
            return None
    frontier = list(names)
    while frontier:
        value = ns.get(frontier.pop())
        for more in _globals_of(value) - names:
            names.add(more)
            frontier.append(more)
    return None if names & (_OPAQUE | _OPAQUE_MODULES) else names


def _globals_of(value: Any) -> set[str]:
    codes = []
    if isinstance(value, (types.FunctionType, types.MethodType)):
        codes.append(getattr(value, "__func__", value).__code__)
    elif isinstance(value, type):
        codes += [f.__code__ for f in vars(value).values() if isinstance(f, types.FunctionType)]
    out: set[str] = set()
    while codes:
        c = codes.pop()
        out.update(c.co_names)
        codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return out


# ----------------------------------------------------------------- the tracker of this kernel
_tracker: Tracker | None = None


def _shell():
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


def tracker_for(ns: dict) -> Tracker | None:
    """The tracker watching ``ns`` (the kernel's user namespace), started if needed; None
    when ``ns`` is not a shell's user namespace. A tracker started now has seen nothing
    yet, so it reports "anything may have changed" until the next reset."""
    global _tracker
    shell = _shell()
    if shell is None or getattr(shell, "user_ns", None) is not ns:
        return None
    if _tracker is not None and _tracker.shell is shell:
        return _tracker
    if _tracker is not None:
        _stop(_tracker)
    t = Tracker(shell)
    t.everything = True
    shell.events.register("pre_execute", t.pre_execute)
    shell.events.register("pre_run_cell", t.pre_run_cell)
    _tracker = t
    return t


def _stop(t: Tracker) -> None:
    for event, fn in (("pre_execute", t.pre_execute), ("pre_run_cell", t.pre_run_cell)):
        with contextlib.suppress(Exception):
            t.shell.events.unregister(event, fn)


def invalidate() -> None:
    """The namespace's objects were replaced wholesale (restore, re-run): next checkpoint full."""
    if _tracker is not None:
        _tracker.invalidate()


def current() -> Any:
    return _tracker
