"""What the notebook UI needs to tell a person, beyond the lifecycle state.

The lifecycle says *where* a notebook is; a person also wants to know *why*
and *what next*: who paused it (the idle policy, ``%pause``, or someone
pressing a button), which idle policy applies and how long it waits, and
whether a checkpoint can still be trusted before resuming from it.  These
are read-only views over the manager's state, kept out of the manager so that
the lifecycle code stays about moving between states.
"""

from __future__ import annotations

from typing import Any

from ..engine.paths import Bucket, id_sort_key, id_time
from ..lifecycle import OPERATION_STATES, SHUTDOWN_REASON, Session, State, allowed_now
from ..status_row import StatusRow
from .ports import Policies
from .recovery import SERVER_STOPPED_UNDER_IT


def paused_by(session: Session) -> str | None:
    """``auto``, ``magic``, ``user`` or ``server-shutdown`` for a paused notebook, else None."""
    op = session.operation
    if session.state != State.PAUSED or op is None or op.kind != "pause":
        return None
    if op.options.get("reason") == SHUTDOWN_REASON:
        return SHUTDOWN_REASON
    if op.options.get("auto"):
        return "auto"
    if op.options.get("after_cell"):
        return "magic"  # only %pause waits for its own cell to end
    return "user"


def saved_state_unrestored(
    session: Session, present: list[str] | None = None
) -> dict[str, Any] | None:
    """``{checkpoint, at, lost, cause}`` when the notebook's kernel went without a pause
    (it died, or the server stopped under it) and a checkpoint still has the state it
    held (:attr:`Session.lost`): the notebook offers that saved state back, and
    resume restores it.  None after a restart or shutdown someone asked for, once
    a resume restored it, once a checkpoint of the new kernel recorded the loss,
    and once resuming it failed (the failed resume's own offer, of the checkpoints
    that verify, takes over).

    The offer follows the checkpoints that exist: ``present`` (the notebook's
    checkpoint ids, when known) without that checkpoint (deleted from the panel, by
    ``DELETE``, by the CLI) offers the newest one left, and nothing when none is."""
    lost, op = session.lost, session.operation
    if lost is None or lost.checkpoint is None or session.busy:
        return None
    if op is not None and op.kind == "resume" and op.outcome == "failed":
        return None
    if session.state not in OPERATION_STATES["resume"]:
        return None
    checkpoint = lost.checkpoint
    if present is not None and checkpoint not in present:
        if not present:
            return None
        checkpoint = max(present, key=id_sort_key)
    saved = session.last_checkpoint or {}
    at = saved["time"] if saved.get("id") == checkpoint else id_time(checkpoint)
    cause = "server-stopped" if lost.why == SERVER_STOPPED_UNDER_IT else "kernel-died"
    return {"checkpoint": checkpoint, "at": at, "lost": lost.why, "cause": cause}


async def explain(
    session: Session, resolve_class=None, present: list[str] | None = None
) -> dict[str, Any]:
    """The ``paused_by``, ``policy`` and ``saved_state_unrestored`` fields of a
    session in ``GET status``; ``resolve_class`` is the workload classifier's, when
    auto-pause is on; ``present`` the notebook's checkpoints, when known."""
    policy = None
    if resolve_class is not None:
        workload_class, _ = await resolve_class(session)
        policy = {
            "workload_class": workload_class.name,
            "idle_threshold": workload_class.idle_threshold if workload_class.acts else None,
            "action": workload_class.action,
            "warn_before": workload_class.warn_before,
            "autosave_every": workload_class.autosave_every,
        }
    return {
        "paused_by": paused_by(session),
        "policy": policy,
        "saved_state_unrestored": saved_state_unrestored(session, present),
    }


async def status_row(
    path: str,
    session: Session,
    kernel: dict[str, Any] | None,
    policies: Policies,
    present: list[str] | None = None,
    *,
    can_hibernate: bool,
    staging=None,
) -> StatusRow:
    """One row of ``GET status``: the notebook at ``path`` (``session``: its lifecycle
    session, a fresh one where it has none), with what a person wants to know;
    ``kernel``: Jupyter's model of its kernel now, None where it has none; ``present``:
    its checkpoints, where it offers a saved state back; ``can_hibernate``: this server
    can hibernate kernels in place; ``staging(session)``: with a bucket, what it lacks of
    the notebook's state (server/staging.py).  The operation's timeline is not in it
    (``GET operations/{id}`` has it): it would double the size of the answer."""
    row = session.to_json()
    del row["pause_nonce"]
    if row["operation"] is not None:
        del row["operation"]["timeline"]
    live = kernel or {}
    on = policies.auto_pause_status is not None
    return StatusRow(
        session=row,
        kernel_id=live.get("id", session.kernel_id),
        execution_state=live.get("execution_state"),
        last_activity=live.get("last_activity"),
        last_saved=(session.last_checkpoint or {}).get("time"),
        explained=await explain(session, policies.workload_class, present),
        staging=staging(session) if staging is not None else None,
        can=allowed_now(session, has_kernel=kernel is not None, can_hibernate=can_hibernate),
        auto_pause=await policies.auto_pause_status(session) if on else None,
        auto_pause_on=on,
    )


def policy_summary(classes: dict, default: str) -> str:
    """One line per workload class, for the start-up log: what a person who
    wonders "why was my notebook paused?" would look up."""
    from ..formatting import format_seconds

    parts = []
    for name, policy in sorted(classes.items(), key=lambda item: item[0] != default):
        if not policy.acts:
            text = f"{name}: never acts"
        else:
            text = f"{name}: {policy.action} after {format_seconds(policy.idle_threshold)} idle"
            if policy.warn_before:
                text += f", warned {format_seconds(policy.warn_before)} before"
            if policy.min_running_time:
                text += f", not in its first {format_seconds(policy.min_running_time)}"
        if policy.autosave_every is not None:
            text += f", autosaved after {format_seconds(policy.autosave_every)} of use"
        parts.append(text + (" (default)" if name == default else ""))
    return "; ".join(parts)


def store_summary(checkpoint_dir) -> str:
    """Where checkpoints go, for the start-up log: a folder, or a bucket and its cache."""
    if isinstance(checkpoint_dir, Bucket):
        return f"checkpoints in {checkpoint_dir.url} (local cache {checkpoint_dir.cache})"
    return f"checkpoints in {checkpoint_dir}"


def shutdown_summary(grace: float, concurrency: int) -> str:
    """What a stopping server saves, for the start-up log."""
    from ..formatting import format_seconds

    if grace <= 0:
        return "a stopping server saves nothing (c.PauseApp.shutdown_grace = 0)"
    return (
        f"a stopping server pauses every live notebook within {format_seconds(grace)} "
        f"({concurrency} at once; c.PauseApp.shutdown_grace)"
    )
