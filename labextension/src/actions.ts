/**
 * What the user can do: pause, resume, save state, keep running, start empty.
 *
 * Each action asks what it must first (`dialogs.ts`), starts its operation
 * and follows it to the end (`follower.ts`), and tells the user the outcome
 * (`notices.ts`).  What is allowed now is the server's answer (`can` in
 * `GET status`), read from the shared status model, so buttons are disabled
 * while an operation runs.
 */
import { ISessionContextDialogs, Notification } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';

import {
  IOperation,
  ISessionStatus,
  listCheckpoints,
  postAPI,
  requestAPI
} from './api';
import {
  askResumeTime,
  chooseCheckpoint,
  confirmInterrupt,
  confirmUnsaveable
} from './dialogs';
import { OperationFollower } from './follower';
import { joinPathSession, startKernelNow } from './kernelhold';
import { formatTime } from './labels';
import { PauseStatusModel } from './model';
import { ErrorNotices, notifyUnrestored } from './notices';

export class PauseActions {
  constructor(
    readonly model: PauseStatusModel,
    readonly trans: TranslationBundle,
    private readonly _sessionDialogs: ISessionContextDialogs | null
  ) {
    this.notices = new ErrorNotices(trans);
    this._follower = new OperationFollower(model, this.notices, trans);
  }

  /** Error notices about each notebook, withdrawn once it recovers. */
  readonly notices: ErrorNotices;

  /** Operations started from this page: their outcome is reported here. */
  get ownOperations(): ReadonlySet<string> {
    return this._follower.started;
  }

  session(path: string | null | undefined): ISessionStatus | null {
    return this.model.session(path);
  }

  /** No operation runs for this notebook right now. */
  isIdle(path: string | null | undefined): boolean {
    const session = this.session(path);
    return !session?.operation || session.operation.outcome !== 'running';
  }

  /** What the server allows now (`can` in `GET status`): its lifecycle decides. */
  canPause(path: string | null | undefined): boolean {
    return !!this.session(path)?.can.pause;
  }

  canResume(path: string | null | undefined): boolean {
    return !!this.session(path)?.can.resume;
  }

  canCheckpoint(path: string | null | undefined): boolean {
    return !!this.session(path)?.can.checkpoint;
  }

  canHibernate(path: string | null | undefined): boolean {
    return !!this.session(path)?.can.hibernate;
  }

  /** Hibernated in place, or on the way there or back. */
  isHibernated(path: string | null | undefined): boolean {
    const state = this.session(path)?.state;
    return (
      state === 'hibernating' || state === 'hibernated' || state === 'waking'
    );
  }

  canWake(path: string | null | undefined): boolean {
    return !!this.session(path)?.can.wake;
  }

  /** Free the GPU for a short break: the kernel stays, its GPU memory goes to host memory. */
  async hibernate(panel: NotebookPanel): Promise<IOperation | null> {
    const path = panel.context.path;
    await this.save(panel);
    const verb = this.trans.__('Hibernating the GPU of %1', path);
    return this._follower.run('sessions/hibernate', { path }, verb, path);
  }

  /** Bring a hibernated kernel's GPU memory back now (a cell does it by itself). */
  wake(panel: NotebookPanel): Promise<IOperation | null> {
    const path = panel.context.path;
    const verb = this.trans.__('Waking the GPU of %1', path);
    return this._follower.run('sessions/wake', { path }, verb, path);
  }

  /** "Pause Until…": ask when to resume by itself, then pause with that schedule. */
  async pauseUntil(panel: NotebookPanel): Promise<IOperation | null> {
    const value = await askResumeTime(this.trans);
    if (value === null) {
      return null;
    }
    const at = new Date(value).getTime() / 1000;
    if (!Number.isFinite(at) || at <= Date.now() / 1000) {
      this.notices.notify(
        panel.context.path,
        this.trans.__('Pick a time in the future to resume at.'),
        value
      );
      return null;
    }
    return this.pause(panel, false, at);
  }

  /** Cancel a paused notebook's scheduled resume; it stays paused. */
  async cancelSchedule(path: string): Promise<void> {
    await requestAPI<void>(
      `sessions/schedule?path=${encodeURIComponent(path)}`,
      this.model.serverSettings,
      { method: 'DELETE' }
    );
    await this.model.refresh();
  }

  async pause(
    panel: NotebookPanel,
    force = false,
    resumeAt: number | null = null
  ): Promise<IOperation | null> {
    const path = panel.context.path;
    if (panel.sessionContext.session?.kernel?.status === 'busy' && !force) {
      if (!(await confirmInterrupt(this.trans))) {
        return null;
      }
      force = true;
    }
    if (!force && !(await this._confirmUnsaveable(path))) {
      return null;
    }
    await this.save(panel); // outputs worth studying are on disk before the kernel goes
    const body: Record<string, unknown> = { path, force };
    if (resumeAt !== null) {
      body.resume_at = resumeAt;
    }
    const verb = this.trans.__('Pausing %1', path);
    const op = await this._follower.run('sessions/pause', body, verb, path);
    if (op?.outcome === 'succeeded') {
      this.detachKernel(panel);
    }
    return op;
  }

