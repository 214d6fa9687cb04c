/**
 * The questions an action asks before it starts, and the "Show details"
 * dialog behind every short message.  Each dialog only asks: it neither
 * calls the server nor acts on the answer (`actions.ts` does both).
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { ICheckpointSummary } from './api';
import { formatBytes, shortReason } from './labels';

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

/**
 * "Pause until…": when to resume by itself (tomorrow 08:45 by default), as
 * the `datetime-local` input's value; null when cancelled.
 */
export async function askResumeTime(
  trans: TranslationBundle
): Promise<string | null> {
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
  return answer.button.accept ? input.value : null;
}

/** The notebook runs a cell: interrupt it and pause?  True to go on. */
export async function confirmInterrupt(
  trans: TranslationBundle
): Promise<boolean> {
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
  return answer.button.accept;
}

/**
 * Before a pause by hand: list every variable the pause would not save
 * (name → why), and let the user decide.  True to go on.
 */
export async function confirmUnsaveable(
  unsaveable: Record<string, string>,
  trans: TranslationBundle
): Promise<boolean> {
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
  const full = names.map(n => `${n}: ${unsaveable[n]}`).join('\n');
  body.append(intro, list, detailsElement(full, trans));
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

/** The answer to "Resume from which saved state?" (null: cancelled). */
export type CheckpointChoice = { checkpoint: string } | 'start-empty' | null;

/**
 * After a failed resume (`error`, the server's reason): which saved state to
 * resume from, newest first; corrupt ones (`problem`) are shown as such and
 * cannot be picked.  Starting an empty kernel instead is always offered.
 */
export async function chooseCheckpoint(
  checkpoints: ICheckpointSummary[],
  error: string,
  trans: TranslationBundle
): Promise<CheckpointChoice> {
  const body = document.createElement('div');
  body.className = 'jp-PauseCheckpointDialog';
  const text = document.createElement('p');
  text.textContent = trans.__(
    'The last resume failed: %1',
    shortReason(error.replace(/^resume failed: /, ''))
  );
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
  body.append(text, detailsElement(error, trans), label, select);
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
    return 'start-empty';
  }
  return answer.button.accept ? { checkpoint: select.value } : null;
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

/** The full text, folded under "Show details" inside a dialog's body. */
function detailsElement(
  full: string,
  trans: TranslationBundle
): HTMLDetailsElement {
  const details = document.createElement('details');
  const summary = document.createElement('summary');
  summary.textContent = trans.__('Show details');
  const text = document.createElement('pre');
  text.textContent = full;
  details.append(summary, text);
  return details;
}
