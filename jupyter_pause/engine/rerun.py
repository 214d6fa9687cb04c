"""Re-running, with the user's consent, the cells that made what could not be saved.

Locks, generators, open files, sockets, database connections and subprocesses
cannot be pickled. Other tools re-run the cells that made them, silently. We
record, at checkpoint time, which cell last bound each skipped name (its
execution count and source, from IPython's input history ``_ih``), report them
after a restore ("re-run cell [7] to recreate conn, cursor") and run them only
when :func:`rerun` is called. The sources travel inside the signed manifest,
so a restore never offers code that someone else planted.
"""

from __future__ import annotations

import ast
from typing import Any

from .manifest import RerunCell

# offers of the last restore in this kernel: what rerun() may run
_OFFERED: list[RerunCell] = []


def _bound_names(source: str) -> set[str]:
    """Names a cell binds at top level (assignments, imports, defs, for/with targets)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()

    def targets(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                names.add(n.id)

    def visit(stmts):
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(s.name)
                continue  # their bodies bind local names
            if isinstance(s, ast.Assign):
                for t in s.targets:
                    targets(t)
            elif isinstance(s, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
                targets(s.target)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
            elif isinstance(s, (ast.Import, ast.ImportFrom)):
                for alias in s.names:
                    names.add((alias.asname or alias.name).split(".")[0])
            for n in ast.walk(s):
                if isinstance(n, ast.NamedExpr):
                    names.add(n.target.id)
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(s, field, []) or [])
            for handler in getattr(s, "handlers", []) or []:
                visit(handler.body)

    visit(tree.body)
    return names


def cells_for(names, namespace: dict) -> list[RerunCell]:
    """For each name, the newest cell in IPython's history that binds it, grouped by cell.
    Empty outside IPython (no ``_ih``)."""
    history = namespace.get("_ih")
    if not isinstance(history, list):
        return []
    wanted = set(names)
    by_cell: dict[int, RerunCell] = {}
    for count in range(len(history) - 1, 0, -1):
        if not wanted:
            break
        source = history[count]
        if not isinstance(source, str):
            continue
        found = sorted(wanted & _bound_names(source))
        if found:
            by_cell[count] = RerunCell(cell=count, source=source, names=found)
            wanted -= set(found)
    return [by_cell[c] for c in sorted(by_cell)]


def offer(cells: list[RerunCell]) -> None:
    """Remember what the last restore may re-run (replacing any earlier offer)."""
    _OFFERED[:] = cells


class _JSONList(list):
    """A list a frontend receives as ``application/json`` (user expressions carry every
    representation IPython can make of a value, not just its repr)."""

    def _repr_json_(self):
        return list(self)


def offered() -> list[dict[str, Any]]:
    """The cells the last restore offers to re-run: ``[{cell, source, names}]``."""
    return _JSONList({"cell": c.cell, "source": c.source, "names": list(c.names)} for c in _OFFERED)


def rerun(cells=None) -> dict[int, str]:
    """Re-run the offered cells (all, or those whose execution counts are given), in order,
    in this kernel; returns ``{cell: "ok" | error}``. Nothing runs unless this is called."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("jupyter_pause.rerun needs an IPython kernel")
    chosen = [c for c in _OFFERED if cells is None or c.cell in set(cells)]
    unknown = set(cells or ()) - {c.cell for c in _OFFERED}
    if unknown:
        raise ValueError(
            f"cell(s) {sorted(unknown)} were not offered by the last restore; offered: "
            f"{[c.cell for c in _OFFERED]}"
        )
    outcome: dict[int, str] = {}
    for c in chosen:
        result = shell.run_cell(c.source, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        outcome[c.cell] = "ok" if error is None else f"{type(error).__name__}: {error}"
        if error is None:
            _OFFERED.remove(c)
    return _JSONDict(outcome)


class _JSONDict(dict):
    def _repr_json_(self):
        return {str(k): v for k, v in self.items()}
