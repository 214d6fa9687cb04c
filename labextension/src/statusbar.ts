/**
 * The status bar item: the current notebook's pause state, as the server
 * reports it.  It never guesses: when the server cannot be reached it says so.
 */
import { Widget } from '@lumino/widgets';

import { PauseStatusModel } from './model';
import { describeSession, formatElapsed } from './labels';

export class PauseStatusItem extends Widget {
  constructor(
    private readonly _model: PauseStatusModel,
    private readonly _currentPath: () => string | null
  ) {
    super();
    this.addClass('jp-PauseStatus');
    this.node.setAttribute('data-jp-pause', 'status');
    this._model.changed.connect(this.update, this);
    // elapsed times move even when the status does not
    this._timer = window.setInterval(() => this.update(), 1000);
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  update(): void {
    const path = this._currentPath();
    const session = this._model.session(path);
    let text = '';
    let state = '';
    if (this._model.error && !this._model.status) {
      text = 'Pause: server unreachable';
      state = 'unreachable';
    } else if (session) {
      text = describeSession(session);
      state = session.state;
      const auto = session.auto_pause;
      const policy = auto
        ? ` (policy ${auto.workload_class}: ${auto.action} after ${formatElapsed(auto.seconds_left)} more idle)`
        : '';
      this.node.title = session.error
        ? `${path}: ${session.error}`
        : `${path}: ${session.state}${policy}`;
    } else if (path) {
      text = 'Pause: no kernel';
      state = 'none';
    }
    this.node.textContent = text;
    this.node.dataset.state = state;
  }

  private _timer: number;
}
