/**
 * When a paused notebook is opened, say so and offer to resume it.
 *
 * Asked once per notebook and page load, and only when the notebook was
 * already paused when this page first saw it (not right after the user
 * paused it here); the toolbar and palette keep Resume available after
 * "Open without resuming".
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { PauseActions } from './actions';
import { formatBytes } from './labels';
import { PauseStatusModel } from './model';

export class ResumeOffer {
  constructor(
    private readonly _model: PauseStatusModel,
    private readonly _actions: PauseActions,
    private readonly _notebooks: INotebookTracker
  ) {
    _model.changed.connect(this._check, this);
    _notebooks.currentChanged.connect(this._check, this);
  }

  private _check(): void {
    const panel = this._notebooks.currentWidget;
    if (!panel) {
      return;
    }
    const path = panel.context.path;
    const session = this._model.session(path);
    if (!session || this._seen.has(path)) {
      return;
    }
    this._seen.add(path);
    if (session.state === 'paused') {
      void this._offer(panel);
    }
  }

  private async _offer(panel: NotebookPanel): Promise<void> {
    const session = this._model.session(panel.context.path);
    if (!session) {
      return;
    }
    const since = new Date(session.since * 1000).toLocaleString();
    const size = session.last_checkpoint
      ? ` Its checkpoint holds ${formatBytes(session.last_checkpoint.bytes)}.`
      : '';
    const body = document.createElement('div');
    body.className = 'jp-PauseResumeOffer';
    body.textContent =
      `${panel.context.path} has been paused since ${since}.${size} ` +
      'Resume brings its variables and models back into a kernel.';
    const answer = await showDialog({
      title: 'This notebook is paused',
      body: new Widget({ node: body }),
      buttons: [
        Dialog.cancelButton({ label: 'Open without resuming' }),
        Dialog.okButton({ label: 'Resume' })
      ]
    });
    if (answer.button.accept) {
      await this._actions.resume(panel);
    }
  }

  private _seen = new Set<string>();
}
