/**
 * Running a flight, outside the owner: with the fleet lease (`readOrLease`,
 * wait for the holder's fill or take over, `fillAndRelease`), as plain
 * cache-aside with a compare-and-set fill, or — while Valkey is unusable —
 * straight from the source. Every path ends in one {@link Outcome}; the
 * owner learns it from its `landed` message.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  BadIdError,
  BadValueError,
  EchoStoreError,
  LoadFailedError,
  LoadTimeoutError,
  RowTagsError,
  ShedError,
  SourceError,
  WaitTimeoutError,
} from '../errors.js';
import type { TableEvent, Watch } from '../l2/events.js';
import {
  decodeEnvelope,
  decodeHeader,
  type Envelope,
  localize,
  readMark,
  toJson,
} from '../l2/format.js';
import { fillVersion, type LeaseAnswer, type RememberedFailure } from '../l2/scripts.js';
import { bump } from '../metrics.js';
import type { LoadEnd, Permit } from '../protection/admission.js';
import { HARD_PURGED, NOT_PURGED } from '../store/epochs.js';
import { LoadResult, type RowPolicy } from '../store/load-result.js';
import { mintEnvelope } from '../store/mint.js';
import { rowTags } from '../store/tags.js';
import { classifyValkeyError } from '../valkey/breaker.js';
import { type Flight, noteWritten, type Outcome, type TableContext } from './flight.js';

/** Longest pause between two looks at a contended lease when no event wakes the waiter. */
const POLL_MS = 250;
/** Shortest such pause: a lease about to expire is looked at again, but never in a tight loop. */
const MIN_POLL_MS = 10;

/** Runs one flight to its outcome. Never rejects. */
export type FlightRunner = (flight: Flight) => Promise<Outcome>;

/** What a flight tells its owner before it lands (each posts a message). */
export interface FlightReports {
  /**
   * The flight holds a stale value it may serve while it loads (stale-while-revalidate):
   * the owner answers the waiters now.
   */
  serveStale(flight: Flight, stale: Envelope): void;
  /**
   * The lease holder's load returned and its fill is sent, at the version it answers with:
   * the owner answers the waiters now, and keeps the value once the fill lands (`landed`).
   */
  loaded(flight: Flight, envelope: Envelope): void;
}

/**
 * Picks how the table's flights run, once, when the table is built: with the
 * fleet lease (`coalescing: 'fleet'`) or as plain cache-aside (`process`,
 * `none`). Either falls back to the source alone while Valkey is unusable.
 *
 * @param reports what a flight tells its owner before it lands (see {@link FlightReports}).
 * @returns a runner that never rejects: every failure becomes an error outcome.
 */
export function flightRunner(ctx: TableContext, reports: FlightReports): FlightRunner {
  const run = ctx.policy.coalescing === 'fleet' ? runLeased : runPlain;
  return async (flight) => {
    try {
      return await run(ctx, flight, reports);
    } catch (err) {
      return { kind: 'error', error: asStoreError(err, ctx.name, flight.id) };
    }
  };
}

type Run = (ctx: TableContext, flight: Flight, reports: FlightReports) => Promise<Outcome>;

