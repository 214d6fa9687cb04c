/**
 * The shared client-side model: the latest `GET status`, refreshed by a poll
 * with backoff that stands by while the page is hidden.  Every widget (status
 * bar item, toolbar button, resume banner) reads this one model, so they can
 * never disagree with each other.
 */
import { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { IDisposable } from '@lumino/disposable';

import { IStatus, ISessionStatus, requestAPI } from './api';

export class PauseStatusModel implements IDisposable {
  constructor(
    readonly serverSettings: ServerConnection.ISettings,
    interval = 2000
  ) {
    this._poll = new Poll({
      auto: true,
      factory: () => this._refresh(),
      frequency: { interval, backoff: true, max: 60 * 1000 },
      name: 'jupyter-pause:status',
      standby: 'when-hidden'
    });
  }

  /** Emitted whenever a refresh changes anything. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get status(): IStatus | null {
    return this._status;
  }

  /** How often to ask the server, in milliseconds (a user setting). */
  get interval(): number {
    return this._poll.frequency.interval;
  }

  set interval(interval: number) {
    // the backoff ceiling must stay above the interval (the poll refuses otherwise)
    const max = Math.max(this._poll.frequency.max, interval);
    this._poll.frequency = { ...this._poll.frequency, interval, max };
    // ask now: the next tick is a whole (possibly long) interval away
    void this._poll.refresh();
  }

  /**
   * Seconds until the idle policy acts on this notebook, counted down from
   * the last answer (so a countdown moves between polls); null when no
   * auto-pause is announced.
   */
  secondsLeft(path: string | null | undefined): number | null {
    const auto = this.session(path)?.auto_pause;
    if (!auto?.warning) {
      return null;
    }
    const elapsed = (Date.now() - this._fetchedAt) / 1000;
    return Math.max(0, auto.seconds_left - elapsed);
  }

  /** Ask the server about one notebook now; null when it cannot be asked. */
  async fetchSession(path: string): Promise<ISessionStatus | null> {
    try {
      await this._refresh();
    } catch {
      return null;
    }
    return this.session(path);
  }

  /** The last refresh failed (server gone or unreachable). */
  get error(): string | null {
    return this._error;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  session(path: string | undefined | null): ISessionStatus | null {
    if (!path || !this._status) {
      return null;
    }
    return this._status.sessions.find(s => s.path === path) ?? null;
  }

  /** Refresh now (after the user acted), instead of waiting for the poll. */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _refresh(): Promise<void> {
    try {
      const status = await requestAPI<IStatus>(
        'status',
        this.serverSettings,
        {},
        false
      );
      const changed =
        JSON.stringify(status) !== JSON.stringify(this._status) ||
        this._error !== null;
      this._status = status;
      this._fetchedAt = Date.now();
      this._error = null;
      if (changed) {
        this._changed.emit();
      }
    } catch (error) {
      const message = (error as Error).message || String(error);
      if (message !== this._error) {
        this._error = message;
        this._changed.emit();
      }
      throw error; // let the poll back off
    }
  }

  private _changed = new Signal<this, void>(this);
  private _error: string | null = null;
  private _fetchedAt = 0;
  private _poll: Poll;
  private _status: IStatus | null = null;
}
