/**
 * A banner at the top of a paused (or failed) notebook, non-modal, shown
 * whenever the notebook is seen in that state (not once per page load):
 * "Paused automatically at 12:31 after 30 min idle · saved state 1.9 GB ·
 * [Resume]".  The modal question is kept for the moment a cell is run.
 *
 * A notebook whose kernel lost its state without a pause (it died, the server
 * stopped under it) while a checkpoint still has it says so instead, until
 * resumed or dismissed: "Saved state from 14:17 · the kernel died (…) · work
 * after 14:17 was lost · [Resume from it] · [Dismiss]".
 */
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { PauseActions } from './actions';
import { ISavedStateUnrestored, ISessionStatus, prewarm } from './api';
import { showDetails } from './dialogs';
import { formatBytes, formatDuration, formatTime, shortReason } from './labels';
import { surfaceErrors } from './notices';

export class PauseBanner extends Widget {
  constructor(
    private readonly _panel: NotebookPanel,
    private readonly _actions: PauseActions
  ) {
    super();
    this.addClass('jp-PauseBanner');
    this.node.setAttribute('role', 'status');
    this.node.setAttribute('data-jp-pause', 'banner');
    this.hide();
  }

  refresh(): void {
    this.render(this._actions.session(this._panel.context.path));
  }

  /** Show what the server says about this notebook now. */
  render(session: ISessionStatus | null): void {
    const trans = this._actions.trans;
    const state = session?.state;
    const unrestored = session?.saved_state_unrestored;
    if (session && unrestored) {
      if (dismissed.has(dismissKey(session))) {
        this.hide();
      } else {
        this._renderUnrestored(session, unrestored);
      }
      return;
    }
    if (!session || (state !== 'paused' && state !== 'failed')) {
      this.hide();
      return;
    }
    this.node.dataset.state = state;
    const text = document.createElement('span');
    text.className = 'jp-PauseBanner-text';
    const buttons: HTMLButtonElement[] = [];
    if (state === 'paused') {
      this._prewarm(session);
      text.textContent = this._pausedText(session);
      buttons.push(
        this._button(trans.__('Resume'), () =>
          this._actions.resume(this._panel)
        )
      );
      if (session.schedule) {
        buttons.push(
          this._button(trans.__('Cancel scheduled resume'), () =>
            this._actions.cancelSchedule(session.path)
          )
        );
      }
    } else {
      const error = (session.error ?? '').replace(/^resume failed: /, '');
      text.textContent = trans.__('Resume failed: %1', shortReason(error));
      buttons.push(
        this._button(trans.__('Show details'), () =>
          showDetails(trans.__('Resume failed'), session.error ?? '', trans)
        ),
        this._button(trans.__('Resume from a saved state…'), () =>
          this._actions.resume(this._panel)
        ),
        this._button(trans.__('Start with an empty kernel'), () =>
          this._actions.startEmpty(this._panel)
        )
      );
    }
    const busy = !this._actions.isIdle(session.path);
    for (const button of buttons) {
      button.disabled = busy;
    }
    this.node.replaceChildren(text, ...buttons);
    this.show();
  }

  private _renderUnrestored(
    session: ISessionStatus,
    unrestored: ISavedStateUnrestored
  ): void {
    const trans = this._actions.trans;
    this.node.dataset.state = 'unrestored';
    const text = document.createElement('span');
    text.className = 'jp-PauseBanner-text';
    const at = formatTime(unrestored.at);
    text.textContent = trans.__(
      'Saved state from %1 · %2 · work after %1 was lost',
      at,
      shortReason(unrestored.lost)
    );
    const resume = this._button(trans.__('Resume from it'), () =>
      this._actions.resume(this._panel, unrestored.checkpoint)
    );
    resume.disabled = !this._actions.isIdle(session.path);
    const dismiss = this._button(trans.__('Dismiss'), () => {
      dismissed.add(dismissKey(session));
      this.hide();
    });
    this.node.replaceChildren(text, resume, dismiss);
    this.show();
  }

  /**
   * While the offer shows, have the server start the resume's kernel (a spare,
   * not attached to the notebook: server/prewarm.py), once per pause. Best
   * effort: without it the resume starts its own kernel.
   */
  private _prewarm(session: ISessionStatus): void {
    if (this._prewarmedFor === session.since) {
      return;
    }
    this._prewarmedFor = session.since;
    prewarm(session.path, this._actions.model.serverSettings).catch(reason =>
      console.warn('jupyter-pause: no spare kernel for the resume:', reason)
    );
  }

  private _prewarmedFor: number | null = null;

  private _pausedText(session: ISessionStatus): string {
    const trans = this._actions.trans;
    const at = formatTime(session.since);
    let how: string;
    const threshold = session.policy?.idle_threshold;
    if (session.paused_by === 'auto') {
      how = threshold
        ? trans.__(
            'Paused automatically at %1 after %2 idle',
            at,
            formatDuration(threshold, trans)
          )
        : trans.__('Paused automatically at %1', at);
    } else if (session.paused_by === 'magic') {
      how = trans.__('Paused by %%pause at %1', at);
    } else if (session.paused_by === 'server-shutdown') {
      how = trans.__('Paused when the server stopped at %1', at);
    } else {
      how = trans.__('Paused at %1', at);
    }
    const checkpoint = session.last_checkpoint;
    const size = checkpoint
      ? trans.__(' · saved state %1', formatBytes(checkpoint.bytes))
      : '';
    const schedule = session.schedule;
    const resumes = schedule
      ? schedule.kind === 'predicted'
        ? trans.__(
            ' · resumes at %1, before you are expected back',
            formatTime(schedule.at)
          )
        : trans.__(' · resumes at %1', formatTime(schedule.at))
      : '';
    return `${how}${size}${resumes}`;
  }

  private _button(label: string, act: () => unknown): HTMLButtonElement {
    const button = document.createElement('button');
    button.className = 'jp-PauseBanner-button jp-mod-styled';
    button.textContent = label;
    button.onclick = () => surfaceErrors(Promise.resolve().then(act), label);
    return button;
  }
}

/**
 * Saved states the user dismissed in this page (notebook and checkpoint): the
 * banner is not shown again for them until the page is reloaded.
 */
const dismissed = new Set<string>();

function dismissKey(session: ISessionStatus): string {
  return `${session.path}\n${session.saved_state_unrestored?.checkpoint}`;
}

/** One banner per open notebook, kept in step with the status model. */
export class PauseBanners {
  constructor(
    private readonly _actions: PauseActions,
    notebooks: INotebookTracker
  ) {
    notebooks.widgetAdded.connect((_, panel) => this._add(panel));
    notebooks.forEach(panel => this._add(panel));
    _actions.model.changed.connect(this._update, this);
  }

  private _add(panel: NotebookPanel): void {
    const banner = new PauseBanner(panel, this._actions);
    panel.contentHeader.addWidget(banner);
    this._banners.add(banner);
    banner.disposed.connect(() => this._banners.delete(banner));
    panel.disposed.connect(() => banner.dispose());
    banner.refresh();
  }

  private _update(): void {
    for (const banner of this._banners) {
      banner.refresh();
    }
  }

  private _banners = new Set<PauseBanner>();
}