/** Plain cache-aside: GET, load on a miss, compare-and-set fill. */
const runPlain: Run = async (ctx, flight, { serveStale }) => {
  let text: string | null;
  let cached: Envelope | undefined;
  let failed: RememberedFailure | undefined;
  let born = bornFloor(ctx, 0);
  const sentAt = ctx.now();
  try {
    const reading = ctx.epochs.ensure();
    if (reading !== undefined) await reading;
    const read = await ctx.l2.read(flight.id);
    ctx.clock.sawValkeyTime(read.valkeyNowMs);
    born = bornFloor(ctx, read.valkeyNowUs);
    text = read.text;
    failed = read.failed;
    cached = text === null ? undefined : decode(ctx, flight.id, text, read.valkeyNowMs, sentAt);
  } catch (err) {
    if (classifyValkeyError(err) !== 'data') return runDegraded(ctx, flight, err, 'get');
    // A script error about the data: garbage to overwrite, not a sick server.
    ctx.counters.badEnvelopes++;
    text = null;
  }
  const now = ctx.now();
  const purge = cached === undefined ? NOT_PURGED : judge(ctx, cached);
  if (
    cached !== undefined &&
    purge === NOT_PURGED &&
    cached.softExpiresAt > now &&
    cached.version > flight.replaceUpTo
  ) {
    return { kind: 'value', envelope: cached, layer: 'l2', refused: false };
  }
  if (failed !== undefined) {
    return rememberedFailure(ctx, flight, failed, cached);
  }
  const previous = cached !== undefined && servable(ctx, flight, cached, now) ? cached : undefined;
  if (previous !== undefined && !flight.background) serveStale(flight, previous);
  const loaded = confirmNotFound(ctx, flight, await loadOrRemember(ctx, flight, born), previous);
  const version = await fillWithoutLease(ctx, flight, loaded, readMark(text));
  return {
    kind: 'value',
    envelope: version === undefined ? loaded : { ...loaded, version },
    layer: 'origin',
    refused: version === undefined,
  };
};

/**
 * The fleet path: `readOrLease` until there is a value or this flight holds
 * the lease. A contended flight waits for the holder's fill — woken by its
 * PUBLISH (watched from its first contended answer), and answered from it when
 * the event carries the value ({@link fromFill}); else re-checking at once, at
 * least every {@link POLL_MS} and right when the lease expires (so exactly one
 * waiter takes over a dead holder's lease) — never past `waitTimeoutMs`.
 */
