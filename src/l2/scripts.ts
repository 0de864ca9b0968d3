/**
 * The Valkey side of a table (the L2 facade): every call of the Lua scripts
 * (`lua.ts`) that admit one loader per key across every instance (the leases
 * of memcache: Nishtala et al., "Scaling Memcache at Facebook", NSDI 2013) and
 * let Valkey, not the instances' clocks, order every write of a key. A cold
 * fill costs two round trips (`readOrLease`, `fillAndRelease`); an L2 hit one;
 * an instance that waited on the lease one (`readOrLease`), when the fill's
 * event carries the value.
 *
 * While a slot is being migrated (resharding) an item's keys may sit on two
 * nodes, and a script with several keys is answered `TRYAGAIN` until the move
 * ends (see `valkey/redirects.ts`). It then runs again key by key (its
 * **one-key path**, counted in `echostore_valkey_retries_total`): every
 * one-key command is served during a move, by the old owner while it holds the
 * key and by the importing node (`ASK`) once it does not. The steps are
 * ordered so that no write is lost: a write writes the value before it
 * cancels the lease, and a fill is refused once the value differs from the
 * one read when its lease was taken (its mark), whichever path either takes.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Cluster, Redis } from 'ioredis';
import { bump } from '../metrics.js';
import { BreakerOpenError, isReplyError } from '../valkey/breaker.js';
import { isTryAgain } from '../valkey/redirects.js';
import type { Breakers } from '../valkey/shard-breaker.js';
import { isCluster } from '../valkey/slots.js';
import { decodeHeader, type Envelope, readMark, writeArgs } from './format.js';
import { epochsKey, errorKey, eventsChannel, leaseKey, valueKey } from './keys.js';
import { commandOf, defineScripts, type ScriptClient, type ScriptName } from './lua.js';

/** Who this process is in a lease token: `<hostname>:<pid>`. */
const LEASE_HOLDER = `${hostname()}:${process.pid}`;

/** The answer of {@link L2.readOrLease}; `valkeyNowMs` is Valkey's clock when it answered. */
export type LeaseAnswer =
  /** A fresh envelope (text). */
  | { kind: 'value'; text: string; valkeyNowMs: number; valkeyNowUs: number }
  /**
   * This caller holds the lease and must load; `stale` is the old envelope
   * text, if any, and `mark` its {@link readMark} (what {@link L2.fillAndRelease} expects).
   */
  | {
      kind: 'leased';
      token: string;
      stale: string | undefined;
      mark: string;
      valkeyNowMs: number;
      valkeyNowUs: number;
    }
  /** Another loader holds the lease for `remainingMs` more. */
  | {
      kind: 'contended';
      remainingMs: number;
      stale: string | undefined;
      valkeyNowMs: number;
      valkeyNowUs: number;
    }
  /** A load of it failed lately (`failure`: the error's code) and is remembered for `remainingMs` more. */
  | {
      kind: 'failed';
      failure: string;
      remainingMs: number;
      stale: string | undefined;
      valkeyNowMs: number;
      valkeyNowUs: number;
    };

/** A load failure remembered for an id: the error's code and what remains of it, ms. */
export interface RememberedFailure {
  failure: string;
  remainingMs: number;
}

/** Valkey's acknowledgement of a write script: the version it gave the value, and its clock then. */
export interface WriteAck {
  version: number;
  valkeyNowMs: number;
  /** Why the coherence message was not sent (its PUBLISH was refused, e.g. by the ACL); the write itself happened. */
  unpublished?: string;
  /** Valkey's clock in µs when it wrote (`writeAndCancel` only): a PUT's `born`. */
  valkeyNowUs?: number;
}

/** What a purge covers: the rows carrying one of `tags`, or (`tags` undefined) every row of the table. */
export interface PurgeScope {
  tags?: readonly string[];
  /** Soft (stale while one refresh per row runs) rather than hard (a miss). */
  soft: boolean;
}

