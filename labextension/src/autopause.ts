/**
 * Warn before an auto-pause, with a "Keep running" button, and report what
 * went wrong in operations this page did not start (an auto-pause whose
 * checkpoint failed, a pause asked for with `%pause`).
 *
 * The server decides (idle policy); this only shows its decision, once per
 * warning period, and withdraws the notification when the danger passed.
 */
import { Notification } from '@jupyterlab/apputils';

import { PauseActions } from './actions';
import { formatElapsed } from './labels';
import { PauseStatusModel } from './model';

export class AutoPauseWarnings {
  constructor(
    private readonly _model: PauseStatusModel,
    private readonly _actions: PauseActions
  ) {
    _model.changed.connect(this._update, this);
  }

  private _update(): void {
    this._reportErrors();
    const warned = new Set<string>();
    for (const session of this._model.status?.sessions ?? []) {
      const auto = session.auto_pause;
      if (!auto?.warning || session.state !== 'running') {
        continue;
      }
      warned.add(session.path);
      if (this._shown.has(session.path)) {
        continue;
      }
      const path = session.path;
      const id = Notification.warning(
        `${path} has been idle and will be paused in ${formatElapsed(auto.seconds_left)} ` +
          `(policy "${auto.workload_class}"). Its state is checkpointed first.`,
        {
          autoClose: false,
          actions: [
            {
              label: 'Keep running',
              caption: 'Postpone the auto-pause by one idle period',
              callback: () => void this._actions.keepRunning(path)
            }
          ]
        }
      );
      this._shown.set(path, id);
    }
    for (const [path, id] of this._shown) {
      if (!warned.has(path)) {
        Notification.dismiss(id);
        this._shown.delete(path);
      }
    }
  }

  private _reportErrors(): void {
    for (const session of this._model.status?.sessions ?? []) {
      const error = session.error;
      const previous = this._errors.get(session.path);
      this._errors.set(session.path, error);
      const own =
        session.operation &&
        this._actions.ownOperations.has(session.operation.id);
      if (error && error !== previous && previous !== undefined && !own) {
        Notification.error(`${session.path}: ${error}`, { autoClose: false });
      }
    }
  }

  private _errors = new Map<string, string | null>();
  private _shown = new Map<string, string>();
}
