/**
 * What the user can do: pause, resume, checkpoint, keep running.
 *
 * Each action posts to the REST API, then follows its operation until it
 * ends, and tells the user the outcome (a notification with the reason when
 * it failed).  Whether an action is possible is read from the shared status
 * model, so buttons are disabled while an operation runs.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import {
  ICheckpointSummary,
  IOperation,
  ISessionStatus,
  IStatus,
  PauseState,
  postAPI,
  requestAPI
} from './api';
import { formatBytes } from './labels';
import { PauseStatusModel } from './model';

const PAUSABLE: PauseState[] = ['running', 'ready'];
const RESUMABLE: PauseState[] = ['paused', 'failed'];

export class PauseActions {
  constructor(private readonly _model: PauseStatusModel) {}

  /** Operations started from this page: their outcome is reported by `_run`. */
  readonly ownOperations = new Set<string>();

  session(path: string | null | undefined): ISessionStatus | null {
    return this._model.session(path);
  }

  /** No operation runs for this notebook right now. */
  isIdle(path: string | null | undefined): boolean {
    const session = this.session(path);
    return !session?.operation || session.operation.outcome !== 'running';
  }

  canPause(path: string | null | undefined): boolean {
    const session = this.session(path);
    return (
      !!session &&
      !!session.kernel_id &&
      PAUSABLE.includes(session.state) &&
      this.isIdle(path)
    );
  }

  canResume(path: string | null | undefined): boolean {
    const session = this.session(path);
    return (
      !!session &&
      RESUMABLE.includes(session.state) &&
      !!session.last_checkpoint &&
      this.isIdle(path)
    );
  }

  canCheckpoint(path: string | null | undefined): boolean {
    return this.canPause(path);
  }

  async pause(panel: NotebookPanel, force = false): Promise<IOperation | null> {
    const path = panel.context.path;
    if (panel.sessionContext.session?.kernel?.status === 'busy' && !force) {
      const answer = await showDialog({
        title: 'The notebook is running a cell',
        body: 'Pausing now interrupts the running cell. Interrupt it and pause?',
        buttons: [
          Dialog.cancelButton({ label: 'Keep running' }),
          Dialog.warnButton({ label: 'Interrupt and pause' })
        ]
      });
      if (!answer.button.accept) {
        return null;
      }
      force = true;
    }
    if (panel.context.model.dirty) {
      await panel.context.save(); // outputs worth studying are on disk before the kernel goes
    }
    const op = await this._run(
      'sessions/pause',
      { path, force },
      'Pausing',
      path
    );
    if (op?.outcome === 'succeeded') {
      // the kernel is gone: let the notebook say "No Kernel" instead of a stale "Idle"
      panel.sessionContext.session?.dispose();
    }
    return op;
  }

  async resume(
    panel: NotebookPanel,
    checkpointId?: string
  ): Promise<IOperation | null> {
    const path = panel.context.path;
    if (!checkpointId && this.session(path)?.state === 'failed') {
      // the last resume failed (say, a corrupt checkpoint): let the user pick
      const picked = await this._pickCheckpoint(path);
      if (picked === null) {
        return null;
      }
      checkpointId = picked;
    }
    const body: Record<string, unknown> = { path };
    if (checkpointId) {
      body.checkpoint_id = checkpointId;
    }
    const op = await this._run('sessions/resume', body, 'Resuming', path);
    if (op?.outcome === 'succeeded') {
      await this._connect(panel);
    }
    return op;
  }

  checkpoint(panel: NotebookPanel): Promise<IOperation | null> {
    const path = panel.context.path;
    return this._run('sessions/checkpoint', { path }, 'Checkpointing', path);
  }

  /** Postpone an announced auto-pause by one idle threshold. */
  async keepRunning(path: string): Promise<void> {
    try {
      await postAPI('sessions/postpone', this._model.serverSettings, { path });
      await this._model.refresh();
    } catch (error) {
      Notification.error(
        `Could not postpone the auto-pause: ${(error as Error).message}`
      );
    }
  }

  /** Ask which checkpoint to resume from, newest first; null when cancelled. */
  private async _pickCheckpoint(path: string): Promise<string | null> {
    const { checkpoints } = await requestAPI<{
      checkpoints: ICheckpointSummary[];
    }>(
      `checkpoints?path=${encodeURIComponent(path)}`,
      this._model.serverSettings,
      {},
      false
    );
    const select = document.createElement('select');
    select.className = 'jp-PauseCheckpointPicker';
    for (const c of checkpoints) {
      const option = document.createElement('option');
      option.value = c.id;
      option.textContent = `${c.id} · ${formatBytes(c.bytes)} · ${(c.objects ?? []).length} objects`;
      select.appendChild(option);
    }
    const body = document.createElement('div');
    const text = document.createElement('p');
    text.textContent = `The last resume failed: ${this.session(path)?.error ?? ''} Resume from:`;
    body.append(text, select);
    const answer = await showDialog({
      title: 'Resume from which checkpoint?',
      body: new Widget({ node: body }),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Resume' })]
    });
    return answer.button.accept ? select.value : null;
  }

  /** After a resume, attach the notebook to the kernel that holds its state. */
  private async _connect(panel: NotebookPanel): Promise<void> {
    // ask the server directly: the polled model may not have caught up yet
    const status = await requestAPI<IStatus>(
      'status',
      this._model.serverSettings,
      {},
      false
    );
    const path = panel.context.path;
    const kernelId = status.sessions.find(s => s.path === path)?.kernel_id;
    const sessionContext = panel.sessionContext;
    if (kernelId && sessionContext.session?.kernel?.id !== kernelId) {
      await sessionContext.changeKernel({ id: kernelId });
    }
  }

  private async _run(
    endPoint: string,
    body: Record<string, unknown>,
    verb: string,
    path: string
  ): Promise<IOperation | null> {
    const settings = this._model.serverSettings;
    let op: IOperation;
    try {
      op = (await postAPI<{ operation: IOperation }>(endPoint, settings, body))
        .operation;
    } catch (error) {
      Notification.error(
        `${verb} ${path} failed: ${(error as Error).message}`,
        {
          autoClose: false
        }
      );
      return null;
    }
    this.ownOperations.add(op.id);
    await this._model.refresh();
    const id = Notification.emit(`${verb} ${path}…`, 'in-progress', {
      autoClose: false
    });
    while (op.outcome === 'running') {
      await new Promise(resolve => setTimeout(resolve, 500));
      try {
        op = await requestAPI<IOperation>(
          `operations/${op.id}`,
          settings,
          {},
          false
        );
      } catch {
        // the server may be briefly unreachable (a snapshot restore); keep asking
        continue;
      }
      if (op.step) {
        Notification.update({ id, message: `${verb} ${path}: ${op.step}` });
      }
    }
    await this._model.refresh();
    const notes = op.messages.length ? ` ${op.messages.join(' ')}` : '';
    if (op.outcome === 'succeeded') {
      Notification.update({
        id,
        type: 'success',
        message: `${verb} ${path}: done.${notes}`,
        autoClose: 5000
      });
    } else {
      Notification.update({
        id,
        type: 'error',
        message: `${verb} ${path} failed: ${op.error}${notes}`,
        autoClose: false
      });
    }
    return op;
  }
}
