/**
 * On JupyterHub a pause stops the whole server (the `jupyterhub` backend), so
 * the page loses its connection: JupyterLab would say "Server unavailable or
 * unreachable… restart?", as for a crash.  When the last status said this
 * server was pausing itself, say that instead (when, why) and offer to start
 * it: the Hub's spawn page, in this tab, so that no stale dialog stays on top
 * of the restarted page.  Any other lost connection is JupyterLab's to tell:
 * the Hub's restart question on a hub, else JupyterLab's default dialog.
 */
import {
  ConnectionLost,
  IConnectionLost,
  JupyterFrontEnd
} from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { TranslationBundle } from '@jupyterlab/translation';

import { IStatus, PauseState } from './api';
import { formatDuration, formatTime } from './labels';
import { PauseStatusModel } from './model';

/** The states of a pause that is under way: the server stops at its end. */
const PAUSING: readonly PauseState[] = ['checkpointing', 'pausing'];

export interface ISelfPause {
  /** When it stopped (as this page saw it), seconds since the epoch. */
  at: number;
  /** Why, in words: "idle 2 h", "%pause", "paused by you". */
  why: string;
}

/** Whether the last status said this server was pausing itself on JupyterHub. */
export function selfPause(
  status: IStatus | null,
  trans: TranslationBundle
): ISelfPause | null {
  if (status?.backend.name !== 'jupyterhub') {
    return null;
  }
  const session = status.sessions.find(
    s => s.operation?.kind === 'pause' && PAUSING.includes(s.state)
  );
  const options = session?.operation?.options;
  if (!session || !options) {
    return null;
  }
  let why: string;
  if (options.auto) {
    const threshold = session.policy?.idle_threshold;
    why = threshold
      ? trans.__('idle %1', formatDuration(threshold, trans))
      : trans.__('idle');
  } else if (options.after_cell) {
    why = trans.__('by %%pause');
  } else {
    why = trans.__('paused by you');
  }
  return { at: Date.now() / 1000, why };
}

/** The Hub's page that starts this very server (`/hub/spawn/USER[/NAME]`). */
export function spawnUrl(paths: JupyterFrontEnd.IPaths): string {
  const urls = paths.urls;
  return (
    (urls.hubHost ?? '') +
    URLExt.join(
      urls.hubPrefix ?? '/hub/',
      'spawn',
      urls.hubUser ?? '',
      urls.hubServerName ?? ''
    )
  );
}

export function pauseAwareConnectionLost(
  model: PauseStatusModel,
  paths: JupyterFrontEnd.IPaths,
  trans: TranslationBundle
): IConnectionLost {
  let showing = false;
  let dismissed = false;
  let paused: ISelfPause | null = null;
  return async (manager, error, translator) => {
    // the first failure decides: later ones come after the status is stale
    paused = paused ?? selfPause(model.status, trans);
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
        window.location.href = spawnUrl(paths);
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
