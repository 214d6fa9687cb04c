import { PAUSE_STATES, PauseState } from '../api';
import {
  describeProgress,
  describeSession,
  failedOperation,
  formatBytes,
  formatBytesOf,
  formatDuration,
  MODULE_REIMPORTED,
  recovered,
  shortReason,
  stateLabel,
  unsavedNames
} from '../labels';
import { operation, session, trans } from './sessions';

describe('stateLabel', () => {
  const LABELS: Record<PauseState, string> = {
    running: 'Live',
    checkpointing: 'Saving state',
    pausing: 'Pausing',
    paused: 'Paused',
    resuming: 'Resuming',
    'waiting-for-capacity': 'Waiting for capacity',
    restoring: 'Restoring',
    ready: 'Resumed',
    failed: 'Failed',
    hibernating: 'Hibernating GPU',
    hibernated: 'GPU hibernated',
    waking: 'GPU hibernated · waking'
  };

  it.each([...PAUSE_STATES])('names %s in words', state => {
    expect(stateLabel(state, trans)).toBe(LABELS[state]);
  });

  it('gives every state a word of its own', () => {
    const labels = PAUSE_STATES.map(state => stateLabel(state, trans));
    expect(new Set(labels).size).toBe(PAUSE_STATES.length);
  });
});

describe('formatDuration', () => {
  it.each([
    [-5, '0 s'],
    [0, '0 s'],
    [59.9, '59 s'],
    [60, '1 min'],
    [3599, '59 min'],
    [3600, '1 h 0 min'],
    [7500, '2 h 5 min']
  ])('says %p seconds as %p', (seconds, words) => {
    expect(formatDuration(seconds, trans)).toBe(words);
  });
});

describe('sizes', () => {
  it.each([
    [0, '0 B'],
    [999, '999 B'],
    [1000, '1.0 KB'],
    [512e6, '512 MB'],
    [1.9e9, '1.9 GB'],
    [12.4e12, '12 TB'],
    [5e15, '5000 TB']
  ])('formatBytes(%p) is %p, in decimal units', (bytes, words) => {
    expect(formatBytes(bytes)).toBe(words);
  });

  it('formatBytesOf counts both in the unit of the total', () => {
    expect(formatBytesOf(3.1e9, 8e9)).toBe('3.1 / 8.0 GB');
    expect(formatBytesOf(2e5, 3e6)).toBe('0.2 / 3.0 MB');
    expect(formatBytesOf(500, 900)).toBe('500 / 900 B');
  });

  it('describeProgress names the phase', () => {
    const progress = { done: 3.1e9, total: 8e9 };
    expect(describeProgress({ phase: 'writing', ...progress }, trans)).toBe(
      'writing 3.1 / 8.0 GB'
    );
    expect(describeProgress({ phase: 'uploading', ...progress }, trans)).toBe(
      'uploading 3.1 / 8.0 GB'
    );
    expect(describeProgress({ phase: 'downloading', ...progress }, trans)).toBe(
      'downloading 3.1 / 8.0 GB'
    );
    expect(describeProgress({ phase: 'reading', ...progress }, trans)).toBe(
      'reading 3.1 / 8.0 GB'
    );
    // a phase a newer server adds still reads
    const later = { phase: 'zipping', done: 1, total: 2 } as any;
    expect(describeProgress(later, trans)).toBe('zipping 1 / 2 B');
  });
});

describe('shortReason', () => {
  it('keeps the first sentence or line', () => {
    expect(shortReason('Disk full. Freed nothing.')).toBe('Disk full.');
    expect(shortReason('first line\nsecond line')).toBe('first line');
    expect(shortReason('version 1.2 failed')).toBe('version 1.2 failed');
  });

  it('cuts a long sentence at a word, with an ellipsis', () => {
    expect(shortReason('alpha beta gamma delta', 12)).toBe('alpha beta…');
    expect(shortReason('abcdefghijklmnop', 5)).toBe('abcde…');
  });
});

describe('unsavedNames', () => {
  it('names the variables a person should hear of, sorted', () => {
    expect(
      unsavedNames({
        zeta: 'a generator',
        alpha: 'an open file',
        '<cell 3>': 'internal',
        numpy: MODULE_REIMPORTED,
        get_ipython: 'IPython machinery'
      })
    ).toEqual(['alpha', 'zeta']);
    expect(unsavedNames()).toEqual([]);
  });
});

