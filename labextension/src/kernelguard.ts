/**
 * A paused notebook never gets a kernel behind the user's back, and a resumed
 * one never gets a second.
 *
 * - Opening it starts none (JupyterLab's kernel start is held until the
 *   server says the notebook is not paused).
 * - Running a cell in it asks first: resume, then run; run in an empty
 *   kernel; or cancel.  Nothing flips to "running" silently.  While a pause
 *   or resume runs, the cell waits for its outcome.
 * - However it was paused (a button here or in another tab, `%pause`, the
 *   idle policy, the CLI), every open view of it drops its dead kernel and
 *   shows "No Kernel".
 * - However it was resumed (a schedule, a prediction, the CLI, another tab,
 *   the hub page), every open view joins the notebook's one Jupyter session,
 *   whose kernel holds the restored state, by the next poll; a cell run
 *   before that joins it too, instead of starting a session of its own.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { PauseActions } from './actions';
import {
  BUSY_STATES,
  ISessionStatus,
  PauseState,
  RESUMABLE_STATES
} from './api';
import {
  askBeforeStart,
  holdKernel,
  isHeld,
  joinPathSession,
  releaseKernel
} from './kernelhold';
import { formatBytes, formatTime, shortReason } from './labels';
import { surfaceErrors } from './notices';

/**
 * The server holds a kernel with the notebook's state (resumed, or running)
 * that this view is not connected to: the view joins it.
 */
function kernelToJoin(
  session: ISessionStatus | null,
  panel: NotebookPanel
): boolean {
  return (
    !!session?.kernel_id &&
    !BUSY_STATES.includes(session.state) &&
    !RESUMABLE_STATES.includes(session.state) &&
    panel.sessionContext.session?.kernel?.id !== session.kernel_id
  );
}

/** How long a cell run waits for a pause or resume under way to end. */
const SETTLE_DEADLINE_MS = 30 * 60 * 1000;

export class KernelGuard {
  constructor(
    private readonly _actions: PauseActions,
    private readonly _notebooks: INotebookTracker
  ) {
    _notebooks.widgetAdded.connect((_, panel) => this._guard(panel));
    _notebooks.forEach(panel => this._guard(panel));
    _actions.model.changed.connect(this._follow, this);
  }

  private _guard(panel: NotebookPanel): void {
    const context = panel.sessionContext;
    holdKernel(context);
    askBeforeStart(context, start => this._askFirst(panel, start));
    surfaceErrors(
      this._decide(panel),
      this._actions.trans.__(
        'Starting the kernel of %1 failed',
        panel.context.path
      )
    );
  }

  /** Release the held kernel start unless the server says the notebook is paused. */
  private async _decide(panel: NotebookPanel): Promise<void> {
    const context = panel.sessionContext;
    const session = await this._actions.model.fetchSession(panel.context.path);
    if (session && RESUMABLE_STATES.includes(session.state)) {
      return; // stays without a kernel until the user resumes or chooses one
    }
    releaseKernel(context);
    await context.ready;
    const wanted = context.kernelPreference.shouldStart !== false;
    if (wanted && context.hasNoKernel && !panel.isDisposed) {
      // JupyterLab initialised while the start was held: start it as it would have
      await this._actions.startEmpty(panel);
    }
  }

