/**
 * The status bar item: the current notebook's pause state, as the server
 * reports it.  It never guesses: when the server cannot be reached it says
 * so.  A click opens a popover with the details and the actions.
 */
import { Popup, showPopup } from '@jupyterlab/statusbar';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';

import { IOperation, ISessionStatus, ITimelineStep, requestAPI } from './api';
import {
  describeProgress,
  describeSession,
  describeStaging,
  failedOperation,
  formatBytes,
  formatDuration,
  formatTime,
  shortReason,
  stateLabel
} from './labels';
import { PauseStatusModel } from './model';
import { surfaceErrors } from './notices';

export class PauseStatusItem extends Widget {
  constructor(
    private readonly _model: PauseStatusModel,
    private readonly _currentPath: () => string | null,
    private readonly _commands: CommandRegistry,
    private readonly _trans: TranslationBundle,
    private readonly _actionIds: string[]
  ) {
    super();
    this.addClass('jp-PauseStatus');
    this.node.setAttribute('data-jp-pause', 'status');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this._text = document.createElement('span');
    // screen readers hear state changes, not every countdown second
    this._live = document.createElement('span');
    this._live.className = 'jp-PauseStatus-live';
    this._live.setAttribute('aria-live', 'polite');
    this.node.append(this._text, this._live);
    this.node.addEventListener('click', () => this._toggle());
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        this._toggle();
      }
    });
    this._model.changed.connect(this.update, this);
    // elapsed times and countdowns move even when the status does not
    this._timer = window.setInterval(() => this.update(), 1000);
  }

  dispose(): void {
    window.clearInterval(this._timer);
    this._popup?.dispose();
    super.dispose();
  }

  update(): void {
    const trans = this._trans;
    const path = this._currentPath();
    const session = this._model.session(path);
    let text = '';
    let state = '';
    if (this._model.error) {
      text = trans.__('Pause: server unreachable');
      state = 'unreachable';
    } else if (session) {
      const left = this._model.secondsLeft(path);
      text = describeSession(session, trans, left);
      state =
        left !== null
          ? 'warning'
          : session.saved_state_unrestored
            ? 'unrestored'
            : failedOperation(session, trans) !== null
              ? 'problem'
              : session.state;
    } else if (path) {
      text = trans.__('Pause: no kernel');
      state = 'none';
    }
    this._text.textContent = text;
    this.node.dataset.state = state;
    this.node.dataset.pollInterval = String(this._model.interval); // the setting in force
    this.node.title = trans.__('Pause and resume: click for details');
    this.node.setAttribute('aria-label', text);
    const announce = session ? stateLabel(session.state, trans) : text;
    if (this._live.textContent !== announce) {
      this._live.textContent = announce;
    }
    this._renderPopup(path, session);
  }

  private _toggle(): void {
    if (this._popup && !this._popup.isDisposed) {
      this._popup.dispose();
      this._popup = null;
      return;
    }
    this._body = new Widget();
    this._body.addClass('jp-PausePopover');
    this._body.node.setAttribute('data-jp-pause', 'popover');
    this._body.node.setAttribute('role', 'dialog');
    this._body.node.setAttribute('aria-label', this._trans.__('Pause details'));
    this._signature = '';
    this._popup = showPopup({ body: this._body, anchor: this, align: 'left' });
    this.update();
  }

  private _renderPopup(
    path: string | null,
    session: ISessionStatus | null
  ): void {
    if (!this._popup || this._popup.isDisposed || !this._body) {
      return;
    }
    const trans = this._trans;
    const rows: [string, string][] = [];
    if (this._model.error) {
      rows.push([
        trans.__('Server'),
        trans.__('unreachable: %1', this._model.error)
      ]);
    }
    if (session) {
      rows.push([trans.__('Notebook'), session.path]);
      rows.push([
        trans.__('State'),
        trans.__(
          '%1 since %2',
          stateLabel(session.state, trans),
          formatTime(session.since)
        )
      ]);
      const progress = session.operation?.progress;
      if (progress && session.operation?.outcome === 'running') {
        rows.push([trans.__('Progress'), describeProgress(progress, trans)]);
      }
      const last = session.last_checkpoint;
      rows.push([
        trans.__('Saved state'),
        last
          ? trans.__(
              '%1 at %2',
              formatBytes(last.bytes),
              formatTime(Number(last.time))
            )
          : trans.__('none yet')
      ]);
      if (session.last_saved) {
        const ago = formatDuration(
          Date.now() / 1000 - session.last_saved,
          trans
        );
        rows.push([
          trans.__('Last saved'),
          last?.autosave
            ? trans.__('Saved %1 ago (autosave)', ago)
            : trans.__('Saved %1 ago', ago)
        ]);
      }
      const staging = session.staging;
      if (staging) {
        rows.push([trans.__('In the bucket'), describeStaging(staging, trans)]);
      }
      const policy = session.policy;
      if (policy) {
        const left = this._model.secondsLeft(path);
        const acts = policy.idle_threshold
          ? trans.__(
              '%1: %2 after %3 idle',
              policy.workload_class,
              policy.action,
              formatDuration(policy.idle_threshold, trans)
            )
          : trans.__('%1: never automatically', policy.workload_class);
        rows.push([trans.__('Policy'), acts]);
        if (left !== null) {
          rows.push([trans.__('Time left'), formatDuration(left, trans)]);
        }
      } else {
        rows.push([trans.__('Policy'), trans.__('auto-pause is off')]);
      }
      const timeline = this._timelineOf(session);
      if (timeline && timeline.length) {
        const op = session.operation as IOperation;
        rows.push([
          trans.__('Last %1', op.kind),
          timeline
            .map(
              step =>
                `${step.at.toFixed(2)} s ${step.step}` +
                (step.note ? ` (${step.note})` : '')
            )
            .join('\n')
        ]);
      }
      const error = session.error ?? session.staging?.error;
      if (error) {
        const failed = failedOperation(session, trans);
        const reason = shortReason(error);
        rows.push([
          trans.__('Problem'),
          failed ? trans.__('%1: %2', failed, reason) : reason
        ]);
      }
    } else {
      rows.push([trans.__('Notebook'), path ?? trans.__('none open')]);
    }
    const table = document.createElement('dl');
    for (const [name, value] of rows) {
      const dt = document.createElement('dt');
      dt.textContent = name;
      const dd = document.createElement('dd');
      dd.textContent = value;
      table.append(dt, dd);
    }
    const actions = document.createElement('div');
    actions.className = 'jp-PausePopover-actions';
    for (const id of this._actionIds) {
      if (!this._commands.isVisible(id)) {
        continue;
      }
      const button = document.createElement('button');
      button.className = 'jp-mod-styled';
      button.textContent = this._commands.label(id);
      button.disabled = !this._commands.isEnabled(id);
      button.onclick = () => {
        this._popup?.dispose();
        surfaceErrors(this._commands.execute(id), this._commands.label(id));
      };
      actions.appendChild(button);
    }
    const signature = JSON.stringify([
      rows,
      [...actions.children].map(b => [
        b.textContent,
        (b as HTMLButtonElement).disabled
      ])
    ]);
    if (signature !== this._signature) {
      // rebuilt only when something changed, so a click never lands on a stale button
      this._signature = signature;
      this._body.node.replaceChildren(table, actions);
      this._popup.update(); // placed again: it may have grown (a timeline came)
    }
  }

  /**
   * The timeline of the session's last operation once it ended, asked of the
   * server once per operation and state (the first cell after a resume adds
   * its last step): `GET status` leaves it out.  Null until it has come.
   */
  private _timelineOf(session: ISessionStatus): ITimelineStep[] | null {
    const op = session.operation;
    if (!op || op.outcome === 'running') {
      return null;
    }
    const key = `${op.id} ${session.since}`;
    if (this._timeline.key !== key) {
      this._timeline = { key, steps: null };
      requestAPI<IOperation>(
        `operations/${op.id}`,
        this._model.serverSettings,
        {},
        false
      )
        .then(full => {
          if (this._timeline.key === key) {
            this._timeline.steps = full.timeline ?? [];
            this.update();
          }
        })
        .catch(() => {
          // the popover shows the rest; the next state change asks again
        });
    }
    return this._timeline.steps;
  }

  private _body: Widget | null = null;
  private _live: HTMLSpanElement;
  private _popup: Popup | null = null;
  private _signature = '';
  private _text: HTMLSpanElement;
  private _timeline: { key: string; steps: ITimelineStep[] | null } = {
    key: '',
    steps: null
  };
  private _timer: number;
}