/** Valkey's acknowledgement of a purge: its epoch (µs on Valkey's clock) and Valkey's clock then. */
export interface PurgeAck {
  epoch: number;
  valkeyNowMs: number;
  /** Why the purge event was not sent (refused PUBLISH); the epochs were written. */
  unpublished?: string;
}

/**
 * How long a table's purge epochs are kept, ms: four times the longest policy
 * duration (2³¹ − 1 ms), so longer than any row lives (soft + stale TTL, each
 * at most that, times a jitter factor of at most 2): about 99 days.
 */
export const EPOCH_KEEP_MS = 4 * 2_147_483_647;

/**
 * The latest a write may run in Valkey after it was sent, ms, whatever the
 * command timeout: a store's close waits this long for a write in flight
 * before it fails the write's caller (`ECC_CLOSED`), so no write it reported
 * failed can land later. The service's shutdown grace (5 s) is not shorter.
 */
export const MAX_WRITE_DEADLINE_MS = 5_000;

/**
 * A write script ran after its deadline (see {@link L2.write}): its client
 * had given up on it, so it wrote nothing. Not a failure of the server.
 */
export class LateWriteError extends Error {
  override readonly name = 'LateWriteError';
}

/** The kinds of coherence message a write publishes. */
export type WriteKind = 'put' | 'del';

/** A connection's socket, whose writes can be held and sent together. */
interface Corkable {
  cork(): void;
  uncork(): void;
}

/** The socket of one connection (undefined before it connects). */
const streamOf = (client: Redis | Cluster) =>
  (client as { stream?: Partial<Corkable> }).stream as Corkable | undefined;

/**
 * One table's view of Valkey: every command goes through the breaker
 * (`breaker.run`, per shard on a cluster: the key picks it), so a dead or sick
 * server is noticed in one place.
 * All methods throw what `Breaker.run` throws (`BreakerOpenError` when
 * nothing was sent; a timeout or reply error otherwise). Written envelopes
 * carry this process's clock (`now`); the scripts store them on Valkey's.
 */
export class L2 {
  readonly #client: ScriptClient;
  readonly #breaker: Breakers;
  readonly #table: string;
  readonly #namespace: string;
  readonly #fingerprint: string;
  readonly #channel: string;
  /** The client's command timeout, ms; undefined when it has none (a client of the caller's own). */
  readonly #commandTimeoutMs: number | undefined;
  /**
   * How far Valkey's clock (epoch ms) is at least ahead of `performance.now()`:
   * the largest `valkeyNowMs − receivedAt` of the answers seen (a lower bound,
   * since Valkey read its clock before the answer was received); undefined before any.
   */
  #valkeyAheadMs: number | undefined;
  readonly #retries: Record<string, number>;
  readonly #fillEventMaxBytes: number;
  #corked = false;
  /**
   * The lease tokens of this L2: `<host>:<pid>/<random, per L2><counter>`, unique across
   * the fleet without a random draw per `readOrLease` (most of which take no lease).
   */
  readonly #tokenPrefix = `${LEASE_HOLDER}/${randomBytes(9).toString('base64url')}.`;
  #tokens = 0;

  /**
   * @param coherent false: the scripts publish nothing (coherence is off).
   * @param retries counts, by operation, the scripts run again on their
   *   one-key path (`get`, `lease`, `fill`, `put`, `del`, `forget`): the table's counters.
   * @param namespace the store's namespace (`''`: the unnamed one).
   * @param fingerprint the table's source fingerprint: a value another source wrote is never fresh.
   * @param fillEventMaxBytes the longest stored text (bytes) a `fill` event carries (the
   *   policy's `fillEventMaxBytes`); 0: its version only.
   */
  constructor(
    client: Redis | Cluster,
    breaker: Breakers,
    table: string,
    coherent = true,
    retries: Record<string, number> = {},
    namespace = '',
    fingerprint = '',
    fillEventMaxBytes = 0,
  ) {
    defineScripts(client);
    this.#client = client as ScriptClient;
    this.#breaker = breaker;
    this.#table = table;
    this.#namespace = namespace;
    this.#fingerprint = fingerprint;
    this.#channel = coherent ? eventsChannel(table, namespace) : '';
    this.#commandTimeoutMs = commandTimeoutOf(client);
    this.#retries = retries;
    this.#fillEventMaxBytes = fillEventMaxBytes;
  }

