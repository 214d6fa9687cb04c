/**
 * Hold back JupyterLab's automatic kernel start for one notebook.
 *
 * JupyterLab starts a kernel as soon as a notebook opens (and whenever a
 * cell runs without one).  For a paused notebook that kernel is empty, and
 * it is counted as allocated accelerator time: the notebook must stay
 * without a kernel until the user resumes or explicitly asks for an empty
 * one.  The hold is the notebook's own kernel preference (`shouldStart`),
 * so JupyterLab's "No Kernel" indicator tells the truth meanwhile.
 */
import { ISessionContext, SessionContext } from '@jupyterlab/apputils';

type Preference = ISessionContext.IKernelPreference;

const held = new WeakMap<
  ISessionContext,
  Pick<Preference, 'shouldStart' | 'autoStartDefault'>
>();

export function holdKernel(context: ISessionContext): void {
  if (held.has(context)) {
    return;
  }
  const { shouldStart, autoStartDefault } = context.kernelPreference;
  held.set(context, { shouldStart, autoStartDefault });
  context.kernelPreference = {
    ...context.kernelPreference,
    shouldStart: false,
    autoStartDefault: false
  };
}

/** Give JupyterLab back its own preference (the name it read from the file stays). */
export function releaseKernel(context: ISessionContext): void {
  const original = held.get(context);
  if (!original) {
    return;
  }
  held.delete(context);
  context.kernelPreference = { ...context.kernelPreference, ...original };
}

export function isHeld(context: ISessionContext): boolean {
  return held.has(context);
}

const originalStart = new WeakMap<ISessionContext, () => Promise<boolean>>();

/**
 * Route the notebook's `startKernel` (which JupyterLab calls when a cell
 * runs without a kernel) through `ask`, which may start one, resume, or
 * decline.  Concurrent calls (Run All) share one question.
 */
export function askBeforeStart(
  context: ISessionContext,
  ask: (start: () => Promise<boolean>) => Promise<boolean>
): void {
  if (originalStart.has(context)) {
    return;
  }
  const start = context.startKernel.bind(context);
  originalStart.set(context, start);
  let pending: Promise<boolean> | null = null;
  context.startKernel = () => {
    if (!pending) {
      pending = ask(() => startKernelNow(context)).finally(() => {
        pending = null;
      });
    }
    return pending;
  };
}

/**
 * Start the notebook's kernel without asking (the user chose an empty one,
 * or the notebook is not paused); true when a kernel must still be picked.
 */
export function startKernelNow(context: ISessionContext): Promise<boolean> {
  releaseKernel(context);
  const start = originalStart.get(context) ?? (() => context.startKernel());
  return start();
}

const joining = new WeakMap<ISessionContext, Promise<void>>();

/**
 * Connect the notebook to the Jupyter session that exists for its path (the
 * one a resume made, whoever asked for it), as JupyterLab does when a notebook
 * opens: `SessionContext._initialize` finds the session by path and connects
 * to it.  Never a new session: the start stays held meanwhile, so that finding
 * none starts nothing.  A view whose session ended (its kernel was paused
 * away) drops it first; a view starting or connecting a kernel by itself is
 * left to it.  Concurrent calls share one join.
 */
export function joinPathSession(context: ISessionContext): Promise<void> {
  let pending = joining.get(context);
  if (!pending) {
    pending = join(context).finally(() => joining.delete(context));
    joining.set(context, pending);
  }
  return pending;
}

async function join(context: ISessionContext): Promise<void> {
  if (!(context instanceof SessionContext) || context.isDisposed) {
    return;
  }
  // disposes the connections of sessions that ended on the server
  await context.sessionManager.refreshRunning();
  if (
    context.session ||
    context.isDisposed ||
    // a start or a first connection of its own is under way: joining now would
    // have JupyterLab shut the joined session down once its own one arrives
    context.kernelDisplayStatus === 'initializing'
  ) {
    return;
  }
  const wasHeld = isHeld(context);
  holdKernel(context);
  try {
    await context._initialize();
  } finally {
    if (!wasHeld) {
      releaseKernel(context);
    }
  }
}