  /** Before a pause by hand: what it would not save, and go on?  True to go on. */
  private async _confirmUnsaveable(path: string): Promise<boolean> {
    let unsaveable: Record<string, string>;
    try {
      unsaveable = (
        await requestAPI<{ unsaveable: Record<string, string> }>(
          `sessions/unsaveable?path=${encodeURIComponent(path)}`,
          this.model.serverSettings
        )
      ).unsaveable;
    } catch {
      return true; // the pause itself says what was not saved
    }
    return confirmUnsaveable(unsaveable, this.trans);
  }

  /** Save the notebook file if it has unsaved changes. */
  async save(panel: NotebookPanel): Promise<void> {
    if (panel.context.model.dirty && !panel.context.model.readOnly) {
      await panel.context.save();
    }
  }

  /** The kernel is gone: let the notebook say "No Kernel", not a stale "Idle". */
  detachKernel(panel: NotebookPanel): void {
    panel.sessionContext.session?.dispose();
  }

  async resume(
    panel: NotebookPanel,
    checkpointId?: string
  ): Promise<IOperation | null> {
    const path = panel.context.path;
    if (!checkpointId && this.session(path)?.state === 'failed') {
      // the last resume failed (say, a corrupt checkpoint): let the user pick
      const picked = await this.pickCheckpoint(panel);
      if (picked === null) {
        return null;
      }
      checkpointId = picked;
    }
    const body: Record<string, unknown> = { path };
    if (checkpointId) {
      body.checkpoint_id = checkpointId;
    }
    const verb = this.trans.__('Resuming %1', path);
    const op = await this._follower.run('sessions/resume', body, verb, path);
    if (op?.outcome === 'succeeded') {
      // the notebook's one Jupyter session, which the resume made or restored into
      await joinPathSession(panel.sessionContext);
      this.notices.dismiss(path);
      await this._remindUnsaved(path, op.options.checkpoint_id as string);
    }
    return op;
  }

  checkpoint(panel: NotebookPanel): Promise<IOperation | null> {
    const path = panel.context.path;
    const verb = this.trans.__('Saving the state of %1', path);
    return this._follower.run('sessions/checkpoint', { path }, verb, path);
  }

  /** Work on in a new, empty kernel; the saved state stays for a later %restore. */
  async startEmpty(panel: NotebookPanel): Promise<void> {
    const context = panel.sessionContext;
    const shouldSelect = await startKernelNow(context);
    if (shouldSelect && this._sessionDialogs) {
      await this._sessionDialogs.selectKernel(context);
    }
    this.notices.dismiss(panel.context.path);
  }

  /** Postpone an announced auto-pause by one idle threshold, and say until when. */
  async keepRunning(path: string): Promise<void> {
    const trans = this.trans;
    try {
      const answer = await postAPI<{ idle_clock_started: number }>(
        'sessions/postpone',
        this.model.serverSettings,
        { path }
      );
      await this.model.refresh();
      const threshold = this.session(path)?.policy?.idle_threshold;
      const message = threshold
        ? trans.__(
            'Auto-pause of %1 postponed until %2.',
            path,
            formatTime(answer.idle_clock_started + threshold)
          )
        : trans.__('Auto-pause of %1 postponed.', path);
      Notification.success(message, { autoClose: 5000 });
    } catch (error) {
      Notification.error(
        trans.__(
          'Could not postpone the auto-pause: %1',
          (error as Error).message
        )
      );
    }
  }

  /**
   * Ask which saved state to resume from, each verified.  Null when
   * cancelled or when the user started an empty kernel instead.
   */
  async pickCheckpoint(panel: NotebookPanel): Promise<string | null> {
    const path = panel.context.path;
    const checkpoints = await listCheckpoints(
      path,
      this.model.serverSettings,
      true
    );
    const error = this.session(path)?.error ?? '';
    const choice = await chooseCheckpoint(checkpoints, error, this.trans);
    if (choice === 'start-empty') {
      await this.startEmpty(panel);
      return null;
    }
    return choice?.checkpoint ?? null;
  }

  /** After a resume, say which names did not come back (they could not be saved). */
  private async _remindUnsaved(
    path: string,
    checkpointId?: string
  ): Promise<void> {
    let reasons: Record<string, string>;
    try {
      const checkpoints = await listCheckpoints(
        path,
        this.model.serverSettings
      );
      const id = checkpointId ?? this.session(path)?.last_checkpoint?.id;
      const used = checkpoints.find(c => c.id === id) ?? checkpoints[0];
      reasons = used?.skipped ?? {};
    } catch {
      return; // the resume succeeded; a reminder is not worth an error
    }
    notifyUnrestored(path, reasons, this.trans);
  }

  private readonly _follower: OperationFollower;
}