const runLeased: Run = async (ctx, flight, reports) => {
  const { name: table, policy, counters, metrics } = ctx;
  // Started before Valkey is first asked (an in-process entry, no command), so a
  // fill published after any contended answer wakes this flight: a contended
  // flight waits for the holder's fill right after its first answer.
  let watch: Watch | undefined =
    flight.waiters.length === 0 ? undefined : ctx.events?.watch(table, flight.id);
  // A duration, on real time: an injected test clock that stands still must not make a waiter poll forever.
  const deadline = performance.now() + policy.waitTimeoutMs;
  let waitStarted: number | undefined;
  // When the holder's lease runs out unless renewed (real time, from its last contended answer):
  // taking the lease before then means the holder released it (a failed load), not a takeover.
  let holderEndsAt = 0;
  // An early refresh must replace the version it was asked about, even while that is fresh.
  let replaceUpTo = flight.replaceUpTo;
  // A value that looked fresh but did not decode (counted once, not again as the stale one).
  let undecodable: string | undefined;
  // What the latest contended answer saw: a fill event is taken only above it, on its clock.
  let seen: Seen = { version: 0, valkeyNowMs: 0, sentAt: 0 };
  const waited = () => {
    if (waitStarted === undefined) return;
    const ms = performance.now() - waitStarted;
    metrics.waitSeconds.observe(ms / 1000);
    ctx.trace?.leaseWaited(flight.id, ms);
  };
  try {
    for (;;) {
      let answer: LeaseAnswer;
      const sentAt = ctx.now();
      try {
        const reading = ctx.epochs.ensure();
        if (reading !== undefined) await reading;
        // What Valkey answers now covers every event before it.
        watch?.reset();
        answer = await ctx.l2.readOrLease(flight.id, policy.leaseMs, replaceUpTo);
      } catch (err) {
        return await runDegraded(ctx, flight, err, 'lease');
      }
      ctx.clock.sawValkeyTime(answer.valkeyNowMs);
      if (answer.kind === 'value') {
        const envelope = decode(ctx, flight.id, answer.text, answer.valkeyNowMs, sentAt);
        if (envelope === undefined) {
          // Its header looked fresh but it does not decode: compete for the lease to overwrite it.
          replaceUpTo = Number.MAX_SAFE_INTEGER;
          undecodable = answer.text;
          continue;
        }
        const purge = judge(ctx, envelope);
        if (purge === NOT_PURGED) {
          waited();
          return { kind: 'value', envelope, layer: 'l2', refused: false };
        }
        // Purged: a load must replace it (one per fleet, under the lease); a soft-purged one
        // is served stale meanwhile, as the stale value of the next answer.
        replaceUpTo = Math.max(replaceUpTo, envelope.version);
        continue;
      }
      const stale =
        answer.stale === undefined || answer.stale === undecodable
          ? undefined
          : decode(ctx, flight.id, answer.stale, answer.valkeyNowMs, sentAt);
      const servableStale =
        stale !== undefined && servable(ctx, flight, stale, ctx.now()) ? stale : undefined;
      if (answer.kind === 'failed') {
        waited();
        return rememberedFailure(ctx, flight, answer, servableStale);
      }
      if (answer.kind === 'leased') {
        const tookOver = waitStarted !== undefined && performance.now() >= holderEndsAt;
        counters.lease[tookOver ? 'takeover' : 'acquired']++;
        waited();
        if (servableStale !== undefined && !flight.background) {
          reports.serveStale(flight, servableStale);
        }
        return await loadAndFill(ctx, flight, reports, answer, servableStale);
      }
      // Contended: another instance loads. A refresh has nothing to wait for, and a
      // reader with a stale value in hand is answered with it (stale-while-revalidate).
      // (Waiters may have attached to a refresh since it started: then it waits like any flight.)
      if (flight.waiters.length === 0) {
        return { kind: 'skipped', retryAfterMs: answer.remainingMs };
      }
      if (servableStale !== undefined) {
        waited();
        return { kind: 'value', envelope: servableStale, layer: 'l2', refused: false };
      }
      holderEndsAt = performance.now() + answer.remainingMs;
      seen = {
        version: Math.max(replaceUpTo, readVersion(answer.stale)),
        valkeyNowMs: answer.valkeyNowMs,
        sentAt,
      };
      if (waitStarted === undefined) {
        waitStarted = performance.now();
        counters.lease.contended++;
        if (watch === undefined && ctx.events !== undefined) {
          // A refresh that callers joined: watch now, and ask Valkey again right
          // after, so no fill event can slip in between.
          watch = ctx.events.watch(table, flight.id);
          continue;
        }
      }
      const leftMs = deadline - performance.now();
      if (leftMs <= 0) {
        waited();
        throw new WaitTimeoutError(
          `no fill from the lease holder within ${policy.waitTimeoutMs} ms`,
          { table, id: flight.id },
        );
      }
      const pauseMs = Math.min(leftMs, Math.max(MIN_POLL_MS, answer.remainingMs + 2), POLL_MS);
      if (watch === undefined) {
        await sleep(pauseMs);
        continue;
      }
      const event = await watch.wait(pauseMs);
      const filled = event === undefined ? undefined : fromFill(ctx, flight.id, event, seen);
      if (filled !== undefined) {
        counters.lease.woken++;
        waited();
        return { kind: 'value', envelope: filled, layer: 'l2', refused: false };
      }
    }
  } finally {
    watch?.close();
  }
};

/** What a contended answer saw: the newest version the key held (or the flight must replace), and Valkey's clock then. */
interface Seen {
  version: number;
  valkeyNowMs: number;
  /** This process's clock when that `readOrLease` was sent. */
  sentAt: number;
}

/** The version of a stored text's header; 0 when absent or not of this format. */
function readVersion(text: string | undefined): number {
  return text === undefined ? 0 : (decodeHeader(text)?.version ?? 0);
}

/**
 * The value a contended flight answers from the holder's `fill` event, when
 * the event carries it (`e`, the text the fill script stored and published in
 * one step: what the key holds at version `v`) and the value would have been
 * answered by `readOrLease`: newer than anything the flight's latest answer saw
 * (`seen`: an event overtaken by a later write is not taken), of this table's
 * source, fresh, and not purged by the epochs this instance holds (proven).
 * Its expiries move onto this process's clock as that answer's did: Valkey's
 * clock advanced between it and the fill as this process's did. Anything else
 * is `undefined`: the flight asks Valkey again.
 */
