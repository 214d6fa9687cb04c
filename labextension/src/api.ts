/**
 * The jupyter-pause REST API as the frontend sees it.
 *
 * One place builds URLs and turns server errors into messages a user can act
 * on; everything else imports the types and `requestAPI` from here.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/**
 * Every state of the pause lifecycle, in the order of `State` in
 * jupyter_pause/lifecycle.py (tests/test_labextension_states.py checks that
 * the two lists are equal).
 */
export const PAUSE_STATES = [
  'running',
  'checkpointing',
  'pausing',
  'paused',
  'resuming',
  'waiting-for-capacity',
  'restoring',
  'ready',
  'failed',
  'hibernating',
  'hibernated',
  'waking'
] as const;

export type PauseState = (typeof PAUSE_STATES)[number];

/**
 * States in which the notebook has no kernel of its own until it resumes: the
 * states from which a resume starts (Python's `OPERATION_STATES['resume']`).
 */
export const RESUMABLE_STATES: readonly PauseState[] = ['paused', 'failed'];

/**
 * States in which an operation (pause, checkpoint, resume) runs: the notebook's
 * kernel is the server's to start, restore or stop, and a view waits for the
 * outcome.  Python's `BUSY_STATES` (tests/test_labextension_states.py).
 */
export const BUSY_STATES: readonly PauseState[] = [
  'checkpointing',
  'pausing',
  'resuming',
  'waiting-for-capacity',
  'restoring',
  'hibernating',
  'waking'
];

export interface IOperation {
  id: string;
  kind: 'pause' | 'resume' | 'checkpoint' | 'hibernate' | 'wake';
  path: string;
  started: number;
  finished: number | null;
  outcome: 'running' | 'succeeded' | 'failed';
  error: string;
  step: string;
  messages: string[];
  options: Record<string, unknown>;
  /** How far the kernel call running now has got; null between calls. */
  progress?: ICallProgress | null;
  /**
   * How it went, step by step (`GET operations/{id}` only: the rows of `GET
   * status` leave it out).
   */
  timeline?: ITimelineStep[];
}

/** One step of an operation's timeline: `at` seconds after its request. */
export interface ITimelineStep {
  step: string;
  at: number;
  /** Where the step needs one: "a spare, started before". */
  note?: string;
}

/** Python's `CallProgress`: "uploading 3.1 / 8.0 GB". */
export interface ICallProgress {
  phase: 'writing' | 'uploading' | 'downloading' | 'reading';
  /** Bytes of the phase done, of the `total` it knows of so far. */
  done: number;
  total: number;
}

export interface ICheckpointSummary {
  id: string;
  /** ISO 8601 in listings; seconds since the epoch in `last_checkpoint`. */
  time: string | number;
  bytes: number;
  /** A background autosave (the class's `autosave_every`), in `last_checkpoint`. */
  autosave?: boolean;
  objects?: string[];
  skipped?: Record<string, string>;
  trusted?: boolean;
  /** Listings asked with `verify=1`: null when every hash matched, else why not. */
  problem?: string | null;
  /**
   * Signed with a key this server lacks (another server's or user's): not damaged,
   * and never offered for deletion; `key_id` is the fingerprint of the key it needs.
   */
  foreign?: boolean;
  key_id?: string;
}

/** The idle policy that applies to a notebook. */
export interface IPolicy {
  workload_class: string;
  /** Seconds idle before the policy acts; null: never. */
  idle_threshold: number | null;
  action: 'pause' | 'checkpoint' | 'none';
  warn_before: number;
  /** Seconds of use after which the notebook is autosaved; null: never. */
  autosave_every: number | null;
}

export interface IAutoPause {
  /** Seconds until the idle policy pauses this notebook. */
  seconds_left: number;
  workload_class: string;
  action: 'pause' | 'checkpoint';
  /** The user should be warned now (the policy's warning period began). */
  warning: boolean;
}

/**
 * With a bucket as the checkpoint root: what it lacks of the notebook's state
 * (server/staging.py): how old its newest state is while cells ran since, and
 * the bytes written here that are not up yet.
 */
export interface IStaging {
  seconds: number;
  bytes: number;
  checkpoint: { id: string; time: number | null } | null;
  uploading: boolean;
  error: string | null;
}

/** What the last save of a stopping server left in the bucket, while it is news. */
export interface IFinalSave {
  outcome: 'newest' | 'older' | 'none';
  checkpoint: string | null;
  at: number | null;
  newest: string | null;
  why: string | null;
  stopped: number;
}

