/** Human words for each lifecycle state, in one place. */
import { ISessionStatus, PauseState } from './api';

export const STATE_LABELS: Record<PauseState, string> = {
  running: 'Running',
  checkpointing: 'Checkpointing',
  pausing: 'Pausing',
  paused: 'Paused',
  resuming: 'Resuming',
  'waiting-for-capacity': 'Waiting for capacity',
  restoring: 'Restoring',
  ready: 'Ready',
  failed: 'Failed'
};

/** "3 min", "2 h 5 min": how long a session has been in its state. */
export function formatElapsed(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  return `${hours} h ${minutes % 60} min`;
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${value.toFixed(value < 10 && unit > 0 ? 1 : 0)} ${units[unit]}`;
}

/** The status bar text: "Pause: Paused · 12 min". */
export function describeSession(
  session: ISessionStatus,
  now = Date.now() / 1000
): string {
  let text = `Pause: ${STATE_LABELS[session.state] ?? session.state}`;
  if (session.state !== 'running' && session.state !== 'ready') {
    text += ` · ${formatElapsed(now - session.since)}`;
  }
  if (session.auto_pause?.warning && session.state === 'running') {
    text += ` · auto-pause in ${formatElapsed(session.auto_pause.seconds_left)}`;
  }
  return text;
}