function fromFill(
  ctx: TableContext,
  id: string,
  event: TableEvent,
  seen: Seen,
): Envelope | undefined {
  const { e: text, v: version } = event;
  if (event.k !== 'fill' || text === undefined || version === undefined) return undefined;
  if (version <= seen.version || ctx.epochs.ensure() !== undefined) return undefined;
  const header = decodeHeader(text);
  if (header?.version !== version || header.fingerprint !== ctx.fingerprint) return undefined;
  const envelope = decode(ctx, id, text, seen.valkeyNowMs, seen.sentAt);
  if (envelope === undefined || envelope.softExpiresAt <= ctx.now()) return undefined;
  return judge(ctx, envelope) === NOT_PURGED ? envelope : undefined;
}

/**
 * Holding the lease (`leased`): load while renewing it, then `fillAndRelease` (over the
 * value the lease was taken over, its mark) at the version {@link fillVersion} gives it; on
 * a failed load, release the lease and wake the waiters. A renewal that finds the lease gone
 * fences the flight: its answer is not stored. `previous` is the servable value the key
 * held, if any (see {@link confirmNotFound}).
 *
 * The waiters are answered once the fill is sent (`reports.loaded`), not once it lands: the
 * answer needs nothing the fill returns. A fill refused after that (another instance's write
 * landed during the load, before its event arrived) is not kept: its landing takes the value
 * out of L1 again.
 */
async function loadAndFill(
  ctx: TableContext,
  flight: Flight,
  reports: FlightReports,
  leased: Extract<LeaseAnswer, { kind: 'leased' }>,
  previous: Envelope | undefined,
): Promise<Outcome> {
  const { token } = leased;
  let envelope: Envelope;
  const lease = keepLease(ctx, flight.id, token);
  try {
    // A failure is remembered before the lease goes: the waiters it wakes find it.
    const born = bornFloor(ctx, leased.valkeyNowUs);
    envelope = confirmNotFound(ctx, flight, await loadOrRemember(ctx, flight, born), previous);
  } catch (err) {
    release(ctx, flight.id, token);
    throw err;
  } finally {
    lease.stop();
  }
  if (flight.superseded) {
    release(ctx, flight.id, token);
    return { kind: 'value', envelope, layer: 'origin', refused: false };
  }
  if (lease.fenced) return { kind: 'value', envelope, layer: 'origin', refused: true };
  envelope = { ...envelope, version: fillVersion(leased.valkeyNowUs, leased.stale) };
  let refused = false;
  const filling = ctx.l2.fillAndRelease(flight.id, token, leased.mark, envelope, ctx.now());
  reports.loaded(flight, envelope);
  try {
    const written = await filling;
    if (written === undefined) {
      refused = true;
      ctx.counters.lease.lost++;
    } else {
      noteWritten(ctx, written);
    }
  } catch (err) {
    valkeyFailed(ctx, err, 'fill');
  }
  return { kind: 'value', envelope, layer: 'origin', refused };
}

/**
 * Renews the lease every third of `leaseMs` while the holder loads (the
 * watchdog of Redisson's locks, etcd's lease keep-alive), so a short lease
 * outlives a slow but live loader while a dead holder's lease expires within
 * `leaseMs`. `fenced` turns true when a renewal finds the lease gone.
 */
function keepLease(
  ctx: TableContext,
  id: string,
  token: string,
): { readonly fenced: boolean; stop(): void } {
  let fenced = false;
  let stopped = false;
  const timer = setInterval(
    () => {
      ctx.l2.renew(id, token, ctx.policy.leaseMs).then(
        (held) => {
          if (stopped || fenced) return;
          if (held) {
            ctx.counters.lease.renewed++;
            return;
          }
          fenced = true;
          ctx.counters.lease.expired++;
          clearInterval(timer);
        },
        (err: unknown) => valkeyFailed(ctx, err, 'renew'),
      );
    },
    Math.max(10, Math.floor(ctx.policy.leaseMs / 3)),
  );
  timer.unref();
  return {
    get fenced() {
      return fenced;
    },
    stop() {
      stopped = true;
      clearInterval(timer);
    },
  };
}

function release(ctx: TableContext, id: string, token: string): void {
  ctx.l2.release(id, token).catch((err: unknown) => valkeyFailed(ctx, err, 'release'));
}

/**
 * Valkey failed (`err`), or its circuit is open: load from the source without
 * the lease. The fill is sent without waiting for it, and only as "set if
 * absent", so it can never overwrite a write that Valkey holds but this
 * instance could not see; a lease a late script may still take expires after
 * `leaseMs`.
 */
