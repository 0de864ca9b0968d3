import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';

/** Tuning of {@link Breaker}. */
export interface BreakerOptions {
  /** Consecutive failed commands that open the circuit. Default 3. */
  failureThreshold?: number;
  /** How long an open circuit skips Valkey before one command probes it again, ms. Default 1,000. */
  coolDownMs?: number;
  /** Clock, epoch ms (tests inject one). Default `Date.now`. */
  now?: () => number;
}

/**
 * Reply-error prefixes that say the *server* cannot serve (memory, role,
 * loading, a busy script, persistence, auth, cluster state): they count
 * against Valkey like a timeout. Any other reply error (WRONGTYPE, a script's
 * own error) is about the data, and proves the server answered.
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
  'TRYAGAIN',
];

/** Thrown by {@link Breaker.run} when the circuit is open: the command was not sent. */
export class CircuitOpenError extends Error {
  override readonly name = 'CircuitOpenError';
  constructor() {
    super('valkey circuit is open: the command was not sent');
  }
}

/**
 * How an error of a Valkey command bears on the server's health: `health`
 * (timeout, connection lost, or a reply such as `OOM`/`READONLY`), `data` (a
 * reply about the key or script, e.g. `WRONGTYPE`: the server is fine), or
 * `unsent` (the circuit was open).
 */
export function classifyValkeyError(err: unknown): 'health' | 'data' | 'unsent' {
  if (err instanceof CircuitOpenError) return 'unsent';
  if (!(err instanceof Error) || err.name !== 'ReplyError') return 'health';
  // ioredis wraps a script's error: "ERR Error running script … : OOM command not allowed …".
  const text = err.message;
  for (const prefix of HEALTH_REPLY_PREFIXES) {
    if (text.startsWith(prefix) || text.includes(`: ${prefix} `) || text.includes(` -${prefix} `))
      return 'health';
  }
  return 'data';
}

/**
 * The circuit breaker in front of Valkey; its only entry is {@link run}
 * (cockatiel's shape). While the circuit is open the store is *degraded*:
 * misses go straight to the source and writes fail fast, so a dead or paused
 * server costs a request nothing instead of a command timeout. After each
 * cool-down exactly one command probes the server; the probe is taken and
 * given back inside `run`, whatever the command does, and the circuit closes
 * on the first command the server answers. Transitions are logged once each way.
 *
 * States: closed (failures < threshold) → open (skip until `openUntil`) →
 * half-open (one probe in flight) → closed on an answer, open again on a failure.
 */
export class Breaker {
  readonly #client: Redis | Cluster;
  readonly #log: Logger;
  readonly #threshold: number;
  readonly #coolDownMs: number;
  readonly #now: () => number;
  #failures = 0;
  #openUntil = 0;
  #probing = false;
  #reported = false;
  readonly #onReport = () => this.#report();

  constructor(client: Redis | Cluster, log: Logger, options: BreakerOptions = {}) {
    this.#client = client;
    this.#log = log;
    this.#threshold = options.failureThreshold ?? 3;
    this.#coolDownMs = options.coolDownMs ?? 1_000;
    this.#now = options.now ?? Date.now;
    client.on('ready', this.#onReport);
    client.on('close', this.#onReport);
  }

  /**
   * Runs one Valkey command through the circuit.
   *
   * @returns what `op` resolves with.
   * @throws {CircuitOpenError} when the circuit is open or the client is not
   *   connected (`op` was not called); otherwise whatever `op` throws, after
   *   counting it ({@link classifyValkeyError}).
   */
  async run<T>(op: () => Promise<T>): Promise<T> {
    const admitted = this.#admit();
    if (admitted === false) throw new CircuitOpenError();
    try {
      const result = await op();
      this.#answered();
      return result;
    } catch (err) {
      if (classifyValkeyError(err) === 'health') this.#failed();
      else this.#answered();
      throw err;
    } finally {
      if (admitted === 'probe') this.#probing = false;
    }
  }

  /** True while the store runs degraded (`/readyz` and `echostore_valkey_degraded` show it). */
  get degraded(): boolean {
    return this.#client.status !== 'ready' || this.#failures >= this.#threshold;
  }

  /** Stops reporting connection events (the client may be the caller's). */
  close(): void {
    this.#client.off('ready', this.#onReport);
    this.#client.off('close', this.#onReport);
  }

  /** `true` (closed circuit), `'probe'` (the one probe of a half-open circuit) or `false`. */
  #admit(): boolean | 'probe' {
    if (this.#client.status !== 'ready') {
      this.#report();
      return false;
    }
    if (this.#failures < this.#threshold) return true;
    const now = this.#now();
    if (now < this.#openUntil || this.#probing) return false;
    this.#probing = true;
    this.#openUntil = now + this.#coolDownMs;
    return 'probe';
  }

  #answered(): void {
    this.#failures = 0;
    if (this.#reported) this.#report();
  }

  #failed(): void {
    this.#failures++;
    if (this.#failures >= this.#threshold) {
      this.#openUntil = this.#now() + this.#coolDownMs;
      this.#report();
    }
  }

  #report(): void {
    const degraded = this.degraded;
    if (degraded === this.#reported) return;
    this.#reported = degraded;
    if (degraded) {
      this.#log.warn(
        { valkey: this.#client.status },
        'valkey unusable: degraded (L1 hits answer, misses go to the source, writes fail)',
      );
    } else {
      this.#log.info('valkey usable again: leaving degraded mode');
    }
  }
}
