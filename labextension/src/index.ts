/**
 * jupyter-pause frontend: small plugins that share one status model.
 *
 * - `jupyter-pause:model` polls `GET status` (never counted as activity);
 * - `jupyter-pause:status-item` shows the current notebook's state;
 * - `jupyter-pause:plugin` adds the commands, the toolbar buttons declared in
 *   `schema/plugin.json`, the resume offer and the auto-pause warnings.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Token } from '@lumino/coreutils';

import { PauseActions } from './actions';
import { AutoPauseWarnings } from './autopause';
import { pauseIcon, resumeIcon } from './icons';
import { PauseStatusModel } from './model';
import { createReportWidget } from './report';
import { ResumeOffer } from './resume';
import { RerunOffer } from './rerun';
import { PauseStatusItem } from './statusbar';

/** The shared status model, for other plugins (and other extensions). */
export const IPauseStatusModel = new Token<PauseStatusModel>(
  'jupyter-pause:IPauseStatusModel',
  'The latest jupyter-pause status, polled from the server.'
);

export const CommandIDs = {
  pause: 'jupyter-pause:pause',
  resume: 'jupyter-pause:resume',
  checkpoint: 'jupyter-pause:checkpoint',
  report: 'jupyter-pause:report'
} as const;

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

const actionsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:plugin',
  description:
    'Pause, Resume and Checkpoint commands, toolbar buttons, resume offer.',
  autoStart: true,
  requires: [IPauseStatusModel, INotebookTracker],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    model: PauseStatusModel,
    notebooks: INotebookTracker,
    palette: ICommandPalette | null
  ) => {
    const actions = new PauseActions(model);
    const current = (): NotebookPanel | null => notebooks.currentWidget;
    const path = () => current()?.context.path ?? null;

    app.commands.addCommand(CommandIDs.pause, {
      label: 'Pause',
      caption:
        'Checkpoint this notebook, then stop its kernel and free its accelerator',
      icon: args => (args.toolbar ? pauseIcon : undefined),
      isEnabled: () => actions.canPause(path()),
      isVisible: () => !actions.canResume(path()),
      execute: async () => {
        const panel = current();
        if (panel) {
          await actions.pause(panel);
        }
      }
    });
    app.commands.addCommand(CommandIDs.resume, {
      label: 'Resume',
      caption: 'Start a kernel and restore this notebook from its checkpoint',
      icon: args => (args.toolbar ? resumeIcon : undefined),
      isEnabled: () => actions.canResume(path()),
      isVisible: () => actions.canResume(path()),
      execute: async () => {
        const panel = current();
        if (panel) {
          await actions.resume(panel);
        }
      }
    });
    app.commands.addCommand(CommandIDs.checkpoint, {
      label: 'Checkpoint Now',
      caption: "Save this notebook's live state without pausing",
      isEnabled: () => actions.canCheckpoint(path()),
      execute: async () => {
        const panel = current();
        if (panel) {
          await actions.checkpoint(panel);
        }
      }
    });
    app.commands.addCommand(CommandIDs.report, {
      label: 'GPU-Time Report',
      caption:
        'Accelerator hours allocated, used and released; pause and resume latencies',
      execute: () => {
        const widget = createReportWidget(app.serviceManager.serverSettings);
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
      }
    });
    const refreshCommands = () => {
      for (const id of Object.values(CommandIDs)) {
        app.commands.notifyCommandChanged(id);
      }
    };
    model.changed.connect(refreshCommands);
    notebooks.currentChanged.connect(refreshCommands);

    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category: 'Jupyter Pause' });
      }
    }
    new ResumeOffer(model, actions, notebooks);
    new AutoPauseWarnings(model, actions);
    new RerunOffer(model, notebooks);
  }
};

export default [modelPlugin, statusPlugin, actionsPlugin];