async function runDegraded(
  ctx: TableContext,
  flight: Flight,
  err: unknown,
  op: string,
): Promise<Outcome> {
  valkeyFailed(ctx, err, op);
  const envelope = await loadEnvelope(ctx, flight, bornFloor(ctx, 0));
  void fillWithoutLease(ctx, flight, envelope, '');
  return { kind: 'value', envelope, layer: 'origin', refused: false, unconfirmed: true };
}

/**
 * Writes a fill with `fillIfUnchanged`. A write or delete that superseded the
 * flight changed the key's mark, so the compare-and-set refuses this fill; but
 * the mark of an absent key is absent again once a DELETE's tombstone expired
 * or was evicted, so a flight this instance knows superseded (or that may have
 * missed the event saying so) sends nothing: without a lease, the mark is the
 * only fence L2 has.
 *
 * @returns the version Valkey wrote it at, or undefined when it was refused,
 *   not sent or failed (failures are counted, never thrown).
 */
async function fillWithoutLease(
  ctx: TableContext,
  flight: Flight,
  envelope: Envelope,
  expected: string,
): Promise<number | undefined> {
  if (flight.superseded || flight.eventsMissed) return undefined;
  try {
    const written = await ctx.l2.fillIfUnchanged(flight.id, expected, envelope, ctx.now());
    if (written === undefined) return undefined;
    noteWritten(ctx, written);
    return written.version;
  } catch (err) {
    valkeyFailed(ctx, err, 'set');
    return undefined;
  }
}

/**
 * A load of the flight's id failed lately and is remembered (fleet-wide):
 * its callers get a stale value when one is servable (stale-if-error),
 * else `ECC_LOAD_FAILED` with what remains of the memory as `Retry-After`.
 * The source is not asked.
 */
function rememberedFailure(
  ctx: TableContext,
  flight: Flight,
  failed: RememberedFailure,
  stale: Envelope | undefined,
): Outcome {
  ctx.counters.rememberedFailures++;
  if (stale !== undefined && servable(ctx, flight, stale, ctx.now()) && !flight.background) {
    return { kind: 'value', envelope: stale, layer: 'l2', refused: false };
  }
  // The first failure's own cause is in the log of the instance that met it; Valkey keeps only
  // its code, so this line says what this one is.
  const where = {
    table: ctx.name,
    id: flight.id,
    cause: new Error(
      `a failure of the source for this id, remembered for ${failed.remainingMs} ms more: not asked meanwhile`,
    ),
  };
  const Unstorable = UNSTORABLE[failed.failure];
  return {
    kind: 'error',
    error:
      Unstorable === undefined
        ? new LoadFailedError('the source failed to load the item', {
            ...where,
            retryAfterMs: failed.remainingMs,
          })
        : new Unstorable(
            'the source answered this id lately with a row that cannot be stored',
            where,
          ),
  };
}

/**
 * Errors that say the source's answer for an id cannot be stored (a value that is not JSON,
 * tags beyond the bounds): remembered like the source's own failures, so a source that keeps
 * giving that row is not asked on every read, and answered again with their own code.
 */
const UNSTORABLE: Record<string, typeof BadValueError | typeof RowTagsError> = {
  [BadValueError.code]: BadValueError,
  [RowTagsError.code]: RowTagsError,
};

/**
 * The stable code of `err` when it is {@link UNSTORABLE}; not for a row without its
 * `tagsColumn` (the configuration's mistake, answered with the column's name on every read).
 */
const unstorableCode = (err: unknown): string | undefined =>
  err instanceof BadValueError || (err instanceof RowTagsError && !err.missingColumn)
    ? err.code
    : undefined;

