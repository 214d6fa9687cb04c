"""``PauseApp``: the Jupyter Server extension and all of its configuration.

Every setting is a traitlet on this class (``c.PauseApp.<name>`` in
``jupyter_server_config.py``).  ``initialize_settings`` builds the domain
objects (ledger, session store, backend, manager) and hands them to the
handlers through ``self.settings``; handlers hold no state of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import os
import secrets
import signal
import socket
from pathlib import Path
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from jupyter_server.services.kernels.kernelmanager import ServerKernelManager
from prometheus_client import REGISTRY
from tornado.ioloop import IOLoop
from traitlets import Bool, Dict, Float, Int, Type, Unicode, default
from traitlets.utils.importstring import import_item

from .. import nvml
from ..backends.base import PauseBackend
from ..backends.kubernetes.compat import collect as fingerprint
from ..clock import SYSTEM
from ..engine import durable, signing
from ..engine import paths as checkpoint_paths
from ..engine.errors import KeyProblem
from ..engine.session_record import STALE, Records
from ..hibernate import driver as gpu_driver
from ..hibernate.client import Helper
from ..idle_policy import WorkloadClass, load_classes
from ..ledger import Ledger
from ..lifecycle import SessionStore
from ..version import __version__
from .autosave import Autosaver
from .bucket_sessions import BucketSessions
from .capacity import ResumeGate, machine_limit
from .classify import WorkloadClassifier
from .collaborators import build_collaborators
from .explain import policy_summary, shutdown_summary, store_summary
from .fleet import FleetPublisher
from .handlers import ROUTES
from .hibernate import GPU_MARGIN, HOST_MARGIN, Hibernator
from .idle_watcher import IdleWatcher
from .kernels import PauseKernelManager
from .manager import PauseManager
from .metrics import PauseMetrics
from .notice import NoticeWatcher
from .ports import Policies
from .scheduler import ResumeScheduler
from .shutdown import save_all
from .staging import SHARE, Stager
from .wake import WakingConnection

EVENT_SCHEMA = Path(__file__).parent.parent / "events" / "lifecycle.yaml"
EVENT_SCHEMA_ID = "https://events.jupyter.org/jupyter_pause/lifecycle/v1"


class InForce(NamedTuple):
    """The settings as read and checked at start-up (:meth:`PauseApp._read_settings`)."""

    checkpoint_dir: str | checkpoint_paths.Bucket
    classes: dict[str, WorkloadClass]
    time_zone: ZoneInfo | None
    backend: type[PauseBackend]
    kernel_gpus: int  # accelerators a kernel holds, unless its checkpoint found others
    accelerators: str  # the same, in words, and why


def _known_class(name: str, classes: dict[str, WorkloadClass]) -> str:
    if name not in classes:
        raise ValueError(f"not one of the workload classes ({', '.join(sorted(classes))})")
    return name


class PauseApp(ExtensionApp):
    name = "jupyter_pause"
    description = "Pause notebooks, release their accelerator, resume them later."
    load_other_extensions = True

    backend = Unicode(
        "auto",
        config=True,
        help="""Where the accelerator lives: 'local' (stop the kernel),
        'jupyterhub' (the Hub stops the whole single-user server),
        'kubeflow-workspace', 'gke-pod-snapshot', or 'auto' (a JupyterHub
        single-user server, else detect a pod, else local).  Ignored when
        backend_class is set.""",
    )
    backend_class = Type(
        default_value=None,
        klass=PauseBackend,
        allow_none=True,
        config=True,
        help="A PauseBackend subclass to use instead of the named backend.",
    )
    state_dir = Unicode(
        config=True,
        help="Where the ledger and the session states are kept. Default: <jupyter data dir>/pause.",
    )
    checkpoint_dir = Unicode(
        config=True,
        help="Root of the application checkpoints (one folder per notebook). "
        "On Kubernetes, put it on the home volume. "
        "Or a bucket, s3://BUCKET/PREFIX (the standard AWS variables and credentials, "
        "AWS_ENDPOINT_URL included) or gs://BUCKET/PREFIX (Google's standard credentials): "
        "a pause then ends once the checkpoint is in the bucket. "
        f"Default: ${checkpoint_paths.ENV_DIR}, else <state_dir>/checkpoints.",
    )
    checkpoint_cache_dir = Unicode(
        config=True,
        help="With a bucket as checkpoint_dir: the local folder checkpoints are written to "
        "first (at disk speed) and restored from when they are already there. "
        f"Default: ${checkpoint_paths.ENV_CACHE}, else a private folder in <jupyter data dir>/pause.",
    )
    key_file = Unicode(
        config=True,
        help="""The user's checkpoint signing key: a file of 64 hex digits, mode 0600, e.g. a
        mounted Kubernetes Secret or a file on the user's home volume.  Only checkpoints
        (and a bucket's session records) signed with it are loaded, so every server that
        is to resume this user's notebooks needs the same key.  Created if missing.
        Kernels get it too.  Default: <jupyter data dir>/pause/secret.""",
    )
    bucket_sync_interval = Float(
        15,
        min=1,
        config=True,
        help="""With a bucket as checkpoint_dir: seconds between two looks at the
        notebooks other servers paused, scheduled or resumed (their session records in
        the bucket).  A resume always reads the bucket first.""",
    )
    bucket_hold_timeout = Float(
        STALE,
        min=4,
        config=True,
        help="""With a bucket as checkpoint_dir: a server renews the records of the
        notebooks it runs four times in this many seconds; a record not renewed for
        this long is a server that is gone (a lost node, a preemption), and another
        server may resume the notebook from its last checkpoint.  The same on every
        server of the bucket.""",
    )
    keep_checkpoints = Int(3, config=True, help="Checkpoints kept per notebook.")
    kernel_call_timeout = Float(
        3600, config=True, help="Seconds a checkpoint or restore inside a kernel may take."
    )
    idle_wait_timeout = Float(
        6 * 3600, config=True, help="Seconds %pause waits for the running cell to finish."
    )

    auto_pause = Bool(
        True, config=True, help="Apply the idle policies (warn, then pause or checkpoint)."
    )
    workload_classes = Dict(
        config=True,
        help="""Idle policies by workload class, merged over the built-in ones
        (gpu-interactive, cpu-small, long-running, never).  Each maps setting
        names to values, e.g. {"gpu-interactive": {"idle_threshold": 1800,
        "min_running_time": 600, "warn_before": 300, "gpu_utilization_counts":
        true, "action": "pause"}}.  idle_threshold null means never.
        "autosave_every": seconds (null: off, the default) turns on the
        background autosave for a class: once a cell ends with the kernel idle,
        a notebook in use for that long since its state was last saved is
        checkpointed incrementally, so a hard kill loses at most that much
        work.  "stage_every": with a bucket as checkpoint_dir, the same for
        continuous staging (its changes go to the bucket in the background);
        60 by default for the classes that pause, null: off.  Autosave and
        staging run whether auto_pause is on or not; the idle policies only
        while it is.""",
    )
    stage_share = Float(
        SHARE,
        min=0.01,
        max=1.0,
        config=True,
        help="""With a bucket as checkpoint_dir: the most of the upload bandwidth continuous
        staging uses (0 < share <= 1).  It sends one part at a time, and after each leaves
        the link to others for as long as the part took, scaled: 0.5 keeps it busy at most
        half of the time.  A pause and a stopping server's last saves use all of it.""",
    )
    default_workload_class = Unicode(
        "gpu-interactive",
        config=True,
        help="The class of a session whose notebook, kernelspec and environment name none.",
    )
    idle_check_interval = Float(30, config=True, help="Seconds between two idle checks.")
    schedule_check_interval = Float(
        30,
        config=True,
        help="""Seconds between two looks for due scheduled resumes and unused
        predicted ones (a new schedule also wakes the scheduler up).""",
    )
    max_concurrent_resumes = Int(
        min=1,
        config=True,
        help="""Resumes that start a kernel and restore at the same time; the
        others wait (waiting-for-capacity), in the order they fell due (scheduled
        resumes) or were asked for.  Default, read at start-up: one per CPU, at
        most one per 2 GiB of available memory, at least one, i.e.
        max(1, min(CPUs, available memory / 2 GiB)); cgroup v2 limits (a pod's
        resources.limits) count.""",
    )
    shutdown_grace = Float(
        25,
        min=0,
        config=True,
        help="""Seconds a stopping server (SIGTERM, SIGINT, a reboot, a pod deleted or
        preempted) spends pausing every live notebook on a checkpoint before it stops;
        a running cell is waited for within it, never interrupted.  What is not saved
        by then is named in the log and the ledger.  The default fits Kubernetes' 30 s
        terminationGracePeriodSeconds with margin; 0: save nothing at shutdown.""",
    )
    notice_interval = Float(
        2.0,
        min=0,
        config=True,
        help="""Seconds between two looks for the platform's notice that the machine under
        the server is about to go (on Kubernetes: its node's termination taint or condition
        from GKE, or the AWS node termination handler's taints and labels; this needs the
        read-only RBAC of deploy/gke-pod-snapshot/node-notice.yaml, or for
        Workspaces deploy/kubeflow-workspaces/node-notice.yaml).  At the notice every notebook's
        state goes to the bucket at once, at full speed, so that SIGTERM finds only the
        last changes to save.  0: never look.""",
    )
    shutdown_concurrency = Int(
        4,
        min=1,
        config=True,
        help="Notebooks a stopping server checkpoints at the same time.",
    )
    prediction_time_zone = Unicode(
        "",
        config=True,
        help="""The users' time zone (an IANA name such as Europe/Paris) for
        predicting their return by weekday and hour; empty: this machine's.""",
    )

    kernel_accelerators = Int(
        None,
        allow_none=True,
        min=0,
        config=True,
        help="""Accelerators each kernel holds, for the GPU-time report and the
        jupyter_pause_accelerator_* metrics (a kernel's checkpoint corrects it to the
        GPUs it was found using).  Default: 1 where this machine has a GPU (NVML, else
        nvidia-smi), else 0: "no accelerator detected", and no accelerator-hours are
        counted.  Set it where the platform gives kernels accelerators that cannot be
        detected here.""",
    )

    metrics_cache_seconds = Float(
        5,
        config=True,
        help="""Seconds one reading of the ledger serves the jupyter_pause_*
        Prometheus metrics (a tighter scrape interval reuses it).""",
    )

    fleet_interval = Float(
        300,
        config=True,
        help="""Seconds between two hand-overs of this server's ledger, rolled up per
        notebook, to where the fleet is read (the jupyter-pause-hub service, a
        Kubernetes workspace's state object; `jupyter pause report --fleet`).  Rows are
        also handed over after each pause and when the server stops.  0: only then.""",
    )

    hibernate_driver = Unicode(
        "jupyter_pause.hibernate.driver.CudaDriver",
        config=True,
        help="""The GPU driver that hibernates kernels in place (%pause --hibernate,
        Hibernate GPU, a workload class's hibernate_after): a
        jupyter_pause.hibernate.driver.GpuDriver subclass as module.Class, called from
        one helper process per server. The default calls the CUDA driver's process
        checkpoint API (cuda-bindings; driver 570 or newer) and NVML. Empty: off.""",
    )
    hibernate_host_margin = Int(
        HOST_MARGIN,
        min=0,
        config=True,
        help="""Bytes of host memory a hibernate leaves free beside the GPU memory it
        moves there; a kernel whose GPU memory does not fit so is not hibernated.""",
    )
    hibernate_gpu_margin = Int(
        GPU_MARGIN,
        min=0,
        config=True,
        help="""Bytes of GPU memory a wake wants free beside what the kernel held; less
        than that free and the kernel stays hibernated (a restore that fails for memory
        leaves a process unable to ever restore).""",
    )
    hibernate_lock_timeout = Float(
        30,
        min=1,
        config=True,
        help="Seconds the driver may wait for a kernel's submitted GPU work before a "
        "hibernate gives up (the kernel then keeps its GPU memory).",
    )

    @default("state_dir")
    def _default_state_dir(self):
        return os.path.join(jupyter_data_dir(), "pause")

    @default("max_concurrent_resumes")
    def _default_max_concurrent_resumes(self):
        return machine_limit()

    @default("checkpoint_dir")
    def _default_checkpoint_dir(self):
        return os.environ.get(checkpoint_paths.ENV_DIR) or os.path.join(
            self.state_dir, "checkpoints"
        )

    def checkpoint_location(self):
        """The checkpoint root: a folder, or a bucket and its cache (engine/paths.py);
        ValueError for a URL that is neither."""
        bucket = checkpoint_paths.parse_bucket(
            self.checkpoint_dir, self.checkpoint_cache_dir or None
        )
        return bucket or self.checkpoint_dir

    def _read_settings(self) -> InForce:
        """Every setting that can be wrong, read once, before anything is built or written.

        A bad one stops the server here, each named in the log (its credentials masked),
        rather than leaving it to serve notebooks without jupyter-pause: no pause, no
        auto-pause, no save at shutdown, behind one "extension failed loading" line."""
        problems = []

        def read(name: str, reader):
            try:
                return reader()
            except (ValueError, TypeError, ImportError, ZoneInfoNotFoundError) as e:
                shown = checkpoint_paths.redact(str(getattr(self, name)))
                said = "" if shown in str(e) else f" = {shown!r}"  # a URL's error names it
                problems.append(f"c.PauseApp.{name}{said}: {e}")

        location = read("checkpoint_dir", self.checkpoint_location)
        classes = read("workload_classes", lambda: load_classes(self.workload_classes))
        if classes is not None:
            default = self.default_workload_class
            read("default_workload_class", lambda: _known_class(default, classes))
        zone = read(
            "prediction_time_zone",
            lambda: ZoneInfo(self.prediction_time_zone) if self.prediction_time_zone else None,
        )
        backend = read("backend", self._backend_class)
        read("key_file", self._use_key_file)
        kernel_gpus, accelerators = self._accelerators()
        if problems:
            for problem in problems:
                self.log.critical("jupyter-pause: %s", problem)
            self.log.critical(
                "jupyter-pause: the server does not start with these settings: it would "
                "serve notebooks without pausing, auto-pausing or saving them at shutdown. "
                "Correct them (`jupyter pause config` lists every setting)."
            )
            raise SystemExit(1)
        return InForce(location, classes, zone, backend, kernel_gpus, accelerators)

    def initialize_settings(self):
        self.in_force = self._read_settings()
        # on a hub, the Hub's user name (under KubeSpawner every Unix user is jovyan)
        user = os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
        self._make_private_folders()
        clock = SYSTEM  # one clock for all: wall to show and schedule, monotonic to measure
        self.ledger = Ledger(Path(self.state_dir) / "ledger.sqlite3", user=user, clock=clock)
        self._connect_event_bus()
        self.backend_instance = self._make_backend(clock)
        # a kernel's class is decided when it starts, for the ledger's rows whether or not
        # the idle policies are on
        classifier = WorkloadClassifier(
            classes=self.in_force.classes,
            default_class=self.default_workload_class,
            kernel_manager=self.serverapp.kernel_manager,
            contents_manager=self.serverapp.contents_manager,
            log=self.log,
        )
        # the policies stand above the manager and are built after it: they reach it as
        # ports, which find them when first called; the idle watcher's when it is on
        on = self.auto_pause
        policies = Policies(
            workload_class=classifier.classify if on else None,
            auto_pause_status=(lambda s: self.idle_watcher.auto_pause_status(s)) if on else None,
            after_pause=lambda s: self.scheduler.predict(s),
        )
        store = SessionStore(Path(self.state_dir) / "sessions.json", clock=clock)
        location = self.in_force.checkpoint_dir
        self.shared = stager = None
        if isinstance(location, checkpoint_paths.Bucket):
            stager = Stager(
                checkpoint_dir=location, share=self.stage_share, log=self.log, clock=clock
            )
            self.shared = BucketSessions(
                records=Records(location),
                store=store,
                contents_manager=self.serverapp.contents_manager,
                node=f"{socket.gethostname()}:{self._server_id()}",
                interval=self.bucket_sync_interval,
                log=self.log,
                clock=clock,
                hold_timeout=self.bucket_hold_timeout,
            )
        self.hibernator = self._make_hibernator(clock)
        self.parts = build_collaborators(
            kernel_manager=self.serverapp.kernel_manager,
            session_manager=self.serverapp.session_manager,
            contents_manager=self.serverapp.contents_manager,
            backend=self.backend_instance,
            store=store,
            ledger=self.ledger,
            checkpoint_dir=location,
            keep_checkpoints=self.keep_checkpoints,
            kernel_call_timeout=self.kernel_call_timeout,
            idle_wait_timeout=self.idle_wait_timeout,
            classifier=classifier,
            policies=policies,
            log=self.log,
            clock=clock,
            hibernator=self.hibernator,
            stager=stager,
            shared=self.shared,
            kernel_gpus=self.in_force.kernel_gpus,
        )
        self.manager = PauseManager(
            parts=self.parts,
            log=self.log,
            resume_gate=ResumeGate(self.max_concurrent_resumes),
            policies=policies,
        )
        self._prepare_kernels(self.parts.checkpointer.kernel_settings())
        self._watch_kernel_starts()
        self._register_metrics(clock)
        self.fleet = FleetPublisher(
            ledger=self.ledger,
            backend=self.backend_instance,
            storage=lambda: self.parts.catalogue.measure_storage(list(store.sessions)),
            interval=self.fleet_interval,
            log=self.log,
            clock=clock,
        )
        self._make_watchers(classifier, clock, bucket=stager is not None)
        self.scheduler = ResumeScheduler(
            operations=self.manager,
            schedules=self.parts.schedules,
            store=store,
            ledger=self.ledger,
            log=self.log,
            workload_class=policies.workload_class,
            interval=self.schedule_check_interval,
            clock=clock,
            tz=self.in_force.time_zone,
        )
        self.settings.update(
            jupyter_pause_manager=self.manager,
            jupyter_pause_activity=self.parts.activity,
            jupyter_pause_catalogue=self.parts.catalogue,
            jupyter_pause_schedules=self.parts.schedules,
            jupyter_pause_reconciler=self.parts.reconciler,
            jupyter_pause_checkpointer=self.parts.checkpointer,
            jupyter_pause_clock=clock,
            jupyter_pause_idle=self.idle_watcher,
            jupyter_pause_ledger=self.ledger,
            jupyter_pause_version=__version__,
        )
        IOLoop.current().add_callback(self._begin_startup)

    def _make_watchers(self, classifier: WorkloadClassifier, clock, *, bucket: bool) -> None:
        """What acts on the notebooks in the background through the manager: the idle
        watcher (with auto-pause on), the autosaver (autosave and, with a ``bucket``,
        staging, whether auto-pause is on or not), the watcher of the platform's notice."""
        self.idle_watcher = self.autosaver = None
        if self.auto_pause:
            self.idle_watcher = IdleWatcher(
                operations=self.manager,
                store=self.parts.store,
                activity=self.parts.activity,
                ledger=self.ledger,
                kernel_manager=self.serverapp.kernel_manager,
                classifier=classifier,
                interval=self.idle_check_interval,
                log=self.log,
                clock=clock,
            )
            self._warn_about_culling()
        if any(c.save_every(bucket) is not None for c in classifier.classes.values()):
            self.autosaver = Autosaver(
                operations=self.manager,
                store=self.parts.store,
                activity=self.parts.activity,
                ledger=self.ledger,
                workload_class=classifier.classify,
                log=self.log,
                clock=clock,
                bucket=bucket,
            )
        self.notices = NoticeWatcher(
            backend=self.backend_instance,
            operations=self.manager,
            autosaver=self.autosaver,
            interval=self.notice_interval,
            log=self.log,
        )

    def _begin_startup(self):
        """The loop runs: start the background work, unless the server already stops (a
        stop that came first has nothing to wait for; nothing may start after it)."""
        if getattr(self, "_stop_task", None) is None:
            self._startup_task = asyncio.ensure_future(self._startup())

    def _register_metrics(self, clock):
        """``jupyter_pause_*`` on the server's ``/metrics`` (Jupyter's registry)."""
        parts = self.parts
        self.metrics = PauseMetrics(
            self.ledger,
            parts.store,
            storage=lambda: parts.catalogue.measure_storage(list(parts.store.sessions)),
            staging=(
                (
                    lambda: {
                        path: parts.staging_lag(session)
                        for path, session in list(parts.store.sessions.items())
                        if session.state.has_kernel
                    }
                )
                if parts.stager is not None
                else None
            ),
            ttl=self.metrics_cache_seconds,
            clock=clock,
            log=self.log,
        )
        REGISTRY.register(self.metrics)

    def _server_id(self) -> str:
        """This server's name among those sharing a bucket, the same across its restarts:
        kept in ``state_dir`` (a restarted server knows its own records)."""
        path = Path(self.state_dir) / "server-id"
        with contextlib.suppress(FileExistsError):  # made by an earlier start
            durable.write_file(path, secrets.token_hex(4).encode(), replace=False)
        return path.read_text().strip()

    def _use_key_file(self):
        """The signing key this server and its kernels use: ``key_file``, handed to the
        engine (here and in every kernel) as its environment variable; a key file that
        exists but cannot be used stops the server here, naming it."""
        if self.key_file:
            path = Path(self.key_file).expanduser().absolute()
            self._key_env_before = os.environ.get(checkpoint_paths.ENV_KEY_FILE)
            os.environ[checkpoint_paths.ENV_KEY_FILE] = str(path)
        try:
            key = signing.load_key(create=False)
        except KeyProblem as e:  # never replaced silently: every checkpoint would be foreign
            raise ValueError(str(e)) from None
        self.log.info(
            "jupyter-pause: signing key %s (%s)",
            signing.key_path(),
            f"fingerprint {signing.key_id(key)}" if key else "none yet: made by the first save",
        )

    def _make_private_folders(self):
        """The ledger, the sessions and the signing key are this user's alone: so are
        their folders (0700), also where an older version or the umask made them 0755."""
        for folder in dict.fromkeys((Path(self.state_dir), signing.key_path().parent)):
            try:
                durable.private_dir(folder)
            except PermissionError as e:  # not ours to change: say so, start anyway
                self.log.warning("jupyter-pause: could not make %s private: %s", folder, e)

    def initialize_handlers(self):
        self.handlers.extend(ROUTES)

    async def _startup(self):
        # first settle what a previous server left unfinished, so that no
        # notebook answers 409 for an operation nobody runs any more
        await self.manager.recover()
        self.manager.start()
        if self.shared is not None:  # what other servers paused, before schedules fire
            try:
                await self.shared.refresh()
            except Exception as e:
                self.log.warning("jupyter-pause: could not list the bucket's sessions: %s", e)
            self.shared.start()
        self.scheduler.start()  # schedules that fell due while the server was down fire now
        if self.autosaver is not None:
            self.autosaver.start()
        self.notices.start()
        if self.idle_watcher is not None:
            self.idle_watcher.start()
            self.log.info(
                "jupyter-pause: auto-pause on (c.PauseApp.workload_classes to change): %s",
                policy_summary(self.idle_watcher.classifier.classes, self.default_workload_class),
            )
        else:
            self.log.info("jupyter-pause: auto-pause off (c.PauseApp.auto_pause = False)")
        report = await self.backend_instance.startup()
        if getattr(self, "_stop_task", None) is not None:
            return  # the server stops already: no resume begins, no hand-over either
        await self.manager.came_back(report)
        self.fleet.start()
        await self.hibernator.start()  # last: the helper's driver takes seconds to start
        self.log.info(
            "jupyter-pause %s: backend %s%s; %s; %s; %s",
            __version__,
            self.backend_instance.name,
            f", {report.detail}" if report.detail else "",
            store_summary(self.in_force.checkpoint_dir),
            shutdown_summary(self.shutdown_grace, self.shutdown_concurrency),
            self.in_force.accelerators,
        )
        problem = await self.parts.catalogue.store_problem()
        if problem:  # found now, not at the first pause
            self.log.warning(
                "jupyter-pause: the checkpoint store cannot be used: %s Pauses, checkpoints "
                "and the saves at shutdown fail until it can (c.PauseApp.checkpoint_dir).",
                problem,
            )

    def _warn_about_culling(self):
        """Jupyter's own culler shuts kernels down (state lost): it must not fire first."""
        kernel_manager = self.serverapp.kernel_manager
        cull = getattr(kernel_manager, "cull_idle_timeout", 0) or 0
        pausing = [
            c.idle_threshold
            for c in self.idle_watcher.classifier.classes.values()
            if c.acts and c.action == "pause"
        ]
        if cull and pausing and cull <= max(pausing):
            self.log.warning(
                "jupyter-pause: MappingKernelManager.cull_idle_timeout=%ss kills idle kernels "
                "(losing their state) before jupyter-pause auto-pauses them after up to %ss. "
                "Set cull_idle_timeout to 0 or above the longest idle_threshold; "
                "see docs/ARCHITECTURE.md#idle-policy.",
                cull,
                int(max(pausing)),
            )

    def _accelerators(self) -> tuple[int, str]:
        """What each kernel counts as holding, and why, in words."""
        if self.kernel_accelerators is not None:
            n = self.kernel_accelerators
            return n, f"{n} accelerator(s) per kernel (c.PauseApp.kernel_accelerators)"
        found = nvml.device_count()
        if found is None:  # no NVML here: nvidia-smi, as the environment's fingerprint
            found = fingerprint().get("gpus_visible") or 0
        if not found:
            return 0, (
                "no accelerator detected: no accelerator-hours are counted "
                "(c.PauseApp.kernel_accelerators if kernels hold some)"
            )
        return 1, f"1 accelerator per kernel ({found} GPU(s) detected)"

    def _backend_class(self) -> type[PauseBackend]:
        if self.backend_class is not None:
            return self.backend_class
        from ..backends import backend_class_for

        return backend_class_for(self.backend)

    def _make_backend(self, clock) -> PauseBackend:
        return self.in_force.backend(
            parent=self,
            log=self.log,
            ledger=self.ledger,
            clock=clock,
            state_dir=self.state_dir,
            checkpoint_dir=self.in_force.checkpoint_dir,
        )

    def _prepare_kernels(self, kernel_settings: dict[str, str]):
        """Start IPython kernels with the magics loaded, their notebook known and the
        server's ``kernel_settings`` handed to each of them."""
        kernel_manager = self.serverapp.kernel_manager
        configured = kernel_manager.kernel_manager_class
        if configured in (
            "jupyter_server.services.kernels.kernelmanager.ServerKernelManager",
            ServerKernelManager,
        ):
            kernel_manager.kernel_manager_class = "jupyter_pause.server.kernels.PauseKernelManager"
        elif not issubclass(import_item(configured), PauseKernelManager):
            self.log.warning(
                "jupyter-pause: kernel_manager_class is %s, so kernels will not load the "
                "jupyter_pause magics by themselves; add `%%load_ext jupyter_pause` or "
                "subclass jupyter_pause.server.kernels.PauseKernelManager",
                configured,
            )
            return
        kernel_manager.kernel_manager_factory = functools.partial(
            kernel_manager.kernel_manager_factory,
            pause_settings=kernel_settings,
            before_stop=self.hibernator.before_stop,
        )

    def _make_hibernator(self, clock) -> Hibernator:
        """The hibernator, with its helper when this server can hibernate kernels; else
        with why not (GET status's ``can.hibernate`` is then false). A driver setting that
        names no driver stops the server here."""
        why = None
        if not self.hibernate_driver:
            why = "off (c.PauseApp.hibernate_driver is empty)"
        else:
            why = gpu_driver.load(self.hibernate_driver).present()
        connection = self.serverapp.kernel_websocket_connection_class
        if connection is ZMQChannelsWebsocketConnection:
            # a cell wakes a hibernated kernel before it reaches it (server/wake.py)
            self.settings["kernel_websocket_connection_class"] = WakingConnection
        elif not issubclass(connection, WakingConnection):
            why = why or (
                f"the kernel websocket connection class is {connection.__name__}, which "
                "cannot wake a hibernated kernel before a cell reaches it"
            )
        return Hibernator(
            Helper(self.hibernate_driver, log=self.log) if why is None else None,
            unavailable=why,
            host_margin=self.hibernate_host_margin,
            gpu_margin=self.hibernate_gpu_margin,
            lock_timeout=self.hibernate_lock_timeout,
            log=self.log,
            clock=clock,
        )

    def _connect_event_bus(self):
        event_logger = getattr(self.serverapp, "event_logger", None)
        if event_logger is None:
            return
        event_logger.register_event_schema(EVENT_SCHEMA)

        def emit(event):
            payload = {k: v for k, v in event.to_json().items() if k not in ("id", "user")}
            event_logger.emit(schema_id=EVENT_SCHEMA_ID, data=payload)

        self.ledger.listeners.append(emit)

    def _watch_kernel_starts(self):
        """Reconcile from Jupyter's own events: kernels started and stopped,
        notebooks renamed."""
        event_logger = getattr(self.serverapp, "event_logger", None)
        if event_logger is not None:
            event_logger.add_listener(
                schema_id="https://events.jupyter.org/jupyter_server/kernel_actions/v1",
                listener=self.parts.reconciler.on_kernel_action,
            )
            event_logger.add_listener(
                schema_id="https://events.jupyter.org/jupyter_server/contents_service/v1",
                listener=self.parts.reconciler.on_contents_action,
            )

    async def _start_jupyter_server_extension(self, serverapp):
        """Once the server runs (as a process, not embedded in tests): without a
        terminal, Jupyter Server leaves SIGINT to Python, which ends the process on
        the spot (KeyboardInterrupt), or ignores it when the server was started in
        the background (a hub started with `&` passes that on): either way no
        extension is stopped and nothing is saved, though SIGINT is how JupyterHub
        stops a server.  Stop in order instead, as on SIGTERM (JupyterHub's
        single-user server does the same on a terminal); on a terminal, Jupyter's
        own confirmation stays."""
        if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, signal.SIG_IGN):
            signal.signal(signal.SIGINT, serverapp._signal_stop)

    async def stop_extension(self):
        # a second signal stops the server a second time: it waits for the same stop
        if getattr(self, "_stop_task", None) is None:
            self._stop_task = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stop_task)

    @contextlib.contextmanager
    def _stop_step(self, what: str):
        """One step of the stop: one that fails is logged, and the others run all the same
        (Jupyter Server halts if ``stop_extension`` raises)."""
        try:
            yield
        except Exception:
            self.log.exception("jupyter-pause: could not %s while the server stops", what)

    async def _stop(self):
        """Called by Jupyter Server before it shuts kernels down: pause every live
        notebook (within ``shutdown_grace``), then close."""
        step = self._stop_step
        startup = getattr(self, "_startup_task", None)
        if startup is not None:
            # a stop right after the start: the loops and leases that the start-up
            # begins are begun before they are stopped here, never after (a task left
            # running on a closed loop, a close that waited for it)
            await asyncio.gather(startup, return_exceptions=True)
        if getattr(self, "metrics", None) is not None:
            with step("unregister the metrics"):
                REGISTRY.unregister(self.metrics)
            self.metrics = None
        if getattr(self, "idle_watcher", None) is not None:
            with step("stop the idle watcher"):
                self.idle_watcher.stop()  # no new auto-pause while the server stops
        if getattr(self, "autosaver", None) is not None:
            with step("stop the autosaves"):
                await self.autosaver.close()  # nor a new autosave
        if getattr(self, "notices", None) is not None:
            with step("stop the notice watcher"):
                await self.notices.close()
        backend = getattr(self, "backend_instance", None)
        if backend is not None:
            with step("tell the backend"):
                await backend.stopping()
        if getattr(self, "scheduler", None) is not None:
            with step("stop the scheduler"):
                await self.scheduler.stop()
        manager = getattr(self, "manager", None)
        if manager is not None:
            if self.shutdown_grace > 0:
                with step("save the notebooks"):  # the server must stop all the same
                    await save_all(
                        manager, self.parts, self.shutdown_grace, self.shutdown_concurrency
                    )
            if getattr(self, "fleet", None) is not None:
                with step("publish the fleet"):
                    await self.fleet.close()  # last: the pauses and saves just recorded
            with step("close the manager"):
                await manager.close()
        if getattr(self, "shared", None) is not None:
            with step("close the shared sessions"):
                await self.shared.close()  # after the saves: their records are written first
        if self.key_file and hasattr(self, "_key_env_before"):
            if self._key_env_before is None:
                os.environ.pop(checkpoint_paths.ENV_KEY_FILE, None)
            else:
                os.environ[checkpoint_paths.ENV_KEY_FILE] = self._key_env_before
        hibernator = getattr(self, "hibernator", None)
        if hibernator is not None and not hibernator.touched:
            # else kept: Jupyter stops the kernels next, and those it checkpointed are
            # locked and checkpointed once more first (the helper ends with the server)
            with step("close the GPU helper"):
                await hibernator.close()
        ledger = getattr(self, "ledger", None)
        if ledger is not None:
            with step("close the ledger"):
                ledger.close()
