"""What counts as idle, and what each workload class does about it.

This is the one definition of idleness in jupyter-pause.  A notebook session
is idle when, for the whole threshold of its workload class:

1. its kernel is not busy (a busy kernel is never idle, however quiet it is);
2. no cell was executed (user cells only: our own housekeeping requests are
   silent and do not count);
3. no comm/widget traffic that the user caused;
4. when the class asks for it and NVML can tell, its GPU utilisation stayed
   under the class's threshold.

Status polling, by our frontend or by probes, never counts: those requests do
not reach the kernel at all.  After a resume (including a snapshot restore,
where the wall clock jumps) the idle clock starts from the resume.  Idle time
is measured on the monotonic clock: a step of the wall clock (NTP, a VM
resumed from suspend, a laptop lid) is not idleness.

Pure functions and dataclasses: the server's watcher feeds in facts and acts
on the verdicts.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: The classes every installation has; ``PauseApp.workload_classes`` adds or overrides.
DEFAULT_CLASSES: dict[str, dict[str, Any]] = {
    "gpu-interactive": {
        "idle_threshold": 30 * 60,
        "min_running_time": 10 * 60,
        "warn_before": 5 * 60,
        "gpu_utilization_counts": True,
        "action": "pause",
    },
    "cpu-small": {
        "idle_threshold": 60 * 60,
        "min_running_time": 0,
        "warn_before": 0,
        "gpu_utilization_counts": False,
        "action": "checkpoint",
    },
    "long-running": {
        "idle_threshold": 2 * 3600,
        "min_running_time": 0,
        "warn_before": 10 * 60,
        "gpu_utilization_counts": True,
        "action": "pause",
    },
    "never": {"idle_threshold": None, "action": "none"},
}

ACTIONS = ("pause", "checkpoint", "none")

#: seconds of use between two stagings to a bucket, for a class that pauses and sets none
STAGE_EVERY = 60.0


@dataclass(frozen=True)
class WorkloadClass:
    """An idle policy.  Times are seconds; ``idle_threshold=None`` never acts."""

    name: str
    idle_threshold: float | None = 30 * 60
    min_running_time: float = 0
    warn_before: float = 0
    gpu_utilization_counts: bool = False
    gpu_utilization_threshold: float = 5.0  # percent
    #: "pause" (checkpoint, then free the accelerator), "checkpoint" (save
    #: state, keep running) or "none" (never act automatically)
    action: str = "pause"
    #: predicted resume (opt-in): resume ahead of the user's predicted return
    #: when the prediction's confidence reaches ``predict_min_confidence``, so
    #: that the notebook is ready ``predict_margin`` seconds before they are
    #: expected (plus the measured resume latency); a predicted resume nobody
    #: used within ``predict_unused_after`` seconds is paused again
    predict_resume: bool = False
    predict_min_confidence: float = 0.7
    predict_margin: float = 5 * 60
    predict_unused_after: float = 30 * 60
    #: background autosave (opt-in): once a user cell ends with the kernel idle,
    #: checkpoint incrementally if the notebook has been in use (cells run) for
    #: this many seconds since its last saved state; None: never.  A hard kill
    #: (SIGKILL, OOM, node loss) then loses at most this much work.
    autosave_every: float | None = None
    #: continuous staging, with a bucket as the checkpoint root: once a user cell ends
    #: with the kernel idle, a notebook in use for this many seconds since its state was
    #: last saved is checkpointed (an autosave) and its changes go to the bucket in the
    #: background (server/staging.py), so that a lost node or a short shutdown grace
    #: costs only what changed since.  Default: :data:`STAGE_EVERY` for a class whose
    #: action is "pause", else None (never); ignored without a bucket.
    stage_every: float | None = None
    #: hibernate in place first (opt-in): after this many idle seconds the kernel's GPU
    #: memory moves to host memory and the kernel stays (a cell wakes it in seconds);
    #: the action ("pause") follows at ``idle_threshold``. None: never.
    hibernate_after: float | None = None

    @classmethod
    def from_config(cls, name: str, settings: dict[str, Any]) -> WorkloadClass:
        known = {f.name for f in fields(cls)} - {"name"}
        unknown = set(settings) - known
        if unknown:
            raise ValueError(
                f"workload class {name!r}: unknown setting(s) {sorted(unknown)}; "
                f"known: {sorted(known)}"
            )
        if "stage_every" not in settings and settings.get("action", cls.action) == "pause":
            settings = {**settings, "stage_every": STAGE_EVERY}
        policy = cls(name=name, **settings)
        if policy.action not in ACTIONS:
            raise ValueError(f"workload class {name!r}: action must be one of {ACTIONS}")
        for every in ("autosave_every", "stage_every"):
            value = getattr(policy, every)
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"workload class {name!r}: {every} must be > 0 or null")
        if policy.hibernate_after is not None:
            if not policy.hibernate_after > 0:
                raise ValueError(f"workload class {name!r}: hibernate_after must be > 0 or null")
            if policy.action == "checkpoint":
                raise ValueError(
                    f"workload class {name!r}: hibernate_after comes before a pause; a "
                    "checkpoint would wake the kernel again"
                )
            if policy.acts and policy.hibernate_after >= policy.idle_threshold:
                raise ValueError(
                    f"workload class {name!r}: hibernate_after must be less than idle_threshold"
                )
        return policy

    @property
    def acts(self) -> bool:
        return self.idle_threshold is not None and self.action != "none"

    def save_every(self, bucket: bool) -> float | None:
        """Seconds of use between two background saves: ``autosave_every``, and with a
        bucket (``bucket``) ``stage_every`` too, whichever is shorter; None: never."""
        every = [self.autosave_every, self.stage_every if bucket else None]
        return min((e for e in every if e is not None), default=None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_classes(overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, WorkloadClass]:
    merged = {name: dict(settings) for name, settings in DEFAULT_CLASSES.items()}
    for name, settings in (overrides or {}).items():
        merged[name] = {**merged.get(name, {}), **settings}
    return {name: WorkloadClass.from_config(name, settings) for name, settings in merged.items()}


METADATA_KEY = "jupyter_pause"
ENV_CLASS = "JUPYTER_PAUSE_WORKLOAD_CLASS"


def resolve_class(
    *,
    notebook_metadata: dict[str, Any] | None,
    kernelspec_metadata: dict[str, Any] | None,
    environ: dict[str, str] | None = None,
    default: str,
) -> tuple[str, str]:
    """A session's class and where it came from, in this order: the notebook's
    metadata, the kernelspec's metadata, the server's environment (on
    Kubernetes set from a pod label), the default."""
    environ = os.environ if environ is None else environ
    for source, metadata in (("notebook", notebook_metadata), ("kernelspec", kernelspec_metadata)):
        name = ((metadata or {}).get(METADATA_KEY) or {}).get("workload_class")
        if name:
            return name, source
    if environ.get(ENV_CLASS):
        return environ[ENV_CLASS], "environment"
    return default, "default"


@dataclass
class ActivityFacts:
    """What the server knows about one session at ``now``.

    Times are on the monotonic clock (seconds; only their differences count).
    """

    now: float
    started: float  # when the kernel (or the resumed session) started
    last_user_activity: float  # last cell end, cell start or user comm message
    busy: bool  # a user cell runs now, or the kernel reports busy
    gpu_utilization: float | None = None  # percent, None when unknown


@dataclass
class Verdict:
    idle: bool
    idle_seconds: float
    reasons: list[str] = field(default_factory=list)
    #: seconds until the policy acts; None when it never will
    seconds_left: float | None = None
    warn: bool = False
    act: bool = False
    #: time for the class's first step, hibernate in place (``hibernate_after``)
    hibernate: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(facts: ActivityFacts, policy: WorkloadClass) -> Verdict:
    """Decide whether a session is idle and whether the policy acts now."""
    idle_seconds = max(0.0, facts.now - facts.last_user_activity)
    running = max(0.0, facts.now - facts.started)
    reasons: list[str] = []
    if facts.busy:
        return Verdict(False, 0.0, ["the kernel is busy running a cell"])
    if (
        policy.gpu_utilization_counts
        and facts.gpu_utilization is not None
        and facts.gpu_utilization >= policy.gpu_utilization_threshold
    ):
        return Verdict(
            False,
            0.0,
            [
                f"GPU utilisation {facts.gpu_utilization:.0f}% ≥ {policy.gpu_utilization_threshold:.0f}%"
            ],
        )
    reasons.append(f"no cell or widget activity for {idle_seconds:.0f} s")
    if policy.gpu_utilization_counts and facts.gpu_utilization is None:
        reasons.append("GPU utilisation unknown (no NVML), not counted")
    hibernate = (
        policy.hibernate_after is not None
        and idle_seconds >= policy.hibernate_after
        and running >= policy.min_running_time
    )
    if not policy.acts:
        reasons.append(f"class {policy.name!r} never acts automatically")
        return Verdict(True, idle_seconds, reasons, hibernate=hibernate)
    due_idle = policy.idle_threshold - idle_seconds
    due_running = policy.min_running_time - running
    seconds_left = max(due_idle, due_running, 0.0)
    if due_running > 0 and due_running >= due_idle:
        reasons.append(
            f"running for {running:.0f} s, less than the class minimum {policy.min_running_time:.0f} s"
        )
    act = seconds_left <= 0
    warn = policy.warn_before > 0 and not act and seconds_left <= policy.warn_before
    return Verdict(
        True,
        idle_seconds,
        reasons,
        seconds_left=seconds_left,
        warn=warn,
        act=act,
        hibernate=hibernate and not act,
    )


def probe_output(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON a Kubeflow Workspace ``podExec`` activity probe expects.

    A busy kernel is activity now (``has_activity: true``); otherwise the
    most recent user activity (ISO 8601) is reported as ``last_activity``.
    The server's own ``last_activity`` is not used: an open JupyterLab tab
    polls ``/api/sessions`` and would keep every workspace awake.
    """
    if any(s.get("busy") for s in sessions):
        return {"has_activity": True}
    times = [s["last_activity"] for s in sessions if s.get("last_activity")]
    if not times:
        return {"has_activity": False}
    return {"last_activity": max(times)}
