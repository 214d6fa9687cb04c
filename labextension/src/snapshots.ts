/**
 * The "Saved state" side panel: the current notebook's state snapshots
 * (what `%checkpoint` and every pause write), each verified, with resume
 * and delete.  Called "saved state" in the UI so as not to be confused with
 * JupyterLab's own file checkpoints.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { PauseActions } from './actions';
import { ICheckpointSummary, listCheckpoints, requestAPI } from './api';
import { formatBytes, shortReason } from './labels';
import { surfaceErrors } from './notices';

export class SnapshotsPanel extends Widget {
  constructor(
    private readonly _actions: PauseActions,
    private readonly _notebooks: INotebookTracker
  ) {
    super();
    const trans = _actions.trans;
    this.id = 'jupyter-pause-snapshots';
    this.addClass('jp-PauseSnapshots');
    this.node.setAttribute('data-jp-pause', 'snapshots');
    this.title.caption = trans.__('Saved state of this notebook');
    this.node.setAttribute('aria-label', trans.__('Saved state'));
    _notebooks.currentChanged.connect(() => void this.refresh());
    _actions.model.changed.connect(this._onStatus, this);
  }

  /** List the current notebook's saved states again, verifying each. */
  async refresh(): Promise<void> {
    const trans = this._actions.trans;
    const path = this._notebooks.currentWidget?.context.path ?? null;
    const heading = document.createElement('h2');
    heading.textContent = trans.__('Saved state');
    const refresh = document.createElement('button');
    refresh.className = 'jp-mod-styled';
    refresh.textContent = trans.__('Refresh');
    refresh.onclick = () => void this.refresh();
    if (!path) {
      const empty = document.createElement('p');
      empty.textContent = trans.__('Open a notebook to see its saved state.');
      this.node.replaceChildren(heading, empty);
      return;
    }
    let checkpoints: ICheckpointSummary[] = [];
    try {
      checkpoints = await listCheckpoints(
        path,
        this._actions.model.serverSettings,
        true
      );
    } catch (error) {
      const problem = document.createElement('p');
      problem.textContent = trans.__(
        'Could not list the saved state: %1',
        (error as Error).message
      );
      this.node.replaceChildren(heading, refresh, problem);
      return;
    }
    const list = document.createElement('ul');
    list.className = 'jp-PauseSnapshots-list';
    for (const c of checkpoints) {
      list.appendChild(this._item(path, c));
    }
    const note = document.createElement('p');
    note.textContent = checkpoints.length
      ? path
      : trans.__('%1 has no saved state yet.', path);
    this.node.replaceChildren(heading, refresh, note, list);
  }

  private _item(path: string, c: ICheckpointSummary): HTMLLIElement {
    const trans = this._actions.trans;
    const item = document.createElement('li');
    item.dataset.checkpoint = c.id;
    item.dataset.verified = String(!c.problem);
    const when = new Date(String(c.time)).toLocaleString();
    const objects = c.objects ?? [];
    const text = document.createElement('div');
    text.textContent = trans._n(
      '%2 · %3 · %1 object',
      '%2 · %3 · %1 objects',
      objects.length,
      when,
      formatBytes(c.bytes)
    );
    text.title = objects.join(', ');
    const verdict = document.createElement('div');
    if (c.foreign) {
      // a good checkpoint signed with a key this server lacks: say whose, never "corrupt"
      verdict.className = 'jp-PauseSnapshots-foreign';
      verdict.textContent = trans.__(
        'Signed with another key (fingerprint %1): this server cannot load it',
        c.key_id || '?'
      );
      verdict.title = c.problem ?? '';
    } else {
      verdict.className = c.problem
        ? 'jp-PauseSnapshots-corrupt'
        : 'jp-PauseSnapshots-verified';
      verdict.textContent = c.problem
        ? trans.__('Corrupt: %1', shortReason(c.problem, 80))
        : trans.__('Verified');
    }
    const resume = document.createElement('button');
    resume.className = 'jp-mod-styled';
    resume.textContent = trans.__('Resume from this');
    resume.setAttribute(
      'aria-label',
      trans.__('Resume from saved state %1', c.id)
    );
    const panel = this._notebooks.currentWidget;
    const resumable = this._actions.canResume(path); // the server's answer
    resume.disabled = !!c.problem || !resumable || !panel;
    resume.title = resumable ? '' : trans.__('Pause the notebook first');
    resume.onclick = () => {
      if (panel) {
        surfaceErrors(
          this._actions.resume(panel, c.id),
          trans.__('Resume failed')
        );
      }
    };
    const remove = document.createElement('button');
    remove.className = 'jp-mod-styled';
    remove.textContent = trans.__('Delete');
    remove.setAttribute('aria-label', trans.__('Delete saved state %1', c.id));
    remove.onclick = () =>
      surfaceErrors(this._delete(path, c.id), trans.__('Delete failed'));
    // another server's checkpoint is not this one's to delete: other nodes need it
    item.append(text, verdict, resume, ...(c.foreign ? [] : [remove]));
    return item;
  }

  private async _delete(path: string, id: string): Promise<void> {
    const trans = this._actions.trans;
    const answer = await showDialog({
      title: trans.__('Delete saved state?'),
      body: trans.__(
        'Delete the saved state %1 of %2? This cannot be undone.',
        id,
        path
      ),
      buttons: [
        Dialog.cancelButton(),
        Dialog.warnButton({ label: trans.__('Delete') })
      ]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      await requestAPI(
        `checkpoints/${encodeURIComponent(id)}?path=${encodeURIComponent(path)}`,
        this._actions.model.serverSettings,
        { method: 'DELETE' }
      );
    } catch (error) {
      this._actions.notices.notify(
        path,
        (error as Error).message,
        String(error)
      );
    }
    await this.refresh();
  }

  /** A new checkpoint or a state change: list again (only when shown). */
  private _onStatus(): void {
    const path = this._notebooks.currentWidget?.context.path;
    const session = this._actions.session(path);
    const key = JSON.stringify([
      path,
      session?.state,
      session?.last_checkpoint?.id,
      session?.can.resume
    ]);
    if (key !== this._key && this.isVisible) {
      this._key = key;
      void this.refresh();
    }
  }

  protected onAfterShow(): void {
    void this.refresh();
  }

  private _key = '';
}
