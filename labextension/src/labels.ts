/**
 * Human words for states, sizes, durations and times, in one place, all
 * through the translator.
 */
import { TranslationBundle } from '@jupyterlab/translation';

import { ICallProgress, ISessionStatus, IStaging, PauseState } from './api';

/**
 * The status bar's word for each state.  `running` is "Live", not
 * "Running": beside JupyterLab's kernel indicator ("Idle", "Busy") running
 * would read as "running a cell".
 */
export function stateLabel(
  state: PauseState,
  trans: TranslationBundle
): string {
  switch (state) {
    case 'running':
      return trans.__('Live');
    case 'checkpointing':
      return trans.__('Saving state');
    case 'pausing':
      return trans.__('Pausing');
    case 'paused':
      return trans.__('Paused');
    case 'resuming':
      return trans.__('Resuming');
    case 'waiting-for-capacity':
      return trans.__('Waiting for capacity');
    case 'restoring':
      return trans.__('Restoring');
    case 'ready':
      return trans.__('Resumed');
    case 'failed':
      return trans.__('Failed');
    case 'hibernating':
      return trans.__('Hibernating GPU');
    case 'hibernated':
      return trans.__('GPU hibernated');
    case 'waking':
      return trans.__('GPU hibernated · waking');
  }
  return state;
}

/** "45 s", "3 min", "2 h 5 min". */
export function formatDuration(
  seconds: number,
  trans: TranslationBundle
): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return trans.__('%1 s', s);
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return trans.__('%1 min', minutes);
  }
  const hours = Math.floor(minutes / 60);
  return trans.__('%1 h %2 min', hours, minutes % 60);
}

