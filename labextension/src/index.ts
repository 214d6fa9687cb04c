/**
 * jupyter-pause frontend: small plugins that share one status model.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Token } from '@lumino/coreutils';

import { PauseStatusModel } from './model';
import { PauseStatusItem } from './statusbar';

/** The shared status model, for other plugins (and other extensions). */
export const IPauseStatusModel = new Token<PauseStatusModel>(
  'jupyter-pause:IPauseStatusModel',
  'The latest jupyter-pause status, polled from the server.'
);

const modelPlugin: JupyterFrontEndPlugin<PauseStatusModel> = {
  id: 'jupyter-pause:model',
  description: 'Polls the jupyter-pause status endpoint.',
  autoStart: true,
  provides: IPauseStatusModel,
  activate: (app: JupyterFrontEnd) =>
    new PauseStatusModel(app.serviceManager.serverSettings)
};

const statusPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:status-item',
  description: 'Shows the current notebook pause state in the status bar.',
  autoStart: true,
  requires: [IPauseStatusModel, INotebookTracker],
  optional: [IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    model: PauseStatusModel,
    notebooks: INotebookTracker,
    statusBar: IStatusBar | null
  ) => {
    if (!statusBar) {
      return;
    }
    const currentPath = () => notebooks.currentWidget?.context.path ?? null;
    const item = new PauseStatusItem(model, currentPath);
    notebooks.currentChanged.connect(() => item.update());
    statusBar.registerStatusItem('jupyter-pause:status', {
      item,
      align: 'left',
      rank: 4,
      isActive: () => notebooks.currentWidget !== null
    });
  }
};

export default [modelPlugin, statusPlugin];
