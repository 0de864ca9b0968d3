/** The version clock: the highest version this process has seen from Valkey. */
/**
 * The highest version this process has seen from Valkey. Versions come from
 * Valkey's clock (the scripts write them, µs since the epoch, always above the
 * key's previous one), so this instance's wall clock never orders anything. A
 * flight starts "at" the clock's `last`: a write of its id announced with a
 * higher version came after it and supersedes it.
 *
 * An observation further than a minute ahead of Valkey's latest known time is
 * ignored, so a planted version cannot push `last` out of reach of real writes.
 */
export class VersionClock {
  #last = 0;
  #horizon = 0;
  #seenMs = 0;

  /** The highest version observed (0 before any). */
  get last(): number {
    return this.#last;
  }

  /** The latest time Valkey's clock was seen to read, ms (0 before any): never ahead of it. */
  get valkeyNowSeenMs(): number {
    return this.#seenMs;
  }

  /** Valkey said its clock reads `valkeyNowMs`. */
  sawValkeyTime(valkeyNowMs: number): void {
    const horizon = (valkeyNowMs + 60_000) * 1000;
    if (horizon > this.#horizon) this.#horizon = horizon;
    if (valkeyNowMs > this.#seenMs) this.#seenMs = valkeyNowMs;
  }

  /**
   * Whether a time announced by another instance, µs on Valkey's clock, is plausible: not
   * beyond a minute past Valkey's latest known time (unknown yet: any is).
   */
  plausible(us: number): boolean {
    return this.#horizon === 0 || us <= this.#horizon;
  }

  /** Takes note of a version read from Valkey or announced by an event. */
  observe(version: number): void {
    if (version > this.#last && version <= this.#horizon) this.#last = version;
  }

  /** Valkey wrote `version` when its clock read `valkeyNowMs`. */
  wrote(version: number, valkeyNowMs: number): void {
    this.sawValkeyTime(valkeyNowMs);
    this.observe(version);
  }

  /** A version for a value that never reached Valkey (loaded while it was unusable): above every one seen. */
  local(): number {
    return this.#last + 1;
  }
}
