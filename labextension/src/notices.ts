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

/** A notice's details without what follows the failure itself (an operation's notes). */
function failure(details: string): string {
  return details.split('\n\n')[0];
}

/** Where the failures a user dismissed are remembered across page loads. */
const DISMISSED = 'jupyter-pause:dismissed-failures';

/**
 * The error notices about each notebook, withdrawn once it recovers. A failure
 * the user has not dismissed is told again after a page load (the server still
 * reports it); one they dismissed is not, until it is over.
 */
export class ErrorNotices {
  constructor(readonly trans: TranslationBundle) {
    Notification.manager.changed.connect(this._onChanged, this);
  }

  /** Whether the user dismissed the notice of this failure of `path`. */
  wasDismissed(path: string, error: string): boolean {
    return this._dismissed()[path] === failure(error);
  }

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
    this._errors.set(id, details);
  }

  /** Withdraw the error notices about a notebook that has recovered. */
  dismiss(path: string): void {
    this._withdrawing = true;
    try {
      for (const id of this._ids.get(path) ?? []) {
        Notification.dismiss(id);
        this._errors.delete(id);
      }
    } finally {
      this._withdrawing = false;
    }
    this._ids.delete(path);
    const dismissed = this._dismissed();
    if (path in dismissed) {
      delete dismissed[path]; // over: the next failure is told again
      this._remember(dismissed);
    }
  }

  /** A notice the user closed: its failure is not told again after a reload. */
  private _onChanged(_: unknown, change: Notification.IChange): void {
    const id = change.notification.id;
    const error = this._errors.get(id);
    if (change.type !== 'removed' || this._withdrawing || error === undefined) {
      return;
    }
    for (const [path, ids] of this._ids) {
      if (ids.includes(id)) {
        this._remember({ ...this._dismissed(), [path]: failure(error) });
      }
    }
  }

  private _dismissed(): Record<string, string> {
    try {
      return JSON.parse(window.localStorage.getItem(DISMISSED) ?? '{}');
    } catch {
      return {};
    }
  }

  private _remember(dismissed: Record<string, string>): void {
    try {
      window.localStorage.setItem(DISMISSED, JSON.stringify(dismissed));
    } catch {
      // storage refused (private mode, a quota): the notice may come back once
    }
  }

  private _ids = new Map<string, string[]>();
  private _errors = new Map<string, string>(); // notice id -> the failure it tells
  private _withdrawing = false;
}
