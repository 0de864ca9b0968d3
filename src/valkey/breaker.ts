import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';

/** Tuning of {@link Breaker}. */
export interface BreakerOptions {
  /** Consecutive unanswered commands (timeouts, lost connection) that open the circuit. Default 3. */
  failureThreshold?: number;
  /** How long an open circuit skips Valkey before one command probes it again, ms. Default 1,000. */
  coolDownMs?: number;
  /**
   * The store's own health check (a write and a publish, see `probe.ts`). When
   * given, the breaker sends it by itself: after each cool-down while the
   * circuit is open (so it closes without traffic), and every `probeIntervalMs`
   * while it is closed (so a server that turned read-only or full is noticed
   * without traffic). While the server *refuses* (see {@link DegradedReason}),
   * only this probe may close the circuit. Default: none (requests probe).
   */
  probe?: () => Promise<unknown>;
  /** How often the probe runs while the circuit is closed, ms. Default 5,000. */
  probeIntervalMs?: number;
  /** Clock, epoch ms (tests inject one). Default `Date.now`. */
  now?: () => number;
}

/** Options of one {@link Breaker.run} call. */
export interface RunOptions {
  /**
   * Send it even while the circuit is open because the server refuses (it
   * answers at once, so trying costs no timeout), as long as the client is
   * connected: a command the server may still accept, such as `DEL` under OOM.
   * Its success proves nothing about the refusal, so it never closes the circuit.
   */
  whileRefused?: boolean;
  /** The command's first key: on a cluster it picks the shard's breaker (see shard-breaker.ts); one breaker ignores it. */
  key?: string;
}

/**
 * Reply-error prefixes that say the *server* cannot serve (memory, role,
 * loading, a busy script, persistence, auth, permissions, cluster state):
 * they count against Valkey. Any other reply error (WRONGTYPE, a script's own
 * error) is about the data, and proves the server answered. So is `TRYAGAIN`
 * (and `ASK`/`MOVED`, should one ever reach here): the slot of the key is
 * being moved, the node is healthy, and a migration must not degrade the
 * store (the scripts answer it by their one-key path, see `l2/scripts.ts`).
 */
const HEALTH_REPLY_PREFIXES = [
  'OOM',
  'READONLY',
  'LOADING',
  'BUSY',
  'MISCONF',
  'NOAUTH',
  'NOPERM',
  'MASTERDOWN',
  'CLUSTERDOWN',
] as const;

/** A command inside a script refused by the ACL: Redis 7.0 words it `ERR The user executing the script can't …`. */
export const SCRIPT_ACL_REFUSAL = "The user executing the script can't";

/**
 * Why the store runs degraded: `disconnected` (the client is not connected),
 * `unreachable` (commands timed out or the connection dropped), or the
 * server's refusal, named after its reply (`OOM` → `oom`, `READONLY` →
 * `readonly`, `NOPERM` or a script's ACL refusal → `noperm`, …).
 */
export type DegradedReason =
  | 'disconnected'
  | 'unreachable'
  | Lowercase<(typeof HEALTH_REPLY_PREFIXES)[number]>;

/** Every {@link DegradedReason}, for metrics that list them all. */
export const DEGRADED_REASONS: readonly DegradedReason[] = [
  'disconnected',
  'unreachable',
  ...HEALTH_REPLY_PREFIXES.map((p) => p.toLowerCase() as DegradedReason),
];

/** Thrown by {@link Breaker.run} when the circuit is open: the command was not sent. */
export class BreakerOpenError extends Error {
  override readonly name = 'BreakerOpenError';
  /** Why the circuit is open. */
  readonly reason: DegradedReason;
  constructor(reason: DegradedReason = 'unreachable') {
    super(`valkey circuit is open (${reason}): the command was not sent`);
    this.reason = reason;
  }
}

/** The health prefix a reply error's text carries (itself, or inside a script's error), if any. */
function refusalOf(text: string): DegradedReason | undefined {
  if (text.includes(SCRIPT_ACL_REFUSAL)) return 'noperm';
  // ioredis (Redis 6) wraps a script's error: "ERR Error running script … : OOM command not allowed …".
  for (const prefix of HEALTH_REPLY_PREFIXES) {
    if (text.startsWith(prefix) || text.includes(`: ${prefix} `) || text.includes(` -${prefix} `))
      return prefix.toLowerCase() as DegradedReason;
  }
  return undefined;
}

