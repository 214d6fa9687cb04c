"""A notebook's workload class, decided once per kernel, when the kernel starts.

The rule is :func:`jupyter_pause.idle_policy.resolve_class` (the notebook's metadata,
its kernelspec's, the server's environment, the default), applied here to what the
server can read.  The manager and its reconciler classify a kernel before they record
its start, so the ledger's ``kernel-started`` row and every row after it carry the
class; the idle watcher, the autosaver, the scheduler and ``GET status`` read the same
answer.
"""

from __future__ import annotations

from jupyter_server.utils import ensure_async

from ..idle_policy import WorkloadClass, resolve_class
from ..lifecycle import Session


class WorkloadClassifier:
    """Resolves each kernel's class once; ``classes`` and ``default_class`` come from
    ``PauseApp.workload_classes`` and ``PauseApp.default_workload_class``."""

    def __init__(
        self,
        *,
        classes: dict[str, WorkloadClass],
        default_class: str,
        kernel_manager,
        contents_manager,
        log,
    ):
        if default_class not in classes:
            raise ValueError(
                f"default workload class {default_class!r} is not one of {sorted(classes)}"
            )
        self.classes = classes
        self.default_class = default_class
        self.kernel_manager = kernel_manager
        self.contents_manager = contents_manager
        self.log = log
        self._resolved: dict[str, tuple[str, str]] = {}  # kernel id -> (class, source)

    async def resolve(
        self, path: str, kernel_id: str | None, kernel_name: str | None, recorded: str | None = None
    ) -> tuple[WorkloadClass, str]:
        """The class of ``path`` running in ``kernel_id``, and where it came from.  Without
        a kernel, the class it last ran under (``recorded``) stands: a status of a thousand
        paused notebooks reads none of them."""
        key = kernel_id or path
        if key not in self._resolved and not kernel_id and recorded:
            self._resolved[key] = recorded, "recorded"
        if key not in self._resolved:
            notebook_metadata = kernelspec_metadata = None
            try:
                model = await ensure_async(self.contents_manager.get(path, content=True))
                notebook_metadata = dict(model["content"].get("metadata", {}))
            except Exception:
                self.log.debug("jupyter-pause: no notebook metadata for %s", path)
            if kernel_name:
                try:
                    spec_manager = self.kernel_manager.kernel_spec_manager
                    spec = await ensure_async(spec_manager.get_kernel_spec(kernel_name))
                    kernelspec_metadata = spec.metadata
                except Exception:
                    self.log.debug("jupyter-pause: no kernelspec %s", kernel_name)
            self._resolved[key] = resolve_class(
                notebook_metadata=notebook_metadata,
                kernelspec_metadata=kernelspec_metadata,
                default=self.default_class,
            )
        name, source = self._resolved[key]
        if name not in self.classes:
            self.log.warning(
                "jupyter-pause: unknown workload class %r for %s; using %r",
                name,
                path,
                self.default_class,
            )
            name, source = self.default_class, f"default (unknown class {name!r})"
        return self.classes[name], source

    async def classify(self, session: Session) -> tuple[WorkloadClass, str]:
        """The session's class (:meth:`resolve`), kept in the session for its next rows."""
        policy, source = await self.resolve(
            session.path, session.kernel_id, session.kernel_name, session.workload_class
        )
        session.workload_class = policy.name
        return policy, source
