/**
 * jupyter-pause frontend: small plugins around one status model, each of
 * which a user can disable on its own.
 *
 * - `jupyter-pause:model` polls `GET status` (never counted as activity);
 * - `jupyter-pause:plugin` the actions: Pause, Resume and Save State Now as
 *   commands, toolbar buttons and Kernel menu items (`schema/plugin.json`);
 * - `jupyter-pause:kernel-guard` no kernel for a paused notebook, and a
 *   question before a cell runs in one;
 * - `jupyter-pause:banner` the banner in a paused or failed notebook, or one
 *   whose kernel lost its state while a saved state exists;
 * - `jupyter-pause:status-item` the status bar item and its popover;
 * - `jupyter-pause:auto-pause` auto-pause warnings and notices;
 * - `jupyter-pause:connection-lost` on JupyterHub, "this server was paused"
 *   instead of "server unavailable" when the server stopped for a pause;
 * - `jupyter-pause:resume-after-start` its "Start and resume": the restarted
 *   page resumes the notebooks the pause stopped;
 * - `jupyter-pause:snapshots` the "Saved state" side panel;
 * - `jupyter-pause:report` the GPU-time report.
 */
import {
  IConnectionLost,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, ISessionContextDialogs } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { Token } from '@lumino/coreutils';

import { PauseActions } from './actions';
import { AutoPauseNotices } from './autopause';
import { PauseBanners } from './banner';
import { pauseAwareConnectionLost, resumeAfterStart } from './connectionlost';
import { pauseIcon, resumeIcon, snapshotsIcon } from './icons';
import { KernelGuard } from './kernelguard';
import { PauseStatusModel } from './model';
import { createReportWidget } from './report';
import { RerunOffer } from './rerun';
import { SnapshotsPanel } from './snapshots';
import { PauseStatusItem } from './statusbar';

/** The user-visible strings' domain (`trans.__`). */
const DOMAIN = 'jupyter_pause';

/** The shared status model, for other plugins (and other extensions). */
export const IPauseStatusModel = new Token<PauseStatusModel>(
  'jupyter-pause:IPauseStatusModel',
  'The latest jupyter-pause status, polled from the server.'
);

/** What the user can do; shared by the toolbar, menus, banner and dialogs. */
export const IPauseActions = new Token<PauseActions>(
  'jupyter-pause:IPauseActions',
  'Pause, resume and save the state of notebooks.'
);

export const CommandIDs = {
  pause: 'jupyter-pause:pause',
  pauseUntil: 'jupyter-pause:pause-until',
  resume: 'jupyter-pause:resume',
  checkpoint: 'jupyter-pause:checkpoint',
  hibernate: 'jupyter-pause:hibernate',
  wake: 'jupyter-pause:wake',
  snapshots: 'jupyter-pause:show-snapshots',
  report: 'jupyter-pause:report'
} as const;

const modelPlugin: JupyterFrontEndPlugin<PauseStatusModel> = {
  id: 'jupyter-pause:model',
  description: 'Polls the jupyter-pause status endpoint.',
  autoStart: true,
  provides: IPauseStatusModel,
  optional: [ISettingRegistry],
  activate: (app: JupyterFrontEnd, registry: ISettingRegistry | null) => {
    const model = new PauseStatusModel(app.serviceManager.serverSettings);
    if (registry) {
      void registry.load(modelPlugin.id).then(settings => {
        const apply = () => {
          model.interval =
            (settings.get('pollInterval').composite as number) * 1000;
        };
        apply();
        settings.changed.connect(apply);
      });
    }
    return model;
  }
};