const SIZE_UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/** Decimal units, as the server's reports use: "1.9 GB", "512 MB". */
export function formatBytes(bytes: number): string {
  const units = SIZE_UNITS;
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${value.toFixed(value < 10 && unit > 0 ? 1 : 0)} ${units[unit]}`;
}

/** How far a transfer is, in the unit of its total: "3.1 / 8.0 GB". */
export function formatBytesOf(done: number, total: number): string {
  const units = SIZE_UNITS;
  let scale = 1;
  let unit = 0;
  while (total / scale >= 1000 && unit < units.length - 1) {
    scale *= 1000;
    unit++;
  }
  const digits = unit > 0 ? 1 : 0;
  return `${(done / scale).toFixed(digits)} / ${(total / scale).toFixed(digits)} ${units[unit]}`;
}

/** What a running kernel call says of itself: "uploading 3.1 / 8.0 GB". */
export function describeProgress(
  progress: ICallProgress,
  trans: TranslationBundle
): string {
  const amount = formatBytesOf(progress.done, progress.total);
  switch (progress.phase) {
    case 'writing':
      return trans.__('writing %1', amount);
    case 'uploading':
      return trans.__('uploading %1', amount);
    case 'downloading':
      return trans.__('downloading %1', amount);
    case 'reading':
      return trans.__('reading %1', amount);
  }
  return `${progress.phase} ${amount}`;
}

/**
 * The staging lag in a line: "up to date (12:31)", "3 min behind, 120 MB to
 * upload (uploading)", "nothing yet", or why the last upload failed.
 */
export function describeStaging(
  staging: IStaging,
  trans: TranslationBundle
): string {
  const parts: string[] = [];
  if (!staging.checkpoint) {
    parts.push(trans.__('nothing yet'));
  } else if (staging.seconds > 0 || staging.bytes > 0) {
    parts.push(
      trans.__('%1 behind', formatDuration(Math.max(1, staging.seconds), trans))
    );
  } else {
    parts.push(
      staging.checkpoint.time
        ? trans.__('up to date (%1)', formatTime(staging.checkpoint.time))
        : trans.__('up to date')
    );
  }
  if (staging.bytes > 0) {
    parts.push(trans.__('%1 to upload', formatBytes(staging.bytes)));
  }
  let text = parts.join(', ');
  if (staging.uploading) {
    text += ' ' + trans.__('(uploading)');
  }
  if (staging.error) {
    text +=
      '; ' + trans.__('last upload failed: %1', shortReason(staging.error));
  }
  return text;
}

/** "12:31" today, else the date too. */
export function formatTime(epochSeconds: number): string {
  const date = new Date(epochSeconds * 1000);
  const sameDay = date.toDateString() === new Date().toDateString();
  const time = date.toLocaleTimeString([], {
    hour: '2-digit',
    minute: '2-digit'
  });
  return sameDay ? time : `${date.toLocaleDateString()} ${time}`;
}

/** The first sentence of a long error, for places with room for one line. */
export function shortReason(error: string, max = 120): string {
  const first = error.split(/(?<=\.)\s|\n/)[0];
  if (first.length <= max) {
    return first;
  }
  const cut = first.lastIndexOf(' ', max);
  return `${first.slice(0, cut > 0 ? cut : max)}…`;
}

/**
 * Why a checkpoint skipped a module a restore imports again by name: no news to a
 * person.  Python's `protocol.MODULE_REIMPORTED` (tests/test_labextension_states.py
 * checks that the two are equal).
 */
export const MODULE_REIMPORTED = 'module (re-imported by name on restore)';

/**
 * What a checkpoint could not save that a person should hear of: their own
 * variables, and modules a restore cannot import again (Python's `user_skipped`).
 */
export function unsavedNames(skipped: Record<string, string> = {}): string[] {
  return Object.keys(skipped)
    .filter(
      name =>
        !name.startsWith('<') &&
        skipped[name] !== MODULE_REIMPORTED &&
        !skipped[name].startsWith('IPython')
    )
    .sort();
}

/**
 * The status bar text: "Pause: Paused · 12 min", "Pause: Live · auto-pause in 4 min",
 * "Pause: Saving state · uploading 3.1 / 8.0 GB".
 */
export function describeSession(
  session: ISessionStatus,
  trans: TranslationBundle,
  secondsLeft: number | null,
  now = Date.now() / 1000
): string {
  const label = stateLabel(session.state, trans);
  const unrestored = session.saved_state_unrestored;
  if (unrestored) {
    return trans.__(
      'Pause: %1 · saved state from %2',
      unrestored.cause === 'server-stopped'
        ? trans.__('Server stopped')
        : trans.__('Kernel died'),
      formatTime(unrestored.at)
    );
  }
  const failed = failedOperation(session, trans);
  if (failed !== null && secondsLeft === null) {
    return trans.__('Pause: %1 · %2', label, failed);
  }
  if (secondsLeft !== null) {
    return trans.__(
      'Pause: %1 · auto-pause in %2',
      label,
      formatDuration(secondsLeft, trans)
    );
  }
  const progress = session.operation?.progress;
  if (progress && session.operation?.outcome === 'running') {
    return trans.__('Pause: %1 · %2', label, describeProgress(progress, trans));
  }
  if (session.state === 'waking') {
    return trans.__('Pause: %1', label); // a cell waits for it: say only that
  }
  if (session.state === 'hibernated' && session.hibernation) {
    return trans.__(
      'Pause: %1 · %2 in host memory · %3',
      label,
      formatBytes(session.hibernation.bytes),
      formatDuration(now - session.since, trans)
    );
  }
  if (session.state === 'paused' && session.schedule) {
    return trans.__(
      'Pause: %1 · resumes at %2',
      label,
      formatTime(session.schedule.at)
    );
  }
  if (session.state !== 'running' && session.state !== 'ready') {
    return trans.__(
      'Pause: %1 · %2',
      label,
      formatDuration(now - session.since, trans)
    );
  }
  return trans.__('Pause: %1', label);
}

/**
 * "pause failed", "autosave failed", "saving state failed": the notebook's last
 * operation failed and nothing has succeeded since (the server keeps its error
 * until then), though it runs on; "upload failed": its state is saved here, and
 * staging it in the bucket failed (until a staging succeeds or the bucket holds
 * a newer state); null otherwise.  A failed resume is the notebook's state
 * itself ("Failed").
 */
export function failedOperation(
  session: ISessionStatus,
  trans: TranslationBundle
): string | null {
  const op = session.operation;
  if (session.state !== 'running' && session.state !== 'ready') {
    return null;
  }
  if (!session.error || op?.outcome !== 'failed') {
    return session.staging?.error ? trans.__('upload failed') : null;
  }
  if (op.kind === 'pause') {
    return trans.__('pause failed');
  }
  if (op.kind === 'checkpoint') {
    return op.options.autosave
      ? trans.__('autosave failed')
      : trans.__('saving state failed');
  }
  return trans.__('%1 failed', op.kind);
}

/**
 * The notebook recovered from what went wrong: its last operation succeeded and
 * the server reports no error, so notices about earlier failures can go.
 */
export function recovered(session: ISessionStatus): boolean {
  return (
    !session.error &&
    !session.staging?.error &&
    session.operation?.outcome === 'succeeded'
  );
}
