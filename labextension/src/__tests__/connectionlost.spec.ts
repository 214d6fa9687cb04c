import { PAUSE_STATES, PauseState } from '../api';
import { LIVE, PAUSING, selfPause } from '../connectionlost';
import { operation, session, status, trans } from './sessions';

/** The states of a pause under way: the server stops at its end. */
const UNDER_WAY: PauseState[] = ['checkpointing', 'pausing'];

/**
 * The notebooks a pause of the whole server stops, to resume once it is back: the
 * live ones, hibernated ones included (the stop pauses them), and the pause's own.
 * One paused, failed or coming back has no kernel of its own to stop.
 */
const STOPPED_WITH_THE_SERVER: PauseState[] = [
  'running',
  'ready',
  'checkpointing',
  'pausing',
  'hibernating',
  'hibernated',
  'waking'
];

describe('the state lists', () => {
  it('PAUSING holds the states of a pause under way', () => {
    expect([...PAUSING].sort()).toEqual([...UNDER_WAY].sort());
  });

  it('LIVE holds the states with a kernel the server stop takes', () => {
    expect([...LIVE].sort()).toEqual([...STOPPED_WITH_THE_SERVER].sort());
  });

  it('name only states the server knows', () => {
    for (const state of [...PAUSING, ...LIVE]) {
      expect(PAUSE_STATES).toContain(state);
    }
  });
});

describe('selfPause', () => {
  const pausing = (state: PauseState, options = {}) =>
    session(state, {
      path: 'train.ipynb',
      operation: operation('pause', 'running', { options }),
      policy: {
        workload_class: 'training',
        idle_threshold: 7200,
        action: 'pause',
        warn_before: 300,
        autosave_every: null
      }
    });

  it.each([...PAUSE_STATES])(
    'a hub server whose pause is in state %s is pausing itself only under way',
    state => {
      const found = selfPause(
        status([pausing(state)], 'jupyterhub'),
        null,
        trans
      );
      expect(found !== null).toBe(UNDER_WAY.includes(state));
    }
  );

  it.each([...PAUSE_STATES])(
    'a notebook in state %s is among those the pause stops only if live',
    state => {
      const other = session(state, { path: 'other.ipynb' });
      const found = selfPause(
        status([pausing('pausing'), other], 'jupyterhub'),
        null,
        trans
      );
      expect(found?.paths.includes('other.ipynb')).toBe(
        STOPPED_WITH_THE_SERVER.includes(state)
      );
      expect(found?.paths).toContain('train.ipynb');
    }
  );

  it('says why, from the pause under way', () => {
    const hub = (options: Record<string, unknown>) =>
      selfPause(
        status([pausing('pausing', options)], 'jupyterhub'),
        null,
        trans
      )?.why;
    expect(hub({ auto: true })).toBe('idle 2 h 0 min');
    expect(hub({ after_cell: true })).toBe('by %pause');
    expect(hub({})).toBe('paused on request');
  });

  it('believes the events where the last status was too early', () => {
    const paused = session('paused', { path: 'small.ipynb' });
    const found = selfPause(
      status([paused, session('running', { path: 'b.ipynb' })], 'jupyterhub'),
      { path: 'small.ipynb', auto: true },
      trans
    );
    expect(found?.why).toBe('idle');
    expect(found?.paths.sort()).toEqual(['b.ipynb', 'small.ipynb']);
  });

  it('leaves a lost connection of any other server to JupyterLab', () => {
    expect(selfPause(status([pausing('pausing')], 'local'), null, trans)).toBe(
      null
    );
    expect(selfPause(null, { path: 'a.ipynb', auto: false }, trans)).toBeNull();
    expect(
      selfPause(status([session('running')], 'jupyterhub'), null, trans)
    ).toBeNull();
  });
});