  #value(id: string): string {
    return valueKey(this.#table, id, this.#namespace);
  }

  #lease(id: string): string {
    return leaseKey(this.#table, id, this.#namespace);
  }

  #error(id: string): string {
    return errorKey(this.#table, id, this.#namespace);
  }

  /**
   * Runs `all` (a script with several keys); when its slot is being migrated
   * and the keys are split (`TRYAGAIN`: nothing ran), counts a retry of `op`
   * and runs `alone`, the same operation key by key.
   */
  async #keyByKey<T>(op: string, all: () => Promise<T>, alone: () => Promise<T>): Promise<T> {
    try {
      return await all();
    } catch (err) {
      if (!isTryAgain(err)) throw err;
      bump(this.#retries, op);
      return alone();
    }
  }

  /** Valkey answered at `valkeyNowMs` on its clock, received now: narrows {@link #valkeyAheadMs}. */
  #sawClock(valkeyNowMs: number): void {
    const ahead = valkeyNowMs - performance.now();
    if (!Number.isFinite(ahead)) return;
    if (this.#valkeyAheadMs === undefined || ahead > this.#valkeyAheadMs)
      this.#valkeyAheadMs = ahead;
  }

  /**
   * How long after it is sent a write may still run in Valkey, ms: the command
   * timeout, at most {@link MAX_WRITE_DEADLINE_MS} (also without one).
   */
  get writeDeadlineMs(): number {
    return Math.min(this.#commandTimeoutMs ?? MAX_WRITE_DEADLINE_MS, MAX_WRITE_DEADLINE_MS);
  }

  /**
   * The deadline of a write sent now, on Valkey's clock (epoch ms): the
   * moment this process gives up on it ({@link writeDeadlineMs} from now: its
   * command timeout, or a close that waits that long for it), moved onto
   * Valkey's clock with a lower bound of the clocks' offset, so it is never
   * later than the moment the client is told "failed". A write Valkey runs
   * after it writes nothing, so one reported failed cannot land after a write
   * acknowledged after that report. Before the offset is known, one `TIME`
   * finds it.
   */
  async #deadline(key: string): Promise<number> {
    const timeoutMs = this.writeDeadlineMs;
    const sentAt = performance.now();
    if (this.#valkeyAheadMs === undefined) {
      const [sec, us] = (await this.#breaker.run(() => this.#client.time(), { key })).map(Number);
      this.#sawClock((sec as number) * 1000 + Math.floor((us as number) / 1000));
    }
    return Math.floor(sentAt + (this.#valkeyAheadMs as number) + timeoutMs);
  }

  /**
   * `write`'s outcome, but a failure that is not Valkey's answer (a lost connection rejects the
   * commands in flight at once, while their bytes may still be on their way, held by a proxy)
   * only once `deadline` (from {@link #deadline}) has passed on Valkey's clock: from then on
   * Valkey refuses to run the write, so it cannot land after a write acknowledged after this
   * failure is reported. Not sent (an open circuit) or refused, it fails at once.
   */
  async #failAfterDeadline<T>(deadline: number, write: Promise<T>): Promise<T> {
    try {
      return await write;
    } catch (err) {
      if (!(err instanceof BreakerOpenError) && !isReplyError(err)) {
        // Valkey's clock is at least this process's plus the offset's lower bound.
        const leftMs = deadline - (performance.now() + (this.#valkeyAheadMs ?? 0));
        if (leftMs >= 0) await sleep(Math.floor(leftMs) + 1);
      }
      throw err;
    }
  }

  /** False while the breaker says Valkey is unusable (degraded, for any shard). */
  get usable(): boolean {
    return !this.#breaker.degraded;
  }

  /** Runs script `name`; its first argument is its first key, which picks the shard. */
  #call(name: ScriptName, key: string, ...args: (string | number)[]): Promise<unknown> {
    const command = commandOf(name);
    this.#corkTick();
    return this.#breaker.run(() => this.#client[command]?.(key, ...args) as Promise<unknown>, {
      key,
    });
  }

  /**
   * Holds this tick's commands in the socket and writes them as one segment
   * after it (`cork`, then `uncork` on a microtask): the flights of a batch
   * read, launched together, reach Valkey together and are answered together.
   * On a cluster, every primary's socket is corked alike, so a batch is one
   * write and one round trip per node, whatever its number of ids.
   */
  #corkTick(): void {
    if (this.#corked) return;
    const streams = isCluster(this.#client)
      ? this.#client.nodes('master').map(streamOf)
      : [streamOf(this.#client)];
    const corkable = streams.filter((s): s is Corkable => typeof s?.cork === 'function');
    if (corkable.length === 0) return;
    this.#corked = true;
    for (const s of corkable) s.cork();
    queueMicrotask(() => {
      this.#corked = false;
      for (const s of corkable) s.uncork();
    });
  }

  /**
   * `read`: the value key's text (null when absent or not a string), Valkey's
   * clock and a remembered load failure (cache-aside without the lease). On a
   * slot in migration: `readAlone` and `failure`, side by side.
   */
  async read(id: string): Promise<ReadAnswer> {
    const value = this.#value(id);
    const error = this.#error(id);
    const reply = await this.#keyByKey(
      'get',
      async () => (await this.#call('read', value, error)) as unknown[],
      async () => {
        const [read, failed] = await Promise.all([
          this.#call('readAlone', value) as Promise<unknown[]>,
          this.#call('failure', error) as Promise<unknown[]>,
        ]);
        return [read[0], read[1], failed[0], failed[1]];
      },
    );
    return this.#readAnswer(reply);
  }

  /** `{v, now, failure, pttl}` as a {@link ReadAnswer}; its clock narrows the offset. */
  #readAnswer(reply: unknown[]): ReadAnswer {
    this.#sawClock(Number(reply[1]));
    const failure = optionalText(reply[2]);
    return {
      text: optionalText(reply[0]) ?? null,
      valkeyNowMs: Number(reply[1]),
      valkeyNowUs: Number(reply[4]),
      failed:
        failure === undefined ? undefined : { failure, remainingMs: Math.max(0, Number(reply[3])) },
    };
  }

  /**
   * Remembers that a load of `id` failed (`failure`: the error's code) for
   * `ttlMs`, fleet-wide: until then `readOrLease` and `read` answer the
   * failure instead of a lease, so the source is not asked again.
   */
  async rememberFailure(id: string, failure: string, ttlMs: number): Promise<void> {
    const key = this.#error(id);
    await this.#breaker.run(
      () => this.#client.set(key, failure, 'PX', Math.max(1, Math.round(ttlMs))),
      {
        key,
      },
    );
  }

  /**
   * `readOrLease`: the value if fresh on Valkey's clock and newer than
   * `replaceUpTo`; else a remembered failure of its load, if any; else
   * `SET <lease> <random token> NX PX leaseMs`. An early
   * refresh passes the version it means to replace; a caller that could not
   * decode the value passes `Number.MAX_SAFE_INTEGER`. On a slot in
   * migration, step by step (see {@link L2.#readOrLeaseAlone}).
   */
  async readOrLease(id: string, leaseMs: number, replaceUpTo: number): Promise<LeaseAnswer> {
    // Unique, and it names the holder (`echostore inspect`).
    const token = this.#tokenPrefix + (this.#tokens++).toString(36);
    return this.#keyByKey(
      'lease',
      () => this.#readOrLeaseAll(id, token, leaseMs, replaceUpTo),
      () => this.#readOrLeaseAlone(id, token, leaseMs, replaceUpTo),
    );
  }

  /** `readOrLease` in one script. */
  async #readOrLeaseAll(
    id: string,
    token: string,
    leaseMs: number,
    replaceUpTo: number,
  ): Promise<LeaseAnswer> {
    const reply = (await this.#call(
      'readOrLease',
      this.#value(id),
      this.#lease(id),
      this.#error(id),
      token,
      leaseMs,
      String(replaceUpTo),
      this.#fingerprint,
    )) as unknown[];
    this.#sawClock(Number(reply[reply[0] === 3 ? 3 : reply[0] === 4 ? 4 : 2]));
    if (reply[0] === 4) {
      return {
        kind: 'failed',
        failure: String(reply[1]),
        remainingMs: Math.max(0, Number(reply[2])),
        stale: optionalText(reply[3]),
        valkeyNowMs: Number(reply[4]),
        valkeyNowUs: Number(reply[5]),
      };
    }
    if (reply[0] === 1) {
      return {
        kind: 'value',
        text: String(reply[1]),
        valkeyNowMs: Number(reply[2]),
        valkeyNowUs: Number(reply[3]),
      };
    }
    if (reply[0] === 2) {
      const stale = optionalText(reply[1]);
      return {
        kind: 'leased',
        token,
        stale,
        mark: readMark(stale),
        valkeyNowMs: Number(reply[2]),
        valkeyNowUs: Number(reply[3]),
      };
    }
    return {
      kind: 'contended',
      remainingMs: Math.max(0, Number(reply[1])),
      stale: optionalText(reply[2]),
      valkeyNowMs: Number(reply[3]),
      valkeyNowUs: Number(reply[4]),
    };
  }

  /**
   * `readOrLease` key by key, in the script's order: `readAlone` and
   * `failure`; unless fresh or failed, `takeLease`; once leased, `readAlone`
   * again, since a fill may have landed in between (then the lease is given
   * back and that value answered: no load while the value is in L2).
   */
  async #readOrLeaseAlone(
    id: string,
    token: string,
    leaseMs: number,
    replaceUpTo: number,
  ): Promise<LeaseAnswer> {
    const lease = this.#lease(id);
    const readValue = async () =>
      this.#readAnswer([...((await this.#call('readAlone', this.#value(id))) as unknown[])]);
    const [first, failed] = await Promise.all([
      readValue(),
      this.#call('failure', this.#error(id)) as Promise<unknown[]>,
    ]);
    const { valkeyNowMs, valkeyNowUs } = first;
    if (isFresh(first, replaceUpTo, this.#fingerprint)) {
      return { kind: 'value', text: first.text, valkeyNowMs, valkeyNowUs };
    }
    const stale = first.text ?? undefined;
    const failure = optionalText(failed[0]);
    if (failure !== undefined) {
      const remainingMs = Math.max(0, Number(failed[1]));
      return { kind: 'failed', failure, remainingMs, stale, valkeyNowMs, valkeyNowUs };
    }
    const taken = (await this.#call('takeLease', lease, token, leaseMs)) as unknown[];
    if (taken[0] !== 2) {
      return {
        kind: 'contended',
        remainingMs: Math.max(0, Number(taken[1])),
        stale,
        valkeyNowMs,
        valkeyNowUs,
      };
    }
    const again = await readValue();
    if (isFresh(again, replaceUpTo, this.#fingerprint)) {
      await this.#call('release', lease, token, '', '');
      return {
        kind: 'value',
        text: again.text,
        valkeyNowMs: again.valkeyNowMs,
        valkeyNowUs: again.valkeyNowUs,
      };
    }
    const now = again.text ?? undefined;
    return {
      kind: 'leased',
      token,
      stale: now,
      mark: readMark(now),
      valkeyNowMs: again.valkeyNowMs,
      valkeyNowUs: again.valkeyNowUs,
    };
  }

  /** `renew`: extends the lease by `leaseMs` if it still holds `token`; false when it is gone (fenced). */
  async renew(id: string, token: string, leaseMs: number): Promise<boolean> {
    return (await this.#call('renew', this.#lease(id), token, leaseMs)) === 1;
  }

  /**
   * `fillAndRelease`: writes `envelope` at its version exactly (see {@link fillVersion}) if
   * the lease still holds `token` and the value is still the one the lease was taken over
   * (`mark`, from the `leased` answer), deletes the lease and publishes the fill (with the
   * stored text when it is at most `fillEventMaxBytes`). On a slot in
   * migration: `GET` the lease, `fillAlone`, `release`.
   *
   * @param now this process's clock, on which `envelope`'s expiries are.
   * @returns the version Valkey wrote it at (`envelope.version`) and its clock, or undefined
   *   when the lease was lost (expired, or cancelled by a PUT or DELETE) or the value
   *   replaced: nothing was written.
   */
  async fillAndRelease(
    id: string,
    token: string,
    mark: string,
    envelope: Envelope,
    now: number,
  ): Promise<WriteAck | undefined> {
    const value = this.#value(id);
    const lease = this.#lease(id);
    const args = writeArgs(envelope, now);
    const rest = [
      ...args,
      Math.max(1, args[1]),
      this.#channel,
      JSON.stringify(id),
      mark,
      this.#fillEventMaxBytes,
      String(envelope.version),
    ];
    return this.#filled(
      await this.#keyByKey(
        'fill',
        () => this.#call('fillAndRelease', value, lease, token, ...rest),
        async () => {
          const holder = await this.#breaker.run(() => this.#client.get(lease), { key: lease });
          if (holder !== token) return 0;
          const written = await this.#call('fillAlone', value, token, ...rest);
          await this.#call('release', lease, token, '', '');
          return written;
        },
      ),
    );
  }

  /**
   * `fillIfUnchanged`: a fill without the lease; writes only if the key still
   * holds what the flight read (`expected`, from `readMark`).
   *
   * @returns the version written, or undefined when something else was written
   *   or deleted meanwhile: nothing was written.
   */
  async fillIfUnchanged(
    id: string,
    expected: string,
    envelope: Envelope,
    now: number,
  ): Promise<WriteAck | undefined> {
    const args = writeArgs(envelope, now);
    return this.#filled(
      await this.#call(
        'fillIfUnchanged',
        this.#value(id),
        expected,
        ...args,
        Math.max(1, args[1]),
        this.#channel,
        JSON.stringify(id),
      ),
    );
  }

  /**
   * `writeAndCancel`: PUT (`kind` "put") or DELETE (`kind` "del", `envelope` a
   * tombstone), kept `pxMs`: writes with a version above the key's, deletes
   * the lease (so any fill in flight is refused) and publishes the change —
   * unless Valkey runs it after the moment this client gives up on it (see
   * {@link L2.#deadline}): then it writes nothing.
   *
   * @returns the version Valkey ordered the write at.
   * @throws {LateWriteError} when Valkey ran it after its deadline (nothing was written);
   *   otherwise what `Breaker.run` throws.
   */
  async write(
    id: string,
    envelope: Envelope,
    now: number,
    pxMs: number,
    kind: WriteKind,
  ): Promise<WriteAck> {
    const key = this.#value(id);
    const lease = this.#lease(id);
    const deadline = await this.#deadline(key);
    const rest = [
      ...writeArgs(envelope, now),
      Math.max(1, Math.round(pxMs)),
      this.#channel,
      JSON.stringify(id),
      kind,
      deadline,
    ];
    const reply = await this.#cancellingWrite(
      kind,
      deadline,
      lease,
      () => this.#call('writeAndCancel', key, lease, ...rest),
      () => this.#call('writeAlone', key, ...rest),
    );
    return this.#acknowledged(reply, 'write');
  }

  /**
   * `staleAndCancel`: a soft DELETE. A value of this table's source stays,
   * stale from Valkey's now (served stale while one refresh runs); any other is
   * replaced by `tombstone`, kept `pxMs`. Like {@link write} it raises the
   * version, cancels the lease (a fill in flight anywhere is refused),
   * publishes a `del` and writes nothing after its deadline.
   *
   * @throws {LateWriteError} when Valkey ran it after its deadline; otherwise what `Breaker.run` throws.
   */
  async markStale(id: string, tombstone: Envelope, now: number, pxMs: number): Promise<WriteAck> {
    const key = this.#value(id);
    const lease = this.#lease(id);
    const deadline = await this.#deadline(key);
    const rest = [
      ...writeArgs(tombstone, now),
      Math.max(1, Math.round(pxMs)),
      this.#channel,
      JSON.stringify(id),
      deadline,
      this.#fingerprint,
    ];
    const reply = await this.#cancellingWrite(
      'del',
      deadline,
      lease,
      () => this.#call('staleAndCancel', key, lease, ...rest),
      () => this.#call('staleAlone', key, ...rest),
    );
    return this.#acknowledged(reply, 'staleAndCancel');
  }

  /**
   * One write that cancels `lease`, run nowhere after `deadline`: `both` (one script over the
   * value and the lease) where one node holds the two keys, else `alone` on the value and then a
   * DEL of the lease — the value first, so a fill that lands before the lease is gone finds it
   * changed. `whileRefused`: the DEL is sent while the server refuses writes (OOM), as `forget` is.
   *
   * @returns the script's reply ('late' when it ran after `deadline`: then no DEL is sent).
   */
  #cancellingWrite(
    op: string,
    deadline: number,
    lease: string,
    both: () => Promise<unknown>,
    alone: () => Promise<unknown>,
    whileRefused = false,
  ): Promise<unknown> {
    return this.#failAfterDeadline(
      deadline,
      this.#keyByKey(op, both, async () => {
        const written = await alone();
        if (written !== 'late') {
          await this.#breaker.run(() => this.#client.del(lease), { whileRefused, key: lease });
        }
        return written;
      }),
    );
  }

  /** A fill's answer: its {@link WriteAck}, or undefined when it was refused. */
  #filled(reply: unknown): WriteAck | undefined {
    const v = versionOf(reply);
    if (v !== undefined) this.#sawClock(v.valkeyNowMs);
    return v;
  }

  /** A write script's answer as its {@link WriteAck}; its clock narrows the offset. */
  #acknowledged(reply: unknown, script: string): WriteAck {
    if (reply === 'late') {
      throw new LateWriteError(`the ${script} script ran after its deadline: nothing was written`);
    }
    const v = versionOf(reply);
    if (v === undefined) throw new Error(`the ${script} script answered no version`);
    this.#sawClock(v.valkeyNowMs);
    return v;
  }

  /**
   * `forget`: DELETE without a tombstone (the fallback when Valkey refuses to
   * store one, OOM): deletes the value and the lease and publishes the
   * deletion. Sent even while the circuit is open because the server refuses
   * (`whileRefused`): Valkey accepts DEL under OOM. Like {@link write}, it
   * deletes nothing after its deadline.
   *
   * @returns the version the deletion was announced at.
   * @throws {LateWriteError} when Valkey ran it after its deadline.
   */
  async forget(id: string): Promise<WriteAck> {
    const key = this.#value(id);
    const lease = this.#lease(id);
    const deadline = await this.#deadline(key);
    const args = [this.#channel, JSON.stringify(id), deadline];
    const run = (name: ScriptName, keys: string[]) =>
      this.#breaker.run(
        () => this.#client[commandOf(name)]?.(...keys, ...args) as Promise<unknown>,
        { whileRefused: true, key },
      );
    const reply = await this.#cancellingWrite(
      'forget',
      deadline,
      lease,
      () => run('forget', [key, lease]),
      () => run('forgetAlone', [key]),
      true,
    );
    return this.#acknowledged(reply, 'forget');
  }

  /**
   * `purge`: writes the purge's epoch for each of `scope.tags` (or the table),
   * then tells the fleet.
   *
   * @returns the epoch (µs on Valkey's clock): rows born at or before it are purged.
   */
  async purge(scope: PurgeScope): Promise<PurgeAck> {
    const key = epochsKey(this.#table, this.#namespace);
    const tags = scope.tags ?? [];
    const reply = (await this.#call(
      'purge',
      key,
      scope.soft ? 'S' : 'H',
      this.#channel,
      String(EPOCH_KEEP_MS * 1000),
      scope.tags === undefined ? 'null' : JSON.stringify(tags),
      ...tags,
    )) as unknown[];
    const epoch = Number(reply[0]);
    if (!Number.isSafeInteger(epoch) || epoch <= 0)
      throw new Error('the purge script answered no epoch');
    const unpublished = optionalText(reply[2]);
    return {
      epoch,
      valkeyNowMs: Number(reply[1]),
      ...(unpublished === undefined ? {} : { unpublished }),
    };
  }

  /** The table's purge epochs as stored (`HGETALL` of {@link epochsKey}): field → µs. */
  async epochs(): Promise<Record<string, string>> {
    const key = epochsKey(this.#table, this.#namespace);
    this.#corkTick();
    return this.#breaker.run(() => this.#client.hgetall(key), { key });
  }

  /** `release`: deletes the lease if it still holds `token` and wakes the waiters (a failed load). */
  async release(id: string, token: string): Promise<boolean> {
    const message = JSON.stringify({ k: 'release', id });
    return (await this.#call('release', this.#lease(id), token, this.#channel, message)) === 1;
  }
}

/**
 * The version a holder's fill is written at, known before it is sent (so the holder answers
 * its callers with it at once): Valkey's clock when the lease was taken (`leasedAtUs`, the
 * `leased` answer's µs), above the version of the value it was taken over (`stale`, that
 * answer's text). Every write that lands between the lease and the fill refuses the fill (it
 * cancels the lease or changes the value), so this version still orders the fill after every
 * write it follows and before every write that follows it.
 */
export function fillVersion(leasedAtUs: number, stale: string | undefined): number {
  const above = (stale === undefined ? 0 : (decodeHeader(stale)?.version ?? 0)) + 1;
  return Math.max(Number.isSafeInteger(leasedAtUs) ? leasedAtUs : 0, above);
}

/** What `read` answers. */
export interface ReadAnswer {
  /** The value key's text; null when absent or not a string. */
  text: string | null;
  /** Valkey's clock when it answered, epoch ms. */
  valkeyNowMs: number;
  /** The same, µs (the clock of versions and purge epochs). */
  valkeyNowUs: number;
  /** A remembered load failure of the id, if any. */
  failed: RememberedFailure | undefined;
}

/** What `readOrLease` calls fresh, on Valkey's clock: soft expiry after its now, version above `replaceUpTo`. */
function isFresh(
  read: ReadAnswer,
  replaceUpTo: number,
  fingerprint: string,
): read is ReadAnswer & { text: string } {
  const h = read.text === null ? undefined : decodeHeader(read.text);
  return (
    h !== undefined &&
    h.softExpiresAt > read.valkeyNowMs &&
    h.version > replaceUpTo &&
    h.fingerprint === fingerprint
  );
}

/** A write script's answer: `{version, valkeyNowMs, publishRefusal|nil}` written, or 0 when it refused. */
function versionOf(reply: unknown): WriteAck | undefined {
  if (!Array.isArray(reply)) return undefined;
  const version = Number(reply[0]);
  if (!Number.isSafeInteger(version) || version <= 0) return undefined;
  const unpublished = optionalText(reply[2]);
  const nowUs = Number(reply[3]);
  return {
    version,
    valkeyNowMs: Number(reply[1]),
    ...(unpublished === undefined ? {} : { unpublished }),
    ...(Number.isSafeInteger(nowUs) && nowUs > 0 ? { valkeyNowUs: nowUs } : {}),
  };
}

/** The command timeout `client` was created with, ms (a cluster's from its node options). */
function commandTimeoutOf(client: Redis | Cluster): number | undefined {
  const options = client.options as {
    commandTimeout?: number;
    redisOptions?: { commandTimeout?: number };
  };
  const ms = options.commandTimeout ?? options.redisOptions?.commandTimeout;
  return typeof ms === 'number' && ms > 0 ? ms : undefined;
}

function optionalText(x: unknown): string | undefined {
  return x === null || x === undefined || x === false ? undefined : String(x);
}
