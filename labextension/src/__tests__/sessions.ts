/**
 * Sessions and statuses as `GET status` answers them, for the tests.
 */
import { nullTranslator } from '@jupyterlab/translation';

import { IOperation, ISessionStatus, IStatus, PauseState } from '../api';

/** English, as a page with no language pack shows it. */
export const trans = nullTranslator.load('jupyter-pause');

export function session(
  state: PauseState,
  extra: Partial<ISessionStatus> = {}
): ISessionStatus {
  return {
    path: `${state}.ipynb`,
    kernel_id: null,
    execution_state: null,
    last_activity: null,
    state,
    since: 0,
    operation: null,
    last_checkpoint: null,
    restored_from: null,
    live_state: 'unknown',
    error: null,
    can: { pause: false, resume: false, checkpoint: false },
    ...extra
  };
}

export function operation(
  kind: IOperation['kind'],
  outcome: IOperation['outcome'],
  extra: Partial<IOperation> = {}
): IOperation {
  return {
    id: 'op-1',
    kind,
    path: 'a.ipynb',
    started: 0,
    finished: outcome === 'running' ? null : 1,
    outcome,
    error: '',
    step: '',
    messages: [],
    options: {},
    ...extra
  };
}

export function status(sessions: ISessionStatus[], backend = 'local'): IStatus {
  return {
    version: '0.1.0',
    backend: { name: backend, scope: 'server' },
    sessions
  };
}