/**
 * How an error of a Valkey command bears on the server's health: `health`
 * (timeout, connection lost, or a refusal such as `OOM`/`READONLY`/`NOPERM`),
 * `data` (a reply about the key or script, e.g. `WRONGTYPE`: the server is
 * fine), or `unsent` (the circuit was open).
 */
export function classifyValkeyError(err: unknown): 'health' | 'data' | 'unsent' {
  if (err instanceof BreakerOpenError) return 'unsent';
  return valkeyReason(err) === undefined ? 'data' : 'health';
}

/**
 * The {@link DegradedReason} behind a failed command: the open circuit's, a
 * refusal's, `unreachable` for a timeout or a lost connection; undefined for
 * a reply about the data.
 */
export function valkeyReason(err: unknown): DegradedReason | undefined {
  if (err instanceof BreakerOpenError) return err.reason;
  if (!isReplyError(err)) return 'unreachable';
  return refusalOf(err.message);
}

/** A reply error: the server answered (ioredis names them `ReplyError`). */
export function isReplyError(err: unknown): err is Error {
  return err instanceof Error && err.name === 'ReplyError';
}

const isRefusal = (reason: DegradedReason | undefined) =>
  reason !== undefined && reason !== 'disconnected' && reason !== 'unreachable';

/**
 * The circuit breaker in front of Valkey; its only entry is {@link run}
 * (cockatiel's shape). While the circuit is open the store is *degraded*:
 * misses go straight to the source and writes fail fast, so a dead, paused or
 * refusing server costs a request nothing. After each cool-down, or at once
 * when the client has connected again, exactly one command probes the server; the probe is taken and given back inside `run`,
 * whatever the command does. Transitions are logged once each way.
 *
 * States: closed → open → half-open (one probe in flight) → closed on an
 * answer, open again on a failure. Unanswered commands (timeouts, a lost
 * connection) open it after `failureThreshold` in a row; a refusal (`OOM`,
 * `READONLY`, `NOPERM`, … see {@link DegradedReason}) opens it at once: the
 * server said so. While it refuses, a request's command is no proof that it
 * stopped (a read succeeds under OOM), so only the store's own probe, a write
 * and a publish, closes the circuit again; it runs every half cool-down, so the
 * store is ready again within a second of the server.
 */
export class Breaker {
  readonly #client: Redis | Cluster;
  readonly #log: Logger;
  readonly #threshold: number;
  readonly #coolDownMs: number;
  readonly #probe: (() => Promise<unknown>) | undefined;
  readonly #probeIntervalMs: number;
  readonly #now: () => number;
  /** Consecutive health failures; at `#threshold` the circuit is open. */
  #failures = 0;
  /** Why the last health failure happened (the open circuit's reason). */
  #cause: DegradedReason = 'unreachable';
  #openUntil = 0;
  #probing = false;
  #lastProbeAt = 0;
  #reported = false;
  #timer: NodeJS.Timeout | undefined;
  readonly #onReport = () => this.#report();
  /**
   * A new connection is news that the server answers again: a circuit open
   * because commands went unanswered probes at the next command instead of
   * after the rest of its cool-down. A refusal is not lifted by reconnecting.
   */
  readonly #onReady = () => {
    if (this.#failures >= this.#threshold && !isRefusal(this.#cause))
      this.#openUntil = Math.min(this.#openUntil, this.#now());
    this.#report();
  };

