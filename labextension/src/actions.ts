/**
 * What the user can do: pause, resume, save state, keep running, start empty.
 *
 * Each action posts to the REST API, then follows its operation until it
 * ends (or a deadline passes), and tells the user the outcome: a short
 * message, with the full reason one click away.  Whether an action is
 * possible is read from the shared status model, so buttons are disabled
 * while an operation runs.
 */
import {
  Dialog,
  ISessionContextDialogs,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import {
  ICheckpointSummary,
  IOperation,
  ISessionStatus,
  postAPI,
  requestAPI
} from './api';
import { joinPathSession, startKernelNow } from './kernelhold';
import {
  formatBytes,
  formatDuration,
  formatTime,
  shortReason,
  unsavedNames
} from './labels';
import { PauseStatusModel } from './model';

/** How long a page follows one operation before it gives up asking. */
const FOLLOW_DEADLINE_MS = 60 * 60 * 1000;

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

/** A short message with the whole story behind a "Show details" button. */
export function showDetails(
  title: string,
  details: string,
  trans: TranslationBundle
): void {
  const body = document.createElement('pre');
  body.className = 'jp-PauseDetails';
  body.textContent = details;
  void showDialog({
    title,
    body: new Widget({ node: body }),
    buttons: [Dialog.okButton({ label: trans.__('Close') })]
  });
}

export class PauseActions {
  constructor(
    private readonly _model: PauseStatusModel,
    readonly trans: TranslationBundle,
    private readonly _sessionDialogs: ISessionContextDialogs | null
  ) {}

  /** Operations started from this page: their outcome is reported by `_run`. */
  readonly ownOperations = new Set<string>();

  get model(): PauseStatusModel {
    return this._model;
  }

  session(path: string | null | undefined): ISessionStatus | null {
    return this._model.session(path);
  }

  /** No operation runs for this notebook right now. */
  isIdle(path: string | null | undefined): boolean {
    const session = this.session(path);
    return !session?.operation || session.operation.outcome !== 'running';
  }

  /** What the server allows now (`can` in `GET status`): its lifecycle decides. */
  canPause(path: string | null | undefined): boolean {
    return !!this.session(path)?.can.pause;
  }

  canResume(path: string | null | undefined): boolean {
    return !!this.session(path)?.can.resume;
  }

  canCheckpoint(path: string | null | undefined): boolean {
    return !!this.session(path)?.can.checkpoint;
  }

  /**
   * "Pause Until…": ask when to resume by itself (tomorrow 08:45 by default),
   * then pause with that schedule.
   */
  async pauseUntil(panel: NotebookPanel): Promise<IOperation | null> {
    const trans = this.trans;
    const body = document.createElement('div');
    body.className = 'jp-PauseUntil';
    const label = document.createElement('label');
    label.textContent = trans.__('Resume automatically at');
    const input = document.createElement('input');
    input.type = 'datetime-local';
    input.className = 'jp-mod-styled';
    input.setAttribute('data-jp-pause', 'resume-at');
    input.value = localInputValue(defaultResumeTime());
    label.appendChild(input);
    const note = document.createElement('p');
    note.textContent = trans.__(
      'The notebook is saved and its accelerator freed now; at that time it is restored, so that it is ready when you are back.'
    );
    body.append(label, note);
    const answer = await showDialog({
      title: trans.__('Pause until…'),
      body: new Widget({ node: body }),
      buttons: [
        Dialog.cancelButton(),
        Dialog.okButton({ label: trans.__('Pause') })
      ],
      focusNodeSelector: 'input'
    });
    if (!answer.button.accept) {
      return null;
    }
    const at = new Date(input.value).getTime() / 1000;
    if (!Number.isFinite(at) || at <= Date.now() / 1000) {
      this.notifyError(
        panel.context.path,
        trans.__('Pick a time in the future to resume at.'),
        input.value
      );
      return null;
    }
    return this.pause(panel, false, at);
  }

  /** Cancel a paused notebook's scheduled resume; it stays paused. */
  async cancelSchedule(path: string): Promise<void> {
    await requestAPI<void>(
      `sessions/schedule?path=${encodeURIComponent(path)}`,
      this._model.serverSettings,
      { method: 'DELETE' }
    );
    await this._model.refresh();
  }

  async pause(
    panel: NotebookPanel,
    force = false,
    resumeAt: number | null = null
  ): Promise<IOperation | null> {
    const trans = this.trans;
    const path = panel.context.path;
    if (panel.sessionContext.session?.kernel?.status === 'busy' && !force) {
      const answer = await showDialog({
        title: trans.__('The notebook is running a cell'),
        body: trans.__(
          'Pausing now interrupts the running cell. Interrupt it and pause?'
        ),
        buttons: [
          Dialog.cancelButton({ label: trans.__('Keep running') }),
          Dialog.warnButton({ label: trans.__('Interrupt and pause') })
        ]
      });
      if (!answer.button.accept) {
        return null;
      }
      force = true;
    }
    if (!force && !(await this._confirmUnsaveable(path))) {
      return null;
    }
    await this.save(panel); // outputs worth studying are on disk before the kernel goes
    const body: Record<string, unknown> = { path, force };
    if (resumeAt !== null) {
      body.resume_at = resumeAt;
    }
    const op = await this._run(
      'sessions/pause',
      body,
      trans.__('Pausing %1', path),
      path
    );
    if (op?.outcome === 'succeeded') {
      this.detachKernel(panel);
    }
    return op;
  }

  /**
   * Before a pause by hand: list every variable the pause would not save,
   * with why, and let the user decide.  True to go on.
   */
  private async _confirmUnsaveable(path: string): Promise<boolean> {
    const trans = this.trans;
    let unsaveable: Record<string, string> = {};
    try {
      unsaveable = (
        await requestAPI<{ unsaveable: Record<string, string> }>(
          `sessions/unsaveable?path=${encodeURIComponent(path)}`,
          this._model.serverSettings
        )
      ).unsaveable;
    } catch {
      return true; // the pause itself says what was not saved
    }
    const names = Object.keys(unsaveable).sort();
    if (!names.length) {
      return true;
    }
    const body = document.createElement('div');
    body.className = 'jp-PauseUnsaveable';
    const intro = document.createElement('p');
    intro.textContent = trans._n(
      'One variable cannot be saved and will not come back after Resume:',
      '%1 variables cannot be saved and will not come back after Resume:',
      names.length
    );
    const list = document.createElement('ul');
    for (const name of names) {
      const item = document.createElement('li');
      item.textContent = `${name}: ${shortReason(unsaveable[name], 100)}`;
      list.appendChild(item);
    }
    const details = document.createElement('details');
    const summary = document.createElement('summary');
    summary.textContent = trans.__('Show details');
    const full = document.createElement('pre');
    full.textContent = names.map(n => `${n}: ${unsaveable[n]}`).join('\n');
    details.append(summary, full);
    body.append(intro, list, details);
    const answer = await showDialog({
      title: trans.__('Not everything can be saved'),
      body: new Widget({ node: body }),
      buttons: [
        Dialog.cancelButton(),
        Dialog.warnButton({ label: trans.__('Pause anyway') })
      ]
    });
    return answer.button.accept;
  }

  /** Save the notebook file if it has unsaved changes. */
  async save(panel: NotebookPanel): Promise<void> {
    if (panel.context.model.dirty && !panel.context.model.readOnly) {
      await panel.context.save();
    }
  }

  /** The kernel is gone: let the notebook say "No Kernel", not a stale "Idle". */
  detachKernel(panel: NotebookPanel): void {
    panel.sessionContext.session?.dispose();
  }

  async resume(
    panel: NotebookPanel,
    checkpointId?: string
  ): Promise<IOperation | null> {
    const trans = this.trans;
    const path = panel.context.path;
    if (!checkpointId && this.session(path)?.state === 'failed') {
      // the last resume failed (say, a corrupt checkpoint): let the user pick
      const picked = await this.pickCheckpoint(panel);
      if (picked === null) {
        return null;
      }
      checkpointId = picked;
    }
    const body: Record<string, unknown> = { path };
    if (checkpointId) {
      body.checkpoint_id = checkpointId;
    }
    const op = await this._run(
      'sessions/resume',
      body,
      trans.__('Resuming %1', path),
      path
    );
    if (op?.outcome === 'succeeded') {
      await this._connect(panel);
      this.dismissErrors(path);
      await this._remindUnsaved(path, op.options.checkpoint_id as string);
    }
    return op;
  }

  checkpoint(panel: NotebookPanel): Promise<IOperation | null> {
    const path = panel.context.path;
    return this._run(
      'sessions/checkpoint',
      { path },
      this.trans.__('Saving the state of %1', path),
      path
    );
  }

  /** Work on in a new, empty kernel; the saved state stays for a later %restore. */
  async startEmpty(panel: NotebookPanel): Promise<void> {
    const context = panel.sessionContext;
    const shouldSelect = await startKernelNow(context);
    if (shouldSelect && this._sessionDialogs) {
      await this._sessionDialogs.selectKernel(context);
    }
    this.dismissErrors(panel.context.path);
  }

  /** Postpone an announced auto-pause by one idle threshold, and say until when. */
  async keepRunning(path: string): Promise<void> {
    const trans = this.trans;
    try {
      const answer = await postAPI<{ idle_clock_started: number }>(
        'sessions/postpone',
        this._model.serverSettings,
        { path }
      );
      await this._model.refresh();
      const threshold = this.session(path)?.policy?.idle_threshold;
      const message = threshold
        ? trans.__(
            'Auto-pause of %1 postponed until %2.',
            path,
            formatTime(answer.idle_clock_started + threshold)
          )
        : trans.__('Auto-pause of %1 postponed.', path);
      Notification.success(message, { autoClose: 5000 });
    } catch (error) {
      Notification.error(
        trans.__(
          'Could not postpone the auto-pause: %1',
          (error as Error).message
        )
      );
    }
  }

  /**
   * Ask which saved state to resume from, newest first, each verified;
   * corrupt ones are shown as such and cannot be picked.  Null when
   * cancelled or when the user started an empty kernel instead.
   */
  async pickCheckpoint(panel: NotebookPanel): Promise<string | null> {
    const trans = this.trans;
    const path = panel.context.path;
    const { checkpoints } = await requestAPI<{
      checkpoints: ICheckpointSummary[];
    }>(
      `checkpoints?path=${encodeURIComponent(path)}&verify=1`,
      this._model.serverSettings,
      {},
      false
    );
    const body = document.createElement('div');
    body.className = 'jp-PauseCheckpointDialog';
    const text = document.createElement('p');
    const error = this.session(path)?.error ?? '';
    text.textContent = trans.__(
      'The last resume failed: %1',
      shortReason(error.replace(/^resume failed: /, ''))
    );
    const details = document.createElement('details');
    const summary = document.createElement('summary');
    summary.textContent = trans.__('Show details');
    const full = document.createElement('pre');
    full.textContent = error;
    details.append(summary, full);
    const label = document.createElement('label');
    label.textContent = trans.__('Resume from saved state:');
    const select = document.createElement('select');
    select.className = 'jp-PauseCheckpointPicker';
    select.id = `jp-PauseCheckpointPicker-${Date.now()}`;
    label.htmlFor = select.id;
    select.setAttribute('aria-label', trans.__('Saved state to resume from'));
    let usable = 0;
    for (const c of checkpoints) {
      const option = document.createElement('option');
      option.value = c.id;
      const objects = trans._n(
        '%1 object',
        '%1 objects',
        (c.objects ?? []).length
      );
      option.textContent = c.problem
        ? trans.__('%1 · corrupt: %2', c.id, shortReason(c.problem, 60))
        : `${c.id} · ${formatBytes(c.bytes)} · ${objects}`;
      option.disabled = !!c.problem;
      if (!c.problem && usable++ === 0) {
        option.selected = true;
      }
      select.appendChild(option);
    }
    body.append(text, details, label, select);
    const empty = Dialog.warnButton({
      label: trans.__('Start with an empty kernel')
    });
    const buttons = [Dialog.cancelButton(), empty];
    if (usable > 0) {
      buttons.push(Dialog.okButton({ label: trans.__('Resume') }));
    }
    const answer = await showDialog({
      title: trans.__('Resume from which saved state?'),
      body: new Widget({ node: body }),
      buttons
    });
    if (answer.button.label === empty.label) {
      await this.startEmpty(panel);
      return null;
    }
    return answer.button.accept ? select.value : null;
  }

  /** Withdraw error notices about a notebook that has recovered. */
  dismissErrors(path: string): void {
    for (const id of this._errorNotices.get(path) ?? []) {
      Notification.dismiss(id);
    }
    this._errorNotices.delete(path);
  }

  /** An error notice that is withdrawn once the notebook recovers. */
  notifyError(
    path: string,
    message: string,
    details: string,
    replacing?: string
  ): void {
    const trans = this.trans;
    const options = {
      autoClose: false as const,
      actions: [
        {
          label: trans.__('Show details'),
          callback: (event: MouseEvent) => {
            event.preventDefault(); // keep the notice open
            showDetails(message, details, trans);
          }
        }
      ]
    };
    let id = replacing;
    if (
      id === undefined ||
      !Notification.update({ id, message, type: 'error', ...options })
    ) {
      id = Notification.error(message, options);
    }
    this._errorNotices.set(path, [...(this._errorNotices.get(path) ?? []), id]);
  }

  /** After a resume, say which names did not come back (they could not be saved). */
  private async _remindUnsaved(
    path: string,
    checkpointId?: string
  ): Promise<void> {
    const trans = this.trans;
    let names: string[] = [];
    let reasons: Record<string, string> = {};
    try {
      const { checkpoints } = await requestAPI<{
        checkpoints: ICheckpointSummary[];
      }>(
        `checkpoints?path=${encodeURIComponent(path)}`,
        this._model.serverSettings,
        {},
        false
      );
      const id = checkpointId ?? this.session(path)?.last_checkpoint?.id;
      const used = checkpoints.find(c => c.id === id) ?? checkpoints[0];
      reasons = used?.skipped ?? {};
      names = unsavedNames(reasons);
    } catch {
      return; // the resume succeeded; a reminder is not worth an error
    }
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
      actions: [
        {
          label: trans.__('Show details'),
          callback: event => {
            event.preventDefault();
            showDetails(trans.__('Not restored'), details, trans);
          }
        }
      ]
    });
  }

  /**
   * After a resume, connect the notebook to its one Jupyter session, which the
   * resume made (or whose kernel it restored into): never a second session.
   */
  private async _connect(panel: NotebookPanel): Promise<void> {
    await joinPathSession(panel.sessionContext);
  }

  private async _run(
    endPoint: string,
    body: Record<string, unknown>,
    verb: string,
    path: string
  ): Promise<IOperation | null> {
    const trans = this.trans;
    const settings = this._model.serverSettings;
    let op: IOperation;
    try {
      op = (await postAPI<{ operation: IOperation }>(endPoint, settings, body))
        .operation;
    } catch (error) {
      const reason = (error as Error).message;
      this.notifyError(
        path,
        trans.__('%1 failed: %2', verb, shortReason(reason)),
        reason
      );
      return null;
    }
    this.ownOperations.add(op.id);
    await this._model.refresh();
    const id = Notification.emit(trans.__('%1…', verb), 'in-progress', {
      autoClose: false
    });
    const deadline = Date.now() + FOLLOW_DEADLINE_MS;
    while (op.outcome === 'running') {
      if (Date.now() > deadline) {
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
        Notification.update({ id, message: trans.__('%1: %2', verb, op.step) });
      }
    }
    await this._model.refresh();
    const notes = op.messages.join('\n');
    if (op.outcome === 'succeeded') {
      Notification.update({
        id,
        type: 'success',
        message: trans.__('%1: done.', verb),
        autoClose: notes ? false : 5000,
        actions: notes
          ? [
              {
                label: trans.__('Show details'),
                callback: event => {
                  event.preventDefault();
                  showDetails(verb, notes, trans);
                }
              }
            ]
          : []
      });
    } else {
      // the same notice turns into the error (a second one would leave a spinner behind)
      this.notifyError(
        path,
        trans.__('%1 failed: %2', verb, shortReason(op.error)),
        [op.error, notes].filter(Boolean).join('\n\n'),
        id
      );
    }
    return op;
  }

  private _errorNotices = new Map<string, string[]>();
}

/** Tomorrow at 08:45, local time: when most people want their notebook back. */
export function defaultResumeTime(now = new Date()): Date {
  const at = new Date(now);
  at.setDate(at.getDate() + 1);
  at.setHours(8, 45, 0, 0);
  return at;
}

/** A Date as a `datetime-local` input's value (local time, minutes). */
export function localInputValue(date: Date): string {
  const pad = (n: number) => String(n).padStart(2, '0');
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}`
  );
}