/**
 * {@link loadEnvelope}, and when the loader itself failed (it threw: not a
 * timeout, a shed load or a bad id) or answered a row that cannot be stored
 * ({@link UNSTORABLE}), that failure is remembered in Valkey for the id — the
 * origin's `Retry-After` up to `maxErrorTtlMs`, else `errorTtlMs` — so that
 * for that long no instance asks the source again.
 *
 * @throws {LoadFailedError} `ECC_LOAD_FAILED` with `retryAfterMs` for a remembered failure of
 *   the loader, or 0 for an origin's `Retry-After` that is not remembered; `ECC_BAD_VALUE` or `ECC_BAD_ROW_TAGS` as thrown; otherwise what
 *   {@link loadEnvelope} throws.
 */
async function loadOrRemember(ctx: TableContext, flight: Flight, born: number): Promise<Envelope> {
  try {
    return await loadEnvelope(ctx, flight, born);
  } catch (err) {
    const ttlMs = failureTtlMs(ctx, err);
    if (ttlMs <= 0) {
      if (!(err instanceof SourceError) || err.retryAfterMs === undefined) throw err;
      // Not remembered (`Retry-After: 0`, or maxErrorTtlMs 0), but the origin said when to
      // retry: so does the answer, `Retry-After: 1` (whole seconds, at least 1).
      throw new LoadFailedError('the source failed to load the item', {
        table: ctx.name,
        id: flight.id,
        cause: err,
        retryAfterMs: 0,
      });
    }
    const unstorable = unstorableCode(err);
    try {
      await ctx.l2.rememberFailure(flight.id, unstorable ?? LoadFailedError.code, ttlMs);
    } catch (valkeyErr) {
      valkeyFailed(ctx, valkeyErr, 'remember');
      throw err;
    }
    if (unstorable !== undefined) throw err;
    throw new LoadFailedError('the source failed to load the item', {
      table: ctx.name,
      id: flight.id,
      cause: err,
      retryAfterMs: ttlMs,
    });
  }
}

/**
 * A load answered "not found" (`loaded` negative) for an id whose key holds a
 * servable value (`previous`): unless the table's source is authoritative
 * (`confirmNotFoundMs` 0) the value is not thrown away on one answer. Until
 * "not found" has been answered for `confirmNotFoundMs` the load counts as a
 * failed refresh — the value keeps being served stale (stale-if-error), the
 * id backs off and a later refresh asks again — and only then is the
 * negative entry stored.
 *
 * @returns `loaded`, when it may replace what the key holds.
 * @throws {LoadFailedError} `ECC_LOAD_FAILED` while the "not found" is unconfirmed.
 */
function confirmNotFound(
  ctx: TableContext,
  flight: Flight,
  loaded: Envelope,
  previous: Envelope | undefined,
): Envelope {
  if (!loaded.negative || previous === undefined || previous.negative) {
    ctx.notFound.found(flight.id);
    return loaded;
  }
  if (ctx.notFound.confirmed(flight.id)) return loaded;
  ctx.counters.unconfirmedNotFound++;
  throw new LoadFailedError(
    `the source answered "not found" for an item that has a value; kept until that holds for ${ctx.policy.confirmNotFoundMs} ms`,
    { id: flight.id },
  );
}

/** How long a load failure `err` is remembered, ms (0: not at all): the loader's own failures, and rows that cannot be stored. */
function failureTtlMs(ctx: TableContext, err: unknown): number {
  if (err instanceof EchoStoreError && !(err instanceof SourceError) && !unstorableCode(err))
    return 0;
  const { errorTtlMs, maxErrorTtlMs } = ctx.policy;
  const asked = err instanceof SourceError ? err.retryAfterMs : undefined;
  return asked === undefined ? errorTtlMs : Math.min(asked, maxErrorTtlMs);
}

/** Counts and logs a failed Valkey command (one the open circuit did not send is neither). */
function valkeyFailed(ctx: TableContext, err: unknown, op: string): void {
  if (classifyValkeyError(err) === 'unsent') return;
  bump(ctx.counters.valkeyErrors, op);
  ctx.log.debug({ err, op }, 'valkey command failed; answering without L2');
}

/**
 * A stale value may be served while it is within its hard TTL and no hard purge covers it;
 * "not found" never is, and a read-your-writes flight (`fresh`) never serves one.
 */
function servable(ctx: TableContext, flight: Flight, envelope: Envelope, now: number): boolean {
  return (
    !flight.fresh &&
    !envelope.negative &&
    envelope.hardExpiresAt > now &&
    judge(ctx, envelope) !== HARD_PURGED
  );
}