describe('describeSession', () => {
  const now = 10_000;

  it('says how long a notebook has been in a state', () => {
    const paused = session('paused', { since: now - 12 * 60 });
    expect(describeSession(paused, trans, null, now)).toBe(
      'Pause: Paused · 12 min'
    );
  });

  it('says a running notebook only lives, with no clock', () => {
    const live = session('running', { since: now - 600 });
    expect(describeSession(live, trans, null, now)).toBe('Pause: Live');
    const ready = session('ready', { since: now - 600 });
    expect(describeSession(ready, trans, null, now)).toBe('Pause: Resumed');
  });

  it('counts down to an auto-pause', () => {
    const live = session('running');
    expect(describeSession(live, trans, 240, now)).toBe(
      'Pause: Live · auto-pause in 4 min'
    );
  });

  it('shows the progress of a running call', () => {
    const saving = session('checkpointing', {
      operation: operation('checkpoint', 'running', {
        progress: { phase: 'uploading', done: 3.1e9, total: 8e9 }
      })
    });
    expect(describeSession(saving, trans, null, now)).toBe(
      'Pause: Saving state · uploading 3.1 / 8.0 GB'
    );
  });

  it('keeps a failed pause in view until something succeeds', () => {
    const failed = session('running', {
      error: 'disk full',
      operation: operation('pause', 'failed')
    });
    expect(describeSession(failed, trans, null, now)).toBe(
      'Pause: Live · pause failed'
    );
    // a countdown outranks it
    expect(describeSession(failed, trans, 60, now)).toBe(
      'Pause: Live · auto-pause in 1 min'
    );
  });

  it('tells of saved state the kernel lost', () => {
    const died = session('running', {
      saved_state_unrestored: {
        checkpoint: 'c1',
        at: now,
        lost: 'the kernel died',
        cause: 'kernel-died'
      }
    });
    expect(describeSession(died, trans, null, now)).toMatch(
      /^Pause: Kernel died · saved state from .+/
    );
    died.saved_state_unrestored!.cause = 'server-stopped';
    expect(describeSession(died, trans, null, now)).toMatch(
      /^Pause: Server stopped · saved state from .+/
    );
  });

  it('says how much a hibernated kernel holds in host memory', () => {
    const hibernated = session('hibernated', {
      since: now - 300,
      hibernation: { bytes: 1.9e9, since: now - 300 }
    });
    expect(describeSession(hibernated, trans, null, now)).toBe(
      'Pause: GPU hibernated · 1.9 GB in host memory · 5 min'
    );
    const waking = session('waking', { since: now - 300 });
    expect(describeSession(waking, trans, null, now)).toBe(
      'Pause: GPU hibernated · waking'
    );
  });

  it('says when a paused notebook resumes by itself', () => {
    const scheduled = session('paused', {
      since: now - 60,
      schedule: {
        at: now + 3600,
        kind: 'scheduled',
        by: 'me',
        set_at: now,
        confidence: null
      }
    });
    expect(describeSession(scheduled, trans, null, now)).toMatch(
      /^Pause: Paused · resumes at .+/
    );
  });
});

describe('failedOperation and recovered', () => {
  it('names the failed operation of a notebook that runs on', () => {
    const failed = (kind: 'pause' | 'checkpoint' | 'resume', options = {}) =>
      session('running', {
        error: 'boom',
        operation: operation(kind, 'failed', { options })
      });
    expect(failedOperation(failed('pause'), trans)).toBe('pause failed');
    expect(failedOperation(failed('checkpoint'), trans)).toBe(
      'saving state failed'
    );
    expect(
      failedOperation(failed('checkpoint', { autosave: true }), trans)
    ).toBe('autosave failed');
    expect(failedOperation(failed('resume'), trans)).toBe('resume failed');
  });

  it('says nothing once the error is gone or the notebook is not live', () => {
    const gone = session('running', {
      operation: operation('pause', 'failed')
    });
    expect(failedOperation(gone, trans)).toBeNull();
    const paused = session('paused', {
      error: 'boom',
      operation: operation('pause', 'failed')
    });
    expect(failedOperation(paused, trans)).toBeNull();
  });

  it('names a failed upload of a state saved here, until it is over', () => {
    const staging = (error: string | null) => ({
      seconds: 60,
      bytes: 1024,
      checkpoint: null,
      uploading: false,
      error
    });
    const ok = operation('checkpoint', 'succeeded', {
      options: { autosave: true }
    });
    const stuck = session('running', {
      operation: ok,
      staging: staging('RemoteStoreError: no bucket')
    });
    expect(failedOperation(stuck, trans)).toBe('upload failed');
    expect(recovered(stuck)).toBe(false);
    // an operation's own failure is named before it
    const both = {
      ...stuck,
      error: 'boom',
      operation: operation('pause', 'failed')
    };
    expect(failedOperation(both, trans)).toBe('pause failed');
    const over = session('running', { operation: ok, staging: staging(null) });
    expect(failedOperation(over, trans)).toBeNull();
    expect(recovered(over)).toBe(true);
  });

  it('recovered: the last operation succeeded and no error stands', () => {
    const ok = operation('checkpoint', 'succeeded');
    expect(recovered(session('running', { operation: ok }))).toBe(true);
    expect(recovered(session('running', { operation: ok, error: 'x' }))).toBe(
      false
    );
    const failed = operation('checkpoint', 'failed');
    expect(recovered(session('running', { operation: failed }))).toBe(false);
    expect(recovered(session('running'))).toBe(false);
  });
});
