/**
 * On JupyterHub a pause stops the whole server (the `jupyterhub` backend), so
 * the page loses its connection: JupyterLab would say "Server unavailable or
 * unreachable… restart?", as for a crash.  When the last status or the
 * server's own events (Jupyter's event bus) said it was pausing itself, say
 * that instead (when, why) and offer to start
 * it: the Hub's spawn page, in this tab, so that no stale dialog stays on top
 * of the restarted page, which then resumes the notebooks the pause stopped
 * that it has open (:func:`resumeAfterStart`).  Any other lost connection is
 * JupyterLab's to tell: the Hub's restart question on a hub, else JupyterLab's
 * default dialog.
 */
import {
  ConnectionLost,
  IConnectionLost,
  JupyterFrontEnd
} from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { Event } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';

import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { PauseActions } from './actions';
import { IStatus, PauseState } from './api';
import { formatDuration, formatTime } from './labels';
import { PauseStatusModel } from './model';
import { surfaceErrors } from './notices';

/** The states of a pause that is under way: the server stops at its end. */
export const PAUSING: readonly PauseState[] = ['checkpointing', 'pausing'];

export interface ISelfPause {
  /** When it stopped (as this page saw it), seconds since the epoch. */
  at: number;
  /** Why, in words: "idle 2 h", "%pause", "paused by you". */
  why: string;
  /** The notebooks the pause stopped (every live one: the server stops). */
  paths: string[];
}

/**
 * The states of a notebook with a kernel, which a pause of the server stops (a
 * hibernated one too: the stop pauses it, lifecycle.State.has_kernel).
 */
export const LIVE: readonly PauseState[] = [
  'running',
  'ready',
  ...PAUSING,
  'hibernating',
  'hibernated',
  'waking'
];

/**
 * Where "Start and resume" leaves the notebooks to resume for the restarted page
 * (this tab's session storage: the Hub's pages and the server share its origin).
 */
const RESUME_AFTER_START = 'jupyter-pause:resume-after-start';

/** The server's lifecycle events on Jupyter's event bus (server/app.py). */
const EVENT_SCHEMA = 'https://events.jupyter.org/jupyter_pause/lifecycle/v1';

/** A pause of this server, as its events told it (before its status could). */
interface IPauseUnderWay {
  path: string;
  auto: boolean;
}

/**
 * Whether this server was pausing itself on JupyterHub when its connection
 * dropped: the last status showed a pause under way, or its events did (a
 * small notebook's pause can end between two polls).
 */
export function selfPause(
  status: IStatus | null,
  underWay: IPauseUnderWay | null,
  trans: TranslationBundle
): ISelfPause | null {
  if (status?.backend.name !== 'jupyterhub') {
    return null;
  }
  const session = status.sessions.find(
    s =>
      (s.operation?.kind === 'pause' && PAUSING.includes(s.state)) ||
      s.path === underWay?.path
  );
  if (!session) {
    return null;
  }
  const options = PAUSING.includes(session.state)
    ? (session.operation?.options ?? {})
    : { auto: underWay?.auto };
  let why: string;
  if (options.auto) {
    const threshold = session.policy?.idle_threshold;
    why = threshold
      ? trans.__('idle %1', formatDuration(threshold, trans))
      : trans.__('idle');
  } else if (options.after_cell) {
    why = trans.__('by %%pause');
  } else {
    why = trans.__('paused on request');
  }
  const paths = status.sessions
    .filter(s => LIVE.includes(s.state) || s.path === underWay?.path)
    .map(s => s.path);
  return { at: Date.now() / 1000, why, paths };
}

/** Follow the server's events: a pause requested, and one that did not happen. */
function followPauses(
  events: Event.IManager,
  onChange: (underWay: IPauseUnderWay | null) => void
): void {
  events.stream.connect((_, event) => {
    if (event.schema_id !== EVENT_SCHEMA) {
      return;
    }
    const data = (event.data ?? {}) as Record<string, unknown>;
    if (event.type === 'pause-requested') {
      onChange({ path: String(event.path), auto: data.auto === true });
    } else if (
      (event.type === 'operation-failed' && data.operation === 'pause') ||
      (event.type === 'state-changed' && data.to === 'running')
    ) {
      onChange(null); // the pause did not happen: the kernels run on
    }
  });
}