/** Whether a purge covers `envelope` (by the epochs this instance holds). */
function judge(ctx: TableContext, envelope: Envelope) {
  return ctx.epochs.judge(envelope.born ?? 0, envelope.tags);
}

/**
 * The `born` of a load about to start: a time no later than its source read, on Valkey's clock
 * in µs. Valkey's clock in the answer that let it start (`valkeyNowUs`: a purge just before it
 * has a lower epoch, even in the same millisecond), and never before a purge this instance
 * already knows of (it happened before the load starts, even if Valkey's clock stepped back
 * since). Degraded (`valkeyNowUs` 0): the latest Valkey time this instance saw (whole ms,
 * never ahead).
 */
function bornFloor(ctx: TableContext, valkeyNowUs: number): number {
  const seenUs = Math.max(valkeyNowUs, ctx.clock.valkeyNowSeenMs * 1000);
  return Math.max(seenUs, ctx.epochs.newest + 1);
}

/**
 * Decodes an L2 envelope onto this process's clock (`sentAt`: when the command
 * that read it was sent; Valkey's clock read `valkeyNowMs` then) and lets the
 * version clock observe it; counts the undecodable, and refuses (counts and
 * warns of) a row another source wrote.
 */
function decode(
  ctx: TableContext,
  id: string,
  text: string,
  valkeyNowMs: number,
  sentAt: number,
): Envelope | undefined {
  const stored = decodeEnvelope(text);
  if (stored === undefined) {
    ctx.counters.badEnvelopes++;
    return undefined;
  }
  if ((stored.fingerprint ?? '') !== ctx.fingerprint) {
    ctx.counters.foreignRows++;
    ctx.foreignRow(id, stored.fingerprint ?? '');
    return undefined;
  }
  ctx.clock.observe(stored.version);
  return localize(stored, valkeyNowMs, sentAt);
}

/**
 * Loads `flight.id` from the source once admitted, and wraps it in a
 * fresh envelope (`undefined` from the loader becomes a negative envelope).
 *
 * @throws {ShedError} `ECC_SHED` when admission refuses it: its predicted or
 *   actual wait for a slot exceeds `maxQueueDelayMs` (see admission.ts).
 * @throws {LoadTimeoutError} `ECC_LOAD_TIMEOUT`; {@link BadValueError} `ECC_BAD_VALUE`;
 *   anything the loader throws (mapped later by {@link asStoreError}).
 */
async function loadEnvelope(ctx: TableContext, flight: Flight, born: number): Promise<Envelope> {
  const { admission, name: table } = ctx;
  const asked = ctx.trace === undefined ? 0 : performance.now();
  const permit = await admission.acquire((retryAfterMs) => {
    ctx.counters.shed++;
    return new ShedError(
      `table ${table} runs ${admission.active} loads (limit ${admission.limit}); a load would wait longer than maxQueueDelayMs`,
      { table, id: flight.id, retryAfterMs },
    );
  }, flight.id);
  ctx.trace?.admitted(flight.id, performance.now() - asked);
  const started = performance.now();
  const value = await callLoader(ctx, flight, permit);
  return buildEnvelope(ctx, flight.id, value, Math.round(performance.now() - started), born);
}

/**
 * Calls the loader under `loadTimeoutMs` (the one place `loads` is counted).
 * The signal belongs to the flight; a result that lands after the timeout is
 * discarded and counted.
 *
 * `permit` is released when the loader itself settles, not when its callers
 * stop waiting for it (a bulkhead, as a thread pool holds a timed-out call's
 * thread): a load that timed out has its signal aborted, and one that goes on
 * running anyway still counts against the limit, so a stalled source never
 * has more than `maxConcurrentLoads` of this table's loads at once. A loader
 * that never settles keeps its slot.
 */
