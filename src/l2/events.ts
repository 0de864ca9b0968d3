/**
 * The table event channels (`ecc:events:[<namespace>:]<table>`) as seen by one store: a
 * dedicated subscriber connection, and watches that wake a flight waiting for
 * another instance's fill of one id.
 */
import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { type HeartbeatOptions, keepAlive } from '../valkey/heartbeat.js';
import { openSubscriber } from '../valkey/subscriber.js';
import { eventsChannel } from './keys.js';

/**
 * A message on a table's channel. `k` is the kind: `fill` (a load's value was
 * written), `release` (a load failed), `put` (a write), `del` (an invalidation),
 * `purge` (rows by tag, or the table: `id` is `""`).
 */
export interface TableEvent {
  k: 'fill' | 'release' | 'put' | 'del' | 'purge';
  id: string;
  /** The version written, for `fill`, `put` and `del`; the epoch (µs) of a `purge`. */
  v?: number;
  /** A `purge`: soft rather than hard. */
  soft?: boolean;
  /** A `purge`: the tags purged; absent (`null` on the wire) for the whole table. */
  tags?: string[];
  /**
   * A `fill`: the stored text (the envelope, as the key holds it at version `v`), when it was
   * at most the table's `fillEventMaxBytes`; the script that wrote it published it.
   */
  e?: string;
}

/** What a table does with its channel. */
export interface TableHandlers {
  /** An event of the table arrived (this instance's own included). */
  onEvent(event: TableEvent): void;
  /** The subscriber reconnected after a drop: events may have been missed. */
  onReconnect(): void;
}

/** A watch on one id: `wait` resolves early when an event for the id arrives. */
export interface Watch {
  /**
   * Resolves with the latest event of the id since the last `wait` or {@link Watch.reset}
   * (at once when one arrived meanwhile), or `undefined` after `ms`.
   */
  wait(ms: number): Promise<TableEvent | undefined>;
  /** Forgets an event that arrived since the last `wait`: call before asking Valkey again. */
  reset(): void;
  close(): void;
}

/**
 * One subscriber connection for all of a store's tables.
 *
 * Waking is an optimisation: a watcher that misses an event (the subscriber
 * was reconnecting) still re-checks after its bounded poll interval. A `fill`
 * event may carry the stored value, which a waiter answers from; the channel is
 * trusted as the keys are (whoever may publish on it may write values).
 */
export class TableEvents {
  readonly #sub: Redis;
  readonly #log: Logger;
  readonly #watches = new Map<string, Set<WatchImpl>>();
  readonly #handlers = new Map<string, TableHandlers>();
  /** Table by channel. */
  readonly #tables = new Map<string, string>();
  readonly #namespace: string;
  #connectedBefore = false;
  readonly #stopHeartbeat: () => void;

