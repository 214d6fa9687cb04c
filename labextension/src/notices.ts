/**
 * Notices (JupyterLab notifications) that tell the user what happened: a
 * short message, with the full reason one click away; error notices about a
 * notebook are withdrawn once it recovers.
 */
import { Notification } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';

import { showDetails } from './dialogs';
import { unsavedNames } from './labels';

/**
 * Run a task nobody awaits (a button's click, a background save) and show
 * its failure to the user instead of losing it in the console.
 */
export function surfaceErrors(task: Promise<unknown>, what: string): void {
  task.catch(error => {
    console.error(`jupyter-pause: ${what}`, error);
    Notification.error(`${what}: ${(error as Error).message ?? error}`, {
      autoClose: false
    });
  });
}

/** A notice's "Show details" button: the whole story, the notice stays open. */
export function detailsAction(
  title: string,
  details: string,
  trans: TranslationBundle
): Notification.IAction {
  return {
    label: trans.__('Show details'),
    callback: event => {
      event.preventDefault(); // keep the notice open
      showDetails(title, details, trans);
    }
  };
}

/**
 * After a resume of `path`: the names that did not come back because they
 * could not be saved (`reasons`: the checkpoint's skipped names and why).
 */
export function notifyUnrestored(
  path: string,
  reasons: Record<string, string>,
  trans: TranslationBundle
): void {
  const names = unsavedNames(reasons);
  if (!names.length) {
    return;
  }
  const message = trans._n(
    'Resumed %2, but %3 did not come back: it could not be saved.',
    'Resumed %2, but %1 names did not come back: %3.',
    names.length,
    path,
    names.join(', ')
  );
  const details = names.map(n => `${n}: ${reasons[n]}`).join('\n');
  Notification.warning(message, {
    autoClose: false,
    actions: [detailsAction(trans.__('Not restored'), details, trans)]
  });
}

/** The error notices about each notebook, withdrawn once it recovers. */
export class ErrorNotices {
  constructor(readonly trans: TranslationBundle) {}

  /**
   * An error notice about `path`; `replacing` is a notice (say, an operation's
   * progress) that turns into this one instead of leaving a second behind.
   */
  notify(
    path: string,
    message: string,
    details: string,
    replacing?: string
  ): void {
    const options = {
      autoClose: false as const,
      actions: [detailsAction(message, details, this.trans)]
    };
    let id = replacing;
    if (
      id === undefined ||
      !Notification.update({ id, message, type: 'error', ...options })
    ) {
      id = Notification.error(message, options);
    }
    this._ids.set(path, [...(this._ids.get(path) ?? []), id]);
  }

  /** Withdraw the error notices about a notebook that has recovered. */
  dismiss(path: string): void {
    for (const id of this._ids.get(path) ?? []) {
      Notification.dismiss(id);
    }
    this._ids.delete(path);
  }

  private _ids = new Map<string, string[]>();
}