/**
 * The Hub's page that starts this very server (`/hub/spawn/USER[/NAME]`);
 * with `next`, the page of this server it then opens.
 */
export function spawnUrl(paths: JupyterFrontEnd.IPaths, next?: string): string {
  const urls = paths.urls;
  const spawn =
    (urls.hubHost ?? '') +
    URLExt.join(
      urls.hubPrefix ?? '/hub/',
      'spawn',
      urls.hubUser ?? '',
      urls.hubServerName ?? ''
    );
  return next ? spawn + URLExt.objectToQueryString({ next }) : spawn;
}

export function pauseAwareConnectionLost(
  model: PauseStatusModel,
  events: Event.IManager,
  paths: JupyterFrontEnd.IPaths,
  trans: TranslationBundle
): IConnectionLost {
  let showing = false;
  let dismissed = false;
  let paused: ISelfPause | null = null;
  let underWay: IPauseUnderWay | null = null;
  followPauses(events, pause => (underWay = pause));
  return async (manager, error, translator) => {
    // the first failure decides: later ones come after the status is stale
    paused = paused ?? selfPause(model.status, underWay, trans);
    if (!paused) {
      return paths.urls.hubPrefix
        ? askToRestart(paths, trans)
        : ConnectionLost(manager, error, translator);
    }
    if (showing || dismissed) {
      return;
    }
    showing = true;
    try {
      const answer = await showDialog({
        title: trans.__('Server paused'),
        body: trans.__(
          'This server was paused at %1 (%2). Every notebook was saved first: start it and resume.',
          formatTime(paused.at),
          paused.why
        ),
        buttons: [
          Dialog.cancelButton({ label: trans.__('Dismiss') }),
          Dialog.okButton({ label: trans.__('Start and resume') })
        ]
      });
      if (answer.button.accept) {
        window.sessionStorage.setItem(
          RESUME_AFTER_START,
          JSON.stringify(paused.paths)
        );
        window.location.href = spawnUrl(paths, window.location.pathname);
      } else {
        dismissed = true;
      }
    } finally {
      showing = false;
    }
  };
}

/** What JupyterLab's Hub extension asks when its server is gone (ours replaces it). */
let asking = false;

async function askToRestart(
  paths: JupyterFrontEnd.IPaths,
  trans: TranslationBundle
): Promise<void> {
  if (asking) {
    return;
  }
  asking = true;
  try {
    const answer = await showDialog({
      title: trans.__('Server unavailable or unreachable'),
      body: trans.__(
        'Your server at %1 is not running.\nWould you like to restart it?',
        paths.urls.base
      ),
      buttons: [
        Dialog.okButton({ label: trans.__('Restart') }),
        Dialog.cancelButton({ label: trans.__('Dismiss') })
      ]
    });
    if (answer.button.accept) {
      window.open(spawnUrl(paths), '_blank');
    }
  } finally {
    asking = false;
  }
}

/**
 * The page that "Start and resume" opened: resume the notebooks the pause
 * stopped that are open here, once the restarted server says they are paused
 * (with `resume_on_start` it resumes them itself, and nothing is left to do).
 */
export async function resumeAfterStart(
  actions: PauseActions,
  notebooks: INotebookTracker,
  restored: Promise<void>
): Promise<void> {
  const remembered = window.sessionStorage.getItem(RESUME_AFTER_START);
  if (remembered === null) {
    return;
  }
  window.sessionStorage.removeItem(RESUME_AFTER_START);
  let paths: string[];
  try {
    paths = JSON.parse(remembered);
  } catch {
    return;
  }
  await restored; // the workspace's notebooks are open
  const resume = async (panel: NotebookPanel) => {
    await panel.context.ready;
    const session = await actions.model.fetchSession(panel.context.path);
    if (session?.state === 'paused') {
      await actions.resume(panel);
    }
  };
  notebooks.forEach(panel => {
    if (paths.includes(panel.context.path)) {
      surfaceErrors(
        resume(panel),
        actions.trans.__('Resuming %1 failed', panel.context.path)
      );
    }
  });
}