export interface ISessionStatus {
  path: string;
  kernel_id: string | null;
  execution_state: string | null;
  last_activity: string | null;
  state: PauseState;
  since: number;
  operation: IOperation | null;
  last_checkpoint: ICheckpointSummary | null;
  /** When the state was last saved (pause, checkpoint, autosave); epoch seconds. */
  last_saved?: number | null;
  /** With a bucket: the staging lag (null without a bucket). */
  staging?: IStaging | null;
  /** With a bucket: what a stopping server's last save left there. */
  final_save?: IFinalSave | null;
  restored_from: string | null;
  live_state: 'restored' | 'fresh' | 'unknown';
  error: string | null;
  workload_class?: string | null;
  auto_pause?: IAutoPause | null;
  /** Who paused it: the idle policy, `%pause`, or a person (button, CLI). */
  paused_by?: 'auto' | 'magic' | 'user' | 'server-shutdown' | null;
  policy?: IPolicy | null;
  /** A planned resume while paused: "paused · resumes at 08:45". */
  schedule?: IResumeSchedule | null;
  /** What may start now, as the server decides it (the lifecycle's table). */
  can: IAllowed;
  /**
   * A saved state the notebook's kernel does not hold: the kernel died (Jupyter
   * restarted it empty) or the server stopped under it. Resume restores it.
   */
  saved_state_unrestored?: ISavedStateUnrestored | null;
  /** Set while the kernel is hibernated in place: its GPU memory is in host memory. */
  hibernation?: IHibernation | null;
}

/** A kernel hibernated in place (`hibernation` in `GET status`). */
export interface IHibernation {
  /** GPU memory the kernel's process held, now in host memory. */
  bytes: number;
  /** When it was hibernated (epoch seconds). */
  since: number;
}

/** The operations a notebook allows now (`can` in `GET status`). */
export interface IAllowed {
  pause: boolean;
  resume: boolean;
  checkpoint: boolean;
  /** Move the kernel's GPU memory to host memory (the server has a driver that can). */
  hibernate?: boolean;
  /** Bring a hibernated kernel's GPU memory back (a cell does it by itself too). */
  wake?: boolean;
}

export interface ISavedStateUnrestored {
  /** The checkpoint resume restores. */
  checkpoint: string;
  /** When it was saved, in seconds since the epoch. */
  at: number;
  /** How the kernel went: "the kernel died", "the server stopped". */
  lost: string;
  /** The same, for a label. */
  cause: 'kernel-died' | 'server-stopped';
}

/** When a paused notebook resumes by itself (`PUT sessions/schedule`). */
export interface IResumeSchedule {
  at: number;
  /** `scheduled`: a person asked; `predicted`: ahead of the user's predicted return. */
  kind: 'scheduled' | 'predicted';
  by: string;
  set_at: number;
  confidence: number | null;
}

export interface IStatus {
  version: string;
  backend: { name: string; scope: string; [key: string]: any };
  sessions: ISessionStatus[];
}

/** Raised for any non-2xx answer, with the server's own message. */
export class PauseAPIError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

/**
 * Call `{base_url}jupyter-pause/api/{endPoint}`.
 *
 * `track` false adds `no_track_activity=1`, so that polling never counts as
 * user activity (the idle policy and the server's culler rely on it).
 */
export async function requestAPI<T>(
  endPoint: string,
  settings: ServerConnection.ISettings,
  init: RequestInit = {},
  track = true
): Promise<T> {
  let url = URLExt.join(settings.baseUrl, 'jupyter-pause', 'api', endPoint);
  if (!track) {
    url += (url.includes('?') ? '&' : '?') + 'no_track_activity=1';
  }
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      // keep the text; it ends up in the error message below
    }
  }
  if (!response.ok) {
    const message =
      (data && (data.message || data.reason)) || response.statusText;
    throw new PauseAPIError(message, response.status);
  }
  return data as T;
}

/** POST a JSON body. */
export function postAPI<T>(
  endPoint: string,
  settings: ServerConnection.ISettings,
  body: unknown
): Promise<T> {
  return requestAPI<T>(endPoint, settings, {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

/** A notebook's saved states, newest first; `verify` checks each one's hashes. */
export async function listCheckpoints(
  path: string,
  settings: ServerConnection.ISettings,
  verify = false
): Promise<ICheckpointSummary[]> {
  const query = `path=${encodeURIComponent(path)}${verify ? '&verify=1' : ''}`;
  const answer = await requestAPI<{ checkpoints: ICheckpointSummary[] }>(
    `checkpoints?${query}`,
    settings,
    {},
    false
  );
  return answer.checkpoints;
}

/**
 * Ask the server for a spare kernel for a paused notebook whose resume offer is
 * showing, so that the resume does not wait for a kernel to start and import
 * torch. The spare is not attached to the notebook (no kernel indicator, nothing
 * counted as allocated); it is adopted by the resume or shut down unused.
 */
export function prewarm(
  path: string,
  settings: ServerConnection.ISettings
): Promise<{ path: string; kernel_id: string }> {
  return postAPI('sessions/prewarm', settings, { path });
}