  constructor(client: Redis | Cluster, log: Logger, options: BreakerOptions = {}) {
    this.#client = client;
    this.#log = log;
    this.#threshold = options.failureThreshold ?? 3;
    this.#coolDownMs = options.coolDownMs ?? 1_000;
    this.#probe = options.probe;
    this.#probeIntervalMs = options.probeIntervalMs ?? 5_000;
    this.#now = options.now ?? Date.now;
    client.on('ready', this.#onReady);
    client.on('close', this.#onReport);
    if (this.#probe !== undefined) {
      // Looks often, probes rarely: at most once per (half) cool-down while open.
      this.#timer = setInterval(() => this.#tick(), Math.min(100, this.#coolDownMs / 2));
      this.#timer.unref();
    }
  }

  /**
   * Runs one Valkey command through the circuit.
   *
   * @returns what `op` resolves with.
   * @throws {BreakerOpenError} when the circuit is open or the client is not
   *   connected (`op` was not called); otherwise whatever `op` throws, after
   *   counting it ({@link classifyValkeyError}).
   */
  async run<T>(op: () => Promise<T>, options: RunOptions = {}): Promise<T> {
    const admitted = this.#admit(op, options.whileRefused === true);
    if (admitted === false) throw new BreakerOpenError(this.reason);
    try {
      const result = await op();
      if (admitted !== 'bypass') this.#answered();
      return result;
    } catch (err) {
      const reason = valkeyReason(err);
      if (reason !== undefined) this.#failed(reason);
      else if (admitted !== 'bypass') this.#answered();
      throw err;
    } finally {
      if (admitted === 'probe') this.#probing = false;
    }
  }

  /** True while the store runs degraded (`/readyz` and `echostore_valkey_degraded` show it). */
  get degraded(): boolean {
    return this.reason !== undefined;
  }

  /** Why the store runs degraded; undefined while it does not. */
  get reason(): DegradedReason | undefined {
    if (this.#client.status !== 'ready') return 'disconnected';
    return this.#failures >= this.#threshold ? this.#cause : undefined;
  }

  /** Stops reporting connection events and probing (the client may be the caller's). */
  close(): void {
    this.#client.off('ready', this.#onReady);
    this.#client.off('close', this.#onReport);
    clearInterval(this.#timer);
  }

  /**
   * `true` (closed circuit), `'probe'` (the one probe of a half-open circuit),
   * `'bypass'` (a `whileRefused` command while the server refuses) or `false`.
   */
  #admit(op: () => Promise<unknown>, whileRefused: boolean): boolean | 'probe' | 'bypass' {
    if (this.#client.status !== 'ready') {
      this.#report();
      return false;
    }
    if (this.#failures < this.#threshold) return true;
    const refusing = isRefusal(this.#cause);
    if (whileRefused && refusing) return 'bypass';
    const now = this.#now();
    if (now < this.#openUntil || this.#probing) return false;
    if (refusing && this.#probe !== undefined && op !== this.#probe) return false;
    this.#probing = true;
    this.#openUntil = now + this.#openMs(this.#cause);
    return 'probe';
  }

  #answered(): void {
    this.#failures = 0;
    if (this.#reported) this.#report();
  }

  #failed(reason: DegradedReason): void {
    const changed = reason !== this.#cause && this.#failures >= this.#threshold;
    this.#cause = reason;
    this.#failures = isRefusal(reason)
      ? Math.max(this.#failures + 1, this.#threshold)
      : this.#failures + 1;
    if (this.#failures >= this.#threshold) {
      this.#openUntil = this.#now() + this.#openMs(reason);
      if (changed) this.#log.warn({ reason }, 'valkey still unusable, now for another reason');
      this.#report();
    }
  }

  /**
   * How long the circuit stays open before the next probe: `coolDownMs`, or
   * half of it while the server refuses and the store's own probe is the one
   * that may close it (a refusal answers at once, so probing costs nothing).
   */
  #openMs(reason: DegradedReason): number {
    return isRefusal(reason) && this.#probe !== undefined ? this.#coolDownMs / 2 : this.#coolDownMs;
  }

  /** The store's own probe: after each cool-down while open, every `probeIntervalMs` while closed. */
  #tick(): void {
    const probe = this.#probe;
    if (probe === undefined || this.#client.status !== 'ready' || this.#probing) return;
    const now = this.#now();
    const due = this.degraded
      ? now >= this.#openUntil
      : now - this.#lastProbeAt >= this.#probeIntervalMs;
    if (!due) return;
    this.#lastProbeAt = now;
    // The outcome is counted by run; nothing waits for it.
    this.run(probe).catch(() => {});
  }

  #report(): void {
    const degraded = this.degraded;
    if (degraded === this.#reported) return;
    this.#reported = degraded;
    if (degraded) {
      this.#log.warn(
        { valkey: this.#client.status, reason: this.reason },
        'valkey unusable: degraded (L1 hits answer, misses go to the source, writes fail)',
      );
    } else {
      this.#log.info('valkey usable again: leaving degraded mode');
    }
  }
}
