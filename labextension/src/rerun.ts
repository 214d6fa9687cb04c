/**
 * After a resume, offer to re-run the cells that made what the checkpoint could
 * not save (locks, open files, connections, generators...).
 *
 * The kernel knows which cell last bound each skipped name (recorded, with its
 * source, in the signed checkpoint). This asks it once per resumed kernel, shows
 * the cells ("Re-run cell [7] to recreate conn, cursor?") and runs them only
 * when the user clicks Re-run. Both requests are silent executions, so they
 * never count as user activity.
 */
import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { PauseStatusModel } from './model';

/** One cell the last restore offers to re-run. */
export interface IRerunCell {
  cell: number;
  source: string;
  names: string[];
}

const API = "__import__('jupyter_pause')";

export class RerunOffer {
  constructor(
    private readonly _model: PauseStatusModel,
    private readonly _notebooks: INotebookTracker,
    private readonly _trans: TranslationBundle
  ) {
    _model.changed.connect(this._check, this);
  }

  private _check(): void {
    for (const session of this._model.status?.sessions ?? []) {
      const id = session.kernel_id;
      if (
        session.restored_from !== 'checkpoint' ||
        !['ready', 'running'].includes(session.state) ||
        !id ||
        this._asked.has(id)
      ) {
        continue;
      }
      const panel = this._notebooks.find(p => p.context.path === session.path);
      const kernel = panel?.sessionContext.session?.kernel;
      if (kernel?.id === id) {
        this._asked.add(id);
        void this._offer(session.path, kernel);
      }
    }
  }

  private async _offer(
    path: string,
    kernel: Kernel.IKernelConnection
  ): Promise<void> {
    const cells = (await evaluate(kernel, `${API}.offered()`)) as
      IRerunCell[] | null;
    if (!cells?.length) {
      return;
    }
    const trans = this._trans;
    const answer = await showDialog({
      title: trans.__('Re-run cells to recreate what was not saved?'),
      body: new Widget({ node: offerBody(path, cells, trans) }),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Skip') }),
        Dialog.okButton({ label: trans.__('Re-run') })
      ]
    });
    if (!answer.button.accept) {
      return;
    }
    const ids = JSON.stringify(cells.map(c => c.cell));
    const outcome = (await evaluate(kernel, `${API}.rerun(${ids})`)) as Record<
      string,
      string
    > | null;
    const failed = Object.entries(outcome ?? {}).filter(([, v]) => v !== 'ok');
    if (!outcome || failed.length) {
      await showErrorMessage(
        trans.__('Re-run failed'),
        failed
          .map(([cell, why]) => trans.__('cell [%1]: %2', cell, why))
          .join('\n') || trans.__('the kernel did not answer')
      );
    }
  }

  private _asked = new Set<string>();
}

function offerBody(
  path: string,
  cells: IRerunCell[],
  trans: TranslationBundle
): HTMLElement {
  const body = document.createElement('div');
  body.className = 'jp-PauseRerunOffer';
  const intro = document.createElement('p');
  intro.textContent = trans.__(
    '%1 was restored, but some objects cannot be saved and were skipped. Nothing runs unless you choose Re-run.',
    path
  );
  body.appendChild(intro);
  for (const c of cells) {
    const line = document.createElement('p');
    line.textContent = trans.__(
      'Re-run cell [%1] to recreate %2:',
      c.cell,
      c.names.join(', ')
    );
    const source = document.createElement('pre');
    source.textContent = c.source;
    body.append(line, source);
  }
  return body;
}

/** A silent user expression; its value as JSON (the kernel sends application/json). */
async function evaluate(
  kernel: Kernel.IKernelConnection,
  expression: string
): Promise<unknown> {
  const future = kernel.requestExecute({
    code: '',
    silent: true,
    store_history: false,
    user_expressions: { value: expression }
  });
  const reply = await future.done;
  const value = (reply.content as any).user_expressions?.value;
  return value?.status === 'ok' ? value.data['application/json'] : null;
}
