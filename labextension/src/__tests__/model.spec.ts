import { ServerConnection } from '@jupyterlab/services';

import { IStatus } from '../api';
import { PauseStatusModel } from '../model';
import { session, status } from './sessions';

/**
 * A server that answers `GET status` with what the test says, recording what it
 * was asked: the model's HTTP, and nothing below it, is the test's.
 */
class FakeServer {
  answer: IStatus | { code: number; message: string } = status([]);
  urls: string[] = [];

  readonly settings = ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/',
    fetch: (input: RequestInfo | URL) => {
      this.urls.push(input instanceof Request ? input.url : String(input));
      const answer = this.answer;
      if ('code' in answer) {
        return Promise.resolve(
          new Response(JSON.stringify({ message: answer.message }), {
            status: answer.code
          })
        );
      }
      return Promise.resolve(new Response(JSON.stringify(answer)));
    }
  });
}

describe('PauseStatusModel', () => {
  let server: FakeServer;
  let model: PauseStatusModel;
  let changes: number;

  beforeEach(() => {
    server = new FakeServer();
    // a long interval: the tests refresh by hand, the poll never ticks in between
    model = new PauseStatusModel(server.settings, 60 * 60 * 1000);
    changes = 0;
    model.changed.connect(() => changes++);
  });

  afterEach(() => {
    model.dispose();
  });

  it('asks for the status without counting as activity', async () => {
    await model.fetchSession('a.ipynb');
    const url = new URL(server.urls[server.urls.length - 1]);
    expect(url.pathname).toBe('/jupyter-pause/api/status');
    expect(url.searchParams.get('no_track_activity')).toBe('1');
  });

  it('finds a notebook by its path in the latest answer', async () => {
    const paused = session('paused', { path: 'train.ipynb' });
    server.answer = status([session('running'), paused]);
    expect(await model.fetchSession('train.ipynb')).toEqual(paused);
    expect(model.status).toEqual(server.answer);
    expect(model.session('train.ipynb')).toEqual(paused);
    expect(model.session('other.ipynb')).toBeNull();
    expect(model.session(null)).toBeNull();
    expect(model.error).toBeNull();
  });

  it('tells of a change, and of nothing else', async () => {
    server.answer = status([session('running')]);
    await model.fetchSession('running.ipynb');
    const first = changes;
    expect(first).toBeGreaterThanOrEqual(1);
    await model.fetchSession('running.ipynb'); // the same answer
    expect(changes).toBe(first);
    server.answer = status([session('pausing')]);
    await model.fetchSession('pausing.ipynb');
    expect(changes).toBe(first + 1);
  });

  it('keeps the error of a failed refresh until one succeeds', async () => {
    server.answer = status([session('running')]);
    await model.fetchSession('running.ipynb');
    const before = changes;
    server.answer = { code: 503, message: 'the store is unreachable' };
    expect(await model.fetchSession('running.ipynb')).toBeNull();
    expect(model.error).toBe('the store is unreachable');
    expect(changes).toBe(before + 1);
    // the last answer stays: the page shows what it last knew
    expect(model.session('running.ipynb')?.state).toBe('running');
    await model.fetchSession('running.ipynb'); // the same error: no news
    expect(changes).toBe(before + 1);
    server.answer = status([session('running')]);
    await model.fetchSession('running.ipynb');
    expect(model.error).toBeNull();
    expect(changes).toBe(before + 2);
  });

  it('counts down to an announced auto-pause between answers', async () => {
    const auto = {
      seconds_left: 240,
      workload_class: 'default',
      action: 'pause' as const,
      warning: true
    };
    server.answer = status([
      session('running', { auto_pause: auto }),
      session('ready', { auto_pause: { ...auto, warning: false } })
    ]);
    const now = jest.spyOn(Date, 'now').mockReturnValue(1_000_000);
    try {
      await model.fetchSession('running.ipynb');
      expect(model.secondsLeft('running.ipynb')).toBe(240);
      now.mockReturnValue(1_000_000 + 90_000);
      expect(model.secondsLeft('running.ipynb')).toBe(150);
      now.mockReturnValue(1_000_000 + 600_000);
      expect(model.secondsLeft('running.ipynb')).toBe(0);
    } finally {
      now.mockRestore();
    }
    expect(model.secondsLeft('ready.ipynb')).toBeNull(); // not announced yet
    expect(model.secondsLeft('missing.ipynb')).toBeNull();
  });

  it('takes a new interval, keeping the backoff ceiling above it', () => {
    expect(model.interval).toBe(60 * 60 * 1000);
    model.interval = 5000;
    expect(model.interval).toBe(5000);
    model.interval = 10 * 60 * 1000; // above the 60 s ceiling
    expect(model.interval).toBe(10 * 60 * 1000);
  });

  it('stops polling once disposed', () => {
    model.dispose();
    expect(model.isDisposed).toBe(true);
  });
});
