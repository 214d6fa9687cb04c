/**
 * The operation follower: starts an operation (pause, resume, checkpoint),
 * follows it until it ends or a deadline passes, and shows it as one notice
 * that says each step and turns into the outcome.
 *
 * Following is a poll with backoff, as JupyterLab's own are: every half
 * second while the server answers, less and less often while it cannot be
 * reached (a snapshot restore restarts it), never giving up before the
 * deadline.
 */
import { Notification } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { Poll } from '@lumino/polling';

import { IOperation, postAPI, requestAPI } from './api';
import { describeProgress, formatDuration, shortReason } from './labels';
import { PauseStatusModel } from './model';
import { ErrorNotices, detailsAction } from './notices';

/** How long a page follows one operation before it gives up asking. */
const FOLLOW_DEADLINE_MS = 60 * 60 * 1000;

/** How often an operation is asked about while the server answers. */
const FOLLOW_INTERVAL_MS = 500;

/**
 * Ask about `op` until it ends: its last answer, or null once `deadline`
 * (milliseconds since the epoch) has passed.  `onStep` sees every answer
 * while the operation runs.
 */
export async function followOperation(
  op: IOperation,
  settings: ServerConnection.ISettings,
  onStep: (op: IOperation) => void,
  deadline = Date.now() + FOLLOW_DEADLINE_MS
): Promise<IOperation | null> {
  if (op.outcome !== 'running') {
    return op;
  }
  const poll = new Poll<IOperation, Error>({
    factory: () =>
      requestAPI<IOperation>(`operations/${op.id}`, settings, {}, false),
    frequency: { interval: FOLLOW_INTERVAL_MS, backoff: true },
    name: `jupyter-pause:operation#${op.id}`,
    standby: 'never'
  });
  try {
    for await (const { phase, payload } of poll) {
      if (phase === 'resolved' || phase === 'reconnected') {
        const latest = payload as IOperation;
        if (latest.outcome !== 'running') {
          return latest;
        }
        onStep(latest);
      }
      if (Date.now() > deadline) {
        return null;
      }
    }
    return null; // disposed: nothing more will be known
  } finally {
    poll.dispose();
  }
}

/** Starts operations and reports their outcome, each in one notice. */
export class OperationFollower {
  constructor(
    private readonly _model: PauseStatusModel,
    private readonly _notices: ErrorNotices,
    readonly trans: TranslationBundle
  ) {}

  /** Operations started from this page: their outcome is reported by `run`. */
  readonly started = new Set<string>();

  /**
   * POST `body` to `endPoint`, which starts an operation on `path`, follow
   * it, and say how it ended (`verb`: "Pausing nb.ipynb").  The operation's
   * last answer; null when it could not start or outlived the deadline.
   */
  async run(
    endPoint: string,
    body: Record<string, unknown>,
    verb: string,
    path: string
  ): Promise<IOperation | null> {
    const trans = this.trans;
    let op: IOperation;
    try {
      op = (
        await postAPI<{ operation: IOperation }>(
          endPoint,
          this._model.serverSettings,
          body
        )
      ).operation;
    } catch (error) {
      const reason = (error as Error).message;
      this._notices.notify(
        path,
        trans.__('%1 failed: %2', verb, shortReason(reason)),
        reason
      );
      return null;
    }
    this.started.add(op.id);
    await this._model.refresh();
    const id = Notification.emit(trans.__('%1…', verb), 'in-progress', {
      autoClose: false
    });
    const ended = await followOperation(
      op,
      this._model.serverSettings,
      running => {
        if (running.progress) {
          Notification.update({
            id,
            message: trans.__(
              '%1: %2',
              verb,
              describeProgress(running.progress, trans)
            )
          });
        } else if (running.step) {
          Notification.update({
            id,
            message: trans.__('%1: %2', verb, running.step)
          });
        }
      }
    );
    if (ended === null) {
      Notification.update({
        id,
        type: 'warning',
        message: trans.__(
          '%1 is taking longer than %2; it goes on on the server, and the status bar will tell when it ends.',
          verb,
          formatDuration(FOLLOW_DEADLINE_MS / 1000, trans)
        ),
        autoClose: false
      });
      return null;
    }
    await this._model.refresh();
    this._report(ended, verb, path, id);
    return ended;
  }

  /** The progress notice `id` turns into the operation's outcome. */
  private _report(
    op: IOperation,
    verb: string,
    path: string,
    id: string
  ): void {
    const trans = this.trans;
    const notes = op.messages.join('\n');
    if (op.outcome === 'succeeded') {
      Notification.update({
        id,
        type: 'success',
        message: trans.__('%1: done.', verb),
        autoClose: notes ? false : 5000,
        actions: notes ? [detailsAction(verb, notes, trans)] : []
      });
    } else {
      // the same notice turns into the error (a second one would leave a spinner behind)
      this._notices.notify(
        path,
        trans.__('%1 failed: %2', verb, shortReason(op.error)),
        [op.error, notes].filter(Boolean).join('\n\n'),
        id
      );
    }
  }
}