const actionsPlugin: JupyterFrontEndPlugin<PauseActions> = {
  id: 'jupyter-pause:plugin',
  description:
    'Pause, Resume and Save State Now: commands, toolbar buttons, Kernel menu items.',
  autoStart: true,
  provides: IPauseActions,
  requires: [IPauseStatusModel, INotebookTracker],
  optional: [ICommandPalette, ITranslator, ISessionContextDialogs],
  activate: (
    app: JupyterFrontEnd,
    model: PauseStatusModel,
    notebooks: INotebookTracker,
    palette: ICommandPalette | null,
    translator: ITranslator | null,
    sessionDialogs: ISessionContextDialogs | null
  ) => {
    const trans = (translator ?? nullTranslator).load(DOMAIN);
    const actions = new PauseActions(model, trans, sessionDialogs);
    const current = (): NotebookPanel | null => notebooks.currentWidget;
    const path = () => current()?.context.path ?? null;
    const run =
      (act: (panel: NotebookPanel) => Promise<unknown>) => async () => {
        const panel = current();
        if (panel) {
          await act(panel);
        }
      };

    app.commands.addCommand(CommandIDs.pause, {
      label: trans.__('Pause'),
      caption: trans.__(
        'Save this notebook’s state, then stop its kernel and free its accelerator'
      ),
      icon: args => (args.toolbar ? pauseIcon : undefined),
      isEnabled: () => actions.canPause(path()),
      isVisible: () => !actions.canResume(path()),
      execute: run(panel => actions.pause(panel))
    });
    app.commands.addCommand(CommandIDs.pauseUntil, {
      label: trans.__('Pause Until…'),
      caption: trans.__(
        'Pause now and resume by itself at a time you choose (tomorrow 08:45 by default)'
      ),
      isEnabled: () => actions.canPause(path()),
      isVisible: () => !actions.canResume(path()),
      execute: run(panel => actions.pauseUntil(panel))
    });
    app.commands.addCommand(CommandIDs.resume, {
      label: trans.__('Resume'),
      caption: trans.__(
        'Start a kernel and bring back this notebook’s saved state'
      ),
      icon: args => (args.toolbar ? resumeIcon : undefined),
      isEnabled: () => actions.canResume(path()),
      isVisible: () => actions.canResume(path()),
      execute: run(panel => actions.resume(panel))
    });
    app.commands.addCommand(CommandIDs.checkpoint, {
      label: trans.__('Save State Now'),
      caption: trans.__(
        'Save this notebook’s live state (as %%checkpoint does) without pausing'
      ),
      isEnabled: () => actions.canCheckpoint(path()),
      execute: run(panel => actions.checkpoint(panel))
    });
    app.commands.addCommand(CommandIDs.hibernate, {
      label: trans.__('Hibernate GPU'),
      caption: trans.__(
        'Free the GPU for a short break: the kernel keeps running, its GPU memory moves to host memory, and the next cell brings it back in seconds'
      ),
      isEnabled: () => actions.canHibernate(path()),
      // only where the server can hibernate (a GPU whose driver has the API), and
      // while a notebook is hibernated (disabled then: a cell wakes it)
      isVisible: () =>
        actions.canHibernate(path()) || actions.isHibernated(path()),
      execute: run(panel => actions.hibernate(panel))
    });
    app.commands.addCommand(CommandIDs.wake, {
      label: trans.__('Wake GPU'),
      caption: trans.__(
        'Bring the hibernated kernel’s GPU memory back now (a cell does it by itself)'
      ),
      isEnabled: () => actions.canWake(path()),
      isVisible: () => actions.canWake(path()),
      execute: run(panel => actions.wake(panel))
    });
    const refreshCommands = () => {
      for (const id of Object.values(CommandIDs)) {
        if (app.commands.hasCommand(id)) {
          app.commands.notifyCommandChanged(id);
        }
      }
    };
    model.changed.connect(refreshCommands);
    notebooks.currentChanged.connect(refreshCommands);
    if (palette) {
      const category = trans.__('Pause and Resume');
      for (const command of [
        CommandIDs.pause,
        CommandIDs.pauseUntil,
        CommandIDs.resume,
        CommandIDs.checkpoint,
        CommandIDs.hibernate,
        CommandIDs.wake
      ]) {
        palette.addItem({ command, category });
      }
    }
    return actions;
  }
};

const guardPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:kernel-guard',
  description:
    'No kernel for a paused notebook; asks before a cell runs in one.',
  autoStart: true,
  requires: [IPauseActions, INotebookTracker],
  activate: (_app, actions: PauseActions, notebooks: INotebookTracker) => {
    new KernelGuard(actions, notebooks);
  }
};

const bannerPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:banner',
  description: 'A banner in paused and failed notebooks, with Resume.',
  autoStart: true,
  requires: [IPauseActions, INotebookTracker],
  activate: (_app, actions: PauseActions, notebooks: INotebookTracker) => {
    new PauseBanners(actions, notebooks);
  }
};

const rerunPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:rerun',
  description:
    'After a resume, offers to re-run the cells that made what could not be saved.',
  autoStart: true,
  requires: [IPauseStatusModel, INotebookTracker],
  optional: [ITranslator],
  activate: (
    _app,
    model: PauseStatusModel,
    notebooks: INotebookTracker,
    translator: ITranslator | null
  ) => {
    new RerunOffer(
      model,
      notebooks,
      (translator ?? nullTranslator).load(DOMAIN)
    );
  }
};

const statusPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:status-item',
  description: 'Shows the current notebook pause state in the status bar.',
  autoStart: true,
  requires: [IPauseActions, INotebookTracker],
  optional: [IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    actions: PauseActions,
    notebooks: INotebookTracker,
    statusBar: IStatusBar | null
  ) => {
    if (!statusBar) {
      return;
    }
    const currentPath = () => notebooks.currentWidget?.context.path ?? null;
    const item = new PauseStatusItem(
      actions.model,
      currentPath,
      app.commands,
      actions.trans,
      [
        CommandIDs.pause,
        CommandIDs.resume,
        CommandIDs.checkpoint,
        CommandIDs.hibernate,
        CommandIDs.wake
      ]
    );
    notebooks.currentChanged.connect(() => item.update());
    statusBar.registerStatusItem('jupyter-pause:status', {
      item,
      align: 'left',
      rank: 4,
      isActive: () => notebooks.currentWidget !== null
    });
  }
};

const autoPausePlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:auto-pause',
  description: 'Auto-pause warnings with Keep running, and notices after it.',
  autoStart: true,
  requires: [IPauseActions, INotebookTracker],
  activate: (_app, actions: PauseActions, notebooks: INotebookTracker) => {
    new AutoPauseNotices(actions, notebooks);
  }
};

const connectionLostPlugin: JupyterFrontEndPlugin<IConnectionLost> = {
  id: 'jupyter-pause:connection-lost',
  description:
    'On JupyterHub, a server that paused itself says so when its connection drops.',
  autoStart: true,
  provides: IConnectionLost,
  requires: [IPauseStatusModel, JupyterFrontEnd.IPaths],
  optional: [ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: PauseStatusModel,
    paths: JupyterFrontEnd.IPaths,
    translator: ITranslator | null
  ) => {
    const trans = (translator ?? nullTranslator).load(DOMAIN);
    const events = app.serviceManager.events;
    return pauseAwareConnectionLost(model, events, paths, trans);
  }
};

const resumeAfterStartPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:resume-after-start',
  description:
    'On JupyterHub, "Start and resume" resumes the notebooks the pause stopped.',
  autoStart: true,
  requires: [IPauseActions, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    actions: PauseActions,
    notebooks: INotebookTracker
  ) => {
    void resumeAfterStart(actions, notebooks, app.restored);
  }
};

const snapshotsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:snapshots',
  description:
    'The "Saved state" side panel: list, verify, resume from, delete.',
  autoStart: true,
  requires: [IPauseActions, INotebookTracker],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    actions: PauseActions,
    notebooks: INotebookTracker,
    palette: ICommandPalette | null
  ) => {
    const trans = actions.trans;
    const panel = new SnapshotsPanel(actions, notebooks);
    panel.title.icon = snapshotsIcon;
    app.shell.add(panel, 'right', { rank: 900 });
    app.commands.addCommand(CommandIDs.snapshots, {
      label: trans.__('Show Saved State'),
      caption: trans.__('List this notebook’s saved state, verified'),
      execute: () => app.shell.activateById(panel.id)
    });
    palette?.addItem({
      command: CommandIDs.snapshots,
      category: trans.__('Pause and Resume')
    });
  }
};

const reportPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:report',
  description: 'The GPU-time report in a main-area tab.',
  autoStart: true,
  optional: [ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ) => {
    const trans = (translator ?? nullTranslator).load(DOMAIN);
    app.commands.addCommand(CommandIDs.report, {
      label: trans.__('GPU-Time Report'),
      caption: trans.__(
        'Accelerator hours allocated, used and released; pause and resume latencies'
      ),
      execute: () => {
        const widget = createReportWidget(
          app.serviceManager.serverSettings,
          trans
        );
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
      }
    });
    palette?.addItem({
      command: CommandIDs.report,
      category: trans.__('Pause and Resume')
    });
  }
};

export default [
  modelPlugin,
  actionsPlugin,
  guardPlugin,
  bannerPlugin,
  rerunPlugin,
  statusPlugin,
  autoPausePlugin,
  connectionLostPlugin,
  resumeAfterStartPlugin,
  snapshotsPlugin,
  reportPlugin
];
