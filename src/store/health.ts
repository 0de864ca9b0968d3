import type { Redis } from 'ioredis';
import type { Logger } from 'pino';

/** Tuning of {@link ValkeyHealth}. */
export interface HealthOptions {
  /** Consecutive failed commands that open the circuit. Default 3. */
  failureThreshold?: number;
  /** How long an open circuit skips Valkey before one command probes it again, ms. Default 1,000. */
  coolDownMs?: number;
}

/**
 * Whether Valkey is usable right now: a circuit breaker over the client's
 * connection state and the outcome of recent commands. While it is open the
 * store is *degraded*: misses go straight to the source and writes fail fast,
 * so a dead or paused server costs a request nothing instead of a command
 * timeout. After each cool-down exactly one command probes the server; the
 * circuit closes only when a command succeeds. Transitions are logged once
 * each way. Reply errors (WRONGTYPE, a script error) are about the data, not
 * the server, and never count.
 */
export class ValkeyHealth {
  readonly #client: Redis;
  readonly #log: Logger;
  readonly #threshold: number;
  readonly #coolDownMs: number;
  #failures = 0;
  #openUntil = 0;
  #probing = false;
  #reported = false;

  constructor(client: Redis, log: Logger, options: HealthOptions = {}) {
    this.#client = client;
    this.#log = log;
    this.#threshold = options.failureThreshold ?? 3;
    this.#coolDownMs = options.coolDownMs ?? 1_000;
    client.on('ready', () => this.#report());
    client.on('close', () => this.#report());
  }

  /**
   * True when a command may be sent: connected and the circuit closed, or —
   * once per cool-down while it is open — the one probe.
   */
  usable(): boolean {
    if (this.#client.status !== 'ready') {
      this.#report();
      return false;
    }
    if (this.#failures < this.#threshold) return true;
    const now = Date.now();
    if (now < this.#openUntil || this.#probing) return false;
    this.#probing = true;
    this.#openUntil = now + this.#coolDownMs;
    return true;
  }

  /** True while the store runs degraded (`/readyz` and `echostore_valkey_degraded` show it). */
  get degraded(): boolean {
    return this.#client.status !== 'ready' || this.#failures >= this.#threshold;
  }

  /** A command succeeded: closes the circuit. */
  succeeded(): void {
    this.#failures = 0;
    this.#probing = false;
    if (this.#reported) this.#report();
  }

  /** A command failed or timed out: opens the circuit after `failureThreshold` in a row. */
  failed(err?: unknown): void {
    if (err instanceof Error && err.name === 'ReplyError') return;
    this.#failures++;
    this.#probing = false;
    if (this.#failures >= this.#threshold) {
      this.#openUntil = Date.now() + this.#coolDownMs;
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
