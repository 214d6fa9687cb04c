/**
 * Auto-pause, made visible: a warning that counts down live with a "Keep
 * running" button (also in a notebook just resumed), the notebook file saved
 * before the kernel goes in any pause this page did not start, and a
 * notice that stays after it happened, saying why.  Also reports errors of
 * operations this page did not start (an auto-pause or an autosave whose
 * checkpoint failed, a `%pause`), and withdraws them only once an operation
 * succeeded since: a failure stays until then, or until the user dismisses it.
 *
 * The server decides (idle policy); this only shows its decisions.
 */
import { Notification } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';

import { PauseActions } from './actions';
import { ISessionStatus, PauseState } from './api';
import { formatDuration, formatTime, recovered, shortReason } from './labels';
import { surfaceErrors } from './notices';

export class AutoPauseNotices {
  constructor(
    private readonly _actions: PauseActions,
    private readonly _notebooks: INotebookTracker
  ) {
    _actions.model.changed.connect(this._update, this);
    this._timer = window.setInterval(() => this._countDown(), 1000);
  }

  dispose(): void {
    window.clearInterval(this._timer);
  }

  private _update(): void {
    const trans = this._actions.trans;
    const sessions = this._actions.model.status?.sessions ?? [];
    for (const session of sessions) {
      const before = this._states.get(session.path);
      this._states.set(session.path, session.state);
      this._reportError(session);
      if (recovered(session)) {
        // a failure stays until something succeeds since (or the user dismisses it)
        this._actions.notices.dismiss(session.path);
      }
      const op = session.operation;
      const othersPause =
        op?.kind === 'pause' && !this._actions.ownOperations.has(op.id);
      if (
        othersPause &&
        session.state !== before &&
        (session.state === 'checkpointing' || session.state === 'paused')
      ) {
        // a pause this page did not start (auto, %pause, the CLI, another
        // tab): the kernel goes, the file must not; saved again once paused
        // if edited meanwhile
        surfaceErrors(
          this._save(session.path),
          trans.__('Saving %1 failed', session.path)
        );
      }
      if (
        session.state === 'paused' &&
        session.paused_by === 'auto' &&
        before !== undefined &&
        before !== 'paused'
      ) {
        this._notifyPaused(session);
      }
    }
    this._warn(sessions);
  }

  private _warn(sessions: ISessionStatus[]): void {
    const trans = this._actions.trans;
    const warned = new Set<string>();
    for (const session of sessions) {
      const auto = session.auto_pause;
      const live = session.state === 'running' || session.state === 'ready';
      if (!auto?.warning || !live) {
        continue;
      }
      const path = session.path;
      warned.add(path);
      if (this._warnings.has(path)) {
        continue;
      }
      surfaceErrors(this._save(path), trans.__('Saving %1 failed', path));
      const id = Notification.warning(this._warningText(path), {
        autoClose: false,
        actions: [
          {
            label: trans.__('Keep running'),
            caption: trans.__('Postpone the auto-pause by one idle period'),
            callback: () => void this._actions.keepRunning(path)
          }
        ]
      });
      this._warnings.set(path, id);
    }
    for (const [path, id] of this._warnings) {
      if (!warned.has(path)) {
        Notification.dismiss(id);
        this._warnings.delete(path);
      }
    }
  }

  private _warningText(path: string): string {
    const trans = this._actions.trans;
    const session = this._actions.session(path);
    const left = this._actions.model.secondsLeft(path) ?? 0;
    return trans.__(
      '%1 has been idle and will be paused in %2 (policy "%3"). Its state is saved first.',
      path,
      formatDuration(left, trans),
      session?.auto_pause?.workload_class ?? ''
    );
  }

  private _countDown(): void {
    for (const [path, id] of this._warnings) {
      Notification.update({ id, message: this._warningText(path) });
    }
  }

  private _notifyPaused(session: ISessionStatus): void {
    const trans = this._actions.trans;
    const threshold = session.policy?.idle_threshold;
    const message = threshold
      ? trans.__(
          '%1 was paused automatically at %2 after %3 idle. Its state is saved: Resume brings it back.',
          session.path,
          formatTime(session.since),
          formatDuration(threshold, trans)
        )
      : trans.__(
          '%1 was paused automatically at %2. Its state is saved: Resume brings it back.',
          session.path,
          formatTime(session.since)
        );
    Notification.info(message, { autoClose: false });
  }

  /** Save every open view of the notebook that has unsaved changes. */
  private async _save(path: string): Promise<void> {
    const saves: Promise<void>[] = [];
    this._notebooks.forEach(panel => {
      if (panel.context.path === path) {
        saves.push(this._actions.save(panel));
      }
    });
    await Promise.all(saves);
  }

  private _reportError(session: ISessionStatus): void {
    // an operation's failure, else a failed upload of its saved state to the bucket
    const error = session.error ?? session.staging?.error ?? null;
    const previous = this._errors.get(session.path);
    this._errors.set(session.path, error);
    const own =
      session.operation &&
      this._actions.ownOperations.has(session.operation.id);
    // on the page's first look, a failure is told again unless its notice was dismissed
    const notices = this._actions.notices;
    const told =
      previous === undefined && notices.wasDismissed(session.path, error ?? '');
    if (error && error !== previous && !own && !told) {
      this._actions.notices.notify(
        session.path,
        `${session.path}: ${shortReason(error)}`,
        error
      );
    }
  }

  private _errors = new Map<string, string | null>();
  private _states = new Map<string, PauseState>();
  private _timer: number;
  private _warnings = new Map<string, string>();
}