async function callLoader(ctx: TableContext, flight: Flight, permit: Permit): Promise<unknown> {
  const { policy, counters } = ctx;
  counters.loads++;
  const started = performance.now();
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  /** Set once timed out: warns if the loader has not settled `loadTimeoutMs` later. */
  let stuck: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      const error = new LoadTimeoutError(`load took longer than ${policy.loadTimeoutMs} ms`, {
        table: ctx.name,
        id: flight.id,
      });
      flight.abort.abort(error);
      reject(error);
      // Its slot stays taken until the loader settles: say so if that takes as long again.
      stuck = setTimeout(() => {
        ctx.log.warn(
          { id: flight.id },
          `a load has not settled ${policy.loadTimeoutMs} ms after its timeout aborted its signal; it keeps its admission slot until it does (does the loader honour its signal?)`,
        );
      }, policy.loadTimeoutMs).unref();
    }, policy.loadTimeoutMs);
  });
  let loading: Promise<unknown>;
  try {
    loading = Promise.resolve(ctx.load(flight.id, { signal: flight.abort.signal }));
  } catch (err) {
    loading = Promise.reject(err);
  }
  // The slot goes back when the loader settles; the limit learns how the load ended: a
  // timed-out one failed, and a source's refusal of the id is the client's mistake (the
  // source itself is fine).
  const settled = (end: LoadEnd) => {
    clearTimeout(stuck);
    if (timedOut) counters.lateLoads++;
    permit.release(timedOut ? 'failed' : end);
  };
  loading.then(
    () => settled('ok'),
    (err: unknown) => settled(err instanceof BadIdError ? 'ok' : 'failed'),
  );
  try {
    return await Promise.race([loading, timeout]);
  } finally {
    clearTimeout(timer);
    ctx.metrics.loadSeconds.observe((performance.now() - started) / 1000);
  }
}

/**
 * Wraps a loaded value (or "not found") in a fresh envelope: soft TTL
 * `ttlMs` (or `negativeTtlMs`), hard TTL `+ staleMs`, both jittered; a
 * {@link LoadResult} overrides the table's policy for this row (and gives its tags).
 *
 * @param born when the load started, µs on Valkey's clock (see `bornFloor`).
 * @throws {RowTagsError} `ECC_BAD_ROW_TAGS` for tags beyond the bounds (`store/tags.ts`).
 */
function buildEnvelope(
  ctx: TableContext,
  id: string,
  result: unknown,
  deltaMs: number,
  born: number,
): Envelope {
  const { policy } = ctx;
  let value = result;
  let override: RowPolicy = {};
  let received: string | undefined;
  if (result instanceof LoadResult) {
    value = result.value;
    override = result.policy;
    received = result.json;
  }
  const negative = override.negative === true || value === undefined;
  const json = negative ? 'null' : (received ?? toJson(value));
  if (json === undefined) {
    throw new BadValueError('the loader returned a value that cannot be serialised as JSON', {
      table: ctx.name,
      id,
    });
  }
  const tags = negative ? undefined : rowTags(override.tags, ctx.name, id);
  const envelope = mintEnvelope(
    // Valkey sets the version when it stores the fill; this one stands only while it does not.
    { value: negative ? null : value, json, version: ctx.clock.local(), deltaMs, negative },
    {
      ttlMs: override.ttlMs ?? (negative ? policy.negativeTtlMs : policy.ttlMs),
      staleMs: negative ? 0 : (override.staleMs ?? policy.staleMs),
      jitter: policy.jitter,
    },
    ctx.now(),
  );
  envelope.born = born;
  envelope.fingerprint = ctx.fingerprint;
  if (tags !== undefined) envelope.tags = tags;
  return envelope;
}

/** Maps anything thrown by a loader to the coded error every waiter receives. */
export function asStoreError(err: unknown, table: string, id: string): EchoStoreError {
  // A source's own failure is a cause, not an answer: it is wrapped like any other.
  if (err instanceof EchoStoreError && !(err instanceof SourceError)) {
    // A source's coded error may not know its table (a wrapper of the source, as tagsColumn's):
    // the logs and the answer name it.
    if (err.table === undefined) (err as { table: string | undefined }).table = table;
    return err;
  }
  // The detail (an origin URL, a driver message) stays in `cause` for the logs;
  // clients only ever see this sentence.
  return new LoadFailedError('the source failed to load the item', { table, id, cause: err });
}