  /** Called instead of JupyterLab's own start when a cell runs without a kernel. */
  private async _askFirst(
    panel: NotebookPanel,
    start: () => Promise<boolean>
  ): Promise<boolean> {
    const actions = this._actions;
    const trans = actions.trans;
    const path = panel.context.path;
    // unreachable server: go by the last answer rather than guess "not paused"
    const ask = async () =>
      (await actions.model.fetchSession(path)) ?? actions.model.session(path);
    let session = await ask();
    const deadline = Date.now() + SETTLE_DEADLINE_MS;
    while (
      session &&
      BUSY_STATES.includes(session.state) &&
      Date.now() < deadline
    ) {
      // a pause or resume is under way: its outcome decides what to do
      await new Promise(resolve => setTimeout(resolve, 500));
      session = await ask();
    }
    if (session && BUSY_STATES.includes(session.state)) {
      return false; // still under way: run nothing rather than guess
    }
    if (kernelToJoin(session, panel)) {
      // resumed elsewhere: run in the kernel with the state, never in a new one
      await joinPathSession(panel.sessionContext);
      if (panel.sessionContext.session?.kernel) {
        return false;
      }
      session = await ask(); // its session ended meanwhile: decide again
    }
    if (!session || !RESUMABLE_STATES.includes(session.state)) {
      return start();
    }
    const failed = session.state === 'failed';
    const unrestored = session.saved_state_unrestored;
    const body = document.createElement('div');
    body.className = 'jp-PauseRunDialog';
    const size = session.last_checkpoint
      ? trans.__(
          ' Its saved state (%1) comes back with Resume.',
          formatBytes(session.last_checkpoint.bytes)
        )
      : '';
    body.textContent = unrestored
      ? trans.__(
          'The kernel of this notebook lost its state without a pause (%1). Its saved state from %2 comes back with Resume. In an empty kernel, this cell would run without your variables.',
          shortReason(unrestored.lost),
          formatTime(unrestored.at)
        )
      : failed
        ? trans.__(
            'Resuming this notebook failed: %1. Resume from a saved state, or run this cell in an empty kernel (your variables will not be there).',
            shortReason(session.error ?? '')
          )
        : trans.__(
            'This notebook was paused at %1.%2 In an empty kernel, this cell would run without your variables.',
            formatTime(session.since),
            size
          );
    const empty = Dialog.warnButton({
      label: trans.__('Run in an empty kernel')
    });
    const resume = Dialog.okButton({ label: trans.__('Resume, then run') });
    const answer = await showDialog({
      title: unrestored
        ? trans.__('This notebook lost its kernel')
        : failed
          ? trans.__('This notebook could not be resumed')
          : trans.__('This notebook is paused'),
      body: body.textContent,
      buttons: [Dialog.cancelButton(), empty, resume],
      defaultButton: 2
    });
    if (answer.button.label === resume.label) {
      await actions.resume(panel, unrestored?.checkpoint);
      return false; // the cell runs if the notebook now has its kernel
    }
    if (answer.button.label === empty.label) {
      return start();
    }
    return false;
  }

  /**
   * A notebook seen pausing elsewhere: drop its kernel in every view of it.
   * One seen resumed (or running) in a kernel a view is not connected to:
   * that view joins the notebook's session.
   */
  private _follow(): void {
    const model = this._actions.model;
    const seen = new Map<string, PauseState>();
    this._notebooks.forEach(panel => {
      const path = panel.context.path;
      const session = model.session(path);
      if (!session) {
        return;
      }
      seen.set(path, session.state);
      const before = this._states.get(path);
      const nowPaused = session.state === 'paused';
      if (nowPaused && before !== undefined && before !== 'paused') {
        this._actions.detachKernel(panel);
        holdKernel(panel.sessionContext);
      } else if (kernelToJoin(session, panel)) {
        // joined while held: a view never starts a kernel of its own meanwhile
        surfaceErrors(
          joinPathSession(panel.sessionContext).then(() =>
            releaseKernel(panel.sessionContext)
          ),
          this._actions.trans.__(
            'Connecting %1 to its resumed kernel failed',
            path
          )
        );
      } else if (
        !RESUMABLE_STATES.includes(session.state) &&
        isHeld(panel.sessionContext) &&
        !BUSY_STATES.includes(session.state)
      ) {
        releaseKernel(panel.sessionContext);
      }
    });
    for (const [path, state] of seen) {
      this._states.set(path, state);
    }
  }

  private _states = new Map<string, PauseState>();
}