  /**
   * Opens a subscriber connection for `client` (a duplicate; on a cluster, one
   * that follows its nodes), health-checked by a heartbeat.
   *
   * @param namespace the store's namespace: the channels are `ecc:events:<namespace>:<table>`.
   */
  constructor(
    client: Redis | Cluster,
    log: Logger,
    heartbeat: HeartbeatOptions = {},
    namespace = '',
  ) {
    this.#log = log;
    this.#namespace = namespace;
    // Subscriptions are queued until connected, and re-issued after a reconnect by the
    // `ready` handler below (not by ioredis's autoResubscribe, which leaves a refusal of
    // them, an ACL that lost the channels, as an unhandled rejection that ends the process).
    // The SUBSCRIBE waits in the offline queue until the connection is up, however
    // long that takes (the main client's maxRetriesPerRequest: 0 would drop it).
    this.name = `echostore-events-${randomBytes(4).toString('hex')}`;
    this.#sub = openSubscriber(client, {
      // Named, so an operator (or a test) can tell it apart in CLIENT LIST.
      connectionName: this.name,
      enableOfflineQueue: true,
      autoResubscribe: false,
      commandTimeout: undefined,
      maxRetriesPerRequest: null,
      // A dead connection is destroyed this soon after the heartbeat ends it (not 2 s).
      disconnectTimeout: 250,
    });
    this.#sub.on('error', (err) => log.debug({ err }, 'valkey subscriber error'));
    this.#sub.on('message', (channel: string, message: string) => this.#deliver(channel, message));
    // A reconnect may have lost messages: every table flushes its L1 (coherence) once re-subscribed.
    this.#sub.on('ready', () => {
      if (!this.#connectedBefore) {
        this.#connectedBefore = true;
        return;
      }
      const flush = () => {
        for (const h of this.#handlers.values()) h.onReconnect();
      };
      // The SUBSCRIBE is answered once the channels are back: flushing then also drops what
      // was loaded before. Refused, the tables run without events (waiters poll; the health
      // probe's PUBLISH on the channel degrades the store), and flush all the same.
      const channels = [...this.#tables.keys()];
      if (channels.length === 0) return flush();
      this.#sub.subscribe(...channels).then(flush, (err: unknown) => {
        this.#log.warn(
          { err, tables: [...this.#tables.values()] },
          'could not subscribe to the table channels again after a reconnect; waiters will poll',
        );
        flush();
      });
    });
    // A connection that stops delivering is replaced (and the reconnect flushes L1).
    this.#stopHeartbeat = keepAlive(
      this.#sub,
      () => {
        log.warn('valkey subscriber stopped answering: reconnecting it (L1 is flushed then)');
        this.#sub.disconnect(true);
      },
      heartbeat,
    );
  }

  /** `host:port` of the server the subscriber is connected to, or tries next (diagnostics and tests). */
  get endpoint(): string {
    return `${this.#sub.options.host}:${this.#sub.options.port}`;
  }

  /**
   * Subscribes to `table`'s channel; `handlers` get its events and reconnects.
   *
   * @returns resolves `true` once Valkey confirmed the subscription, `false`
   *   when it refused it (logged; e.g. an ACL without the channel). Never rejects.
   */
  subscribe(table: string, handlers: TableHandlers): Promise<boolean> {
    this.#handlers.set(table, handlers);
    const channel = eventsChannel(table, this.#namespace);
    this.#tables.set(channel, table);
    return this.#sub.subscribe(channel).then(
      () => true,
      (err: unknown) => {
        this.#log.warn(
          { err, table },
          'could not subscribe to the table channel; waiters will poll',
        );
        return false;
      },
    );
  }

  /** The subscriber connection's name (`CLIENT SETNAME`), `echostore-events-<random>`. */
  readonly name: string;

  /** The subscriber connection's state (ioredis `status`: `ready`, `reconnecting`, …). */
  get status(): string {
    return this.#sub.status;
  }

  /** Starts watching `table`/`id`; call before asking Valkey, so no event can slip between. */
  watch(table: string, id: string): Watch {
    const key = `${table}\u0000${id}`;
    let set = this.#watches.get(key);
    if (set === undefined) {
      set = new Set();
      this.#watches.set(key, set);
    }
    const watch = new WatchImpl(() => {
      set.delete(watch);
      if (set.size === 0 && this.#watches.get(key) === set) this.#watches.delete(key);
    });
    set.add(watch);
    return watch;
  }

  #deliver(channel: string, message: string): void {
    const table = this.#tables.get(channel);
    if (table === undefined) return;
    let event: TableEvent;
    try {
      event = JSON.parse(message) as TableEvent;
    } catch {
      return;
    }
    if (typeof event?.id !== 'string') return;
    if (event.v !== undefined && !Number.isSafeInteger(event.v)) return;
    if (event.e !== undefined && (event.k !== 'fill' || typeof event.e !== 'string'))
      delete event.e;
    if (event.k === 'purge') {
      const tags = event.tags as unknown;
      if (tags === null) delete event.tags;
      else if (!Array.isArray(tags) || tags.some((t) => typeof t !== 'string')) return;
    }
    this.#handlers.get(table)?.onEvent(event);
    const set = this.#watches.get(`${table}\u0000${event.id}`);
    if (set !== undefined) for (const w of set) w.wake(event);
  }

  /** Closes the subscriber connection (at once: there is nothing to flush, and QUIT could wait on a paused server). */
  async close(): Promise<void> {
    this.#stopHeartbeat();
    this.#sub.disconnect();
  }
}

class WatchImpl implements Watch {
  /** The latest event since the last wait, when none was waiting for it. */
  #pending: TableEvent | undefined;
  #resolve: ((event: TableEvent | undefined) => void) | undefined;
  #timer: NodeJS.Timeout | undefined;
  readonly #onClose: () => void;

  constructor(onClose: () => void) {
    this.#onClose = onClose;
  }

  wake(event: TableEvent): void {
    if (this.#resolve === undefined) {
      this.#pending = event;
      return;
    }
    clearTimeout(this.#timer);
    const resolve = this.#resolve;
    this.#resolve = undefined;
    resolve(event);
  }

  wait(ms: number): Promise<TableEvent | undefined> {
    const pending = this.#pending;
    if (pending !== undefined) {
      this.#pending = undefined;
      return Promise.resolve(pending);
    }
    return new Promise((resolve) => {
      this.#resolve = resolve;
      this.#timer = setTimeout(
        () => {
          this.#resolve = undefined;
          resolve(undefined);
        },
        Math.max(0, ms),
      );
    });
  }

  reset(): void {
    this.#pending = undefined;
  }

  close(): void {
    clearTimeout(this.#timer);
    this.#resolve?.(undefined);
    this.#resolve = undefined;
    this.#onClose();
  }
}
