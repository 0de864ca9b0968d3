import type { Message } from './messages.js';

/**
 * The owner's book of writes in flight, per id: the messages parked behind a
 * `put` or `invalidate` that awaits Valkey (replayed in order once it is
 * acknowledged, so a read can never bring back a value the write replaced),
 * and the highest version another write of the id was announced at
 * meanwhile (so an acknowledgement that Valkey has already overtaken does
 * not go into L1). Touched only by the owner.
 */
export class WriteOrder {
  readonly #parked = new Map<string, Message[]>();
  readonly #newer = new Map<string, number>();

  /** Ids with a write in flight. */
  get size(): number {
    return this.#parked.size;
  }

  /** True while a write of `id` awaits Valkey. */
  has(id: string): boolean {
    return this.#parked.has(id);
  }

  /** A write of `id` was sent. */
  begin(id: string): void {
    this.#parked.set(id, []);
  }

  /** Parks `m` behind the write of `id` in flight; false when there is none. */
  park(id: string, m: Message): boolean {
    const parked = this.#parked.get(id);
    if (parked === undefined) return false;
    parked.push(m);
    return true;
  }

  /** Another write of `id` was announced at `version` while ours is in flight. */
  noteEvent(id: string, version: number): void {
    if (!this.#parked.has(id)) return;
    if (version > (this.#newer.get(id) ?? 0)) this.#newer.set(id, version);
  }

  /** True when a write of `id` newer than `version` was announced during ours. */
  overtaken(id: string, version: number): boolean {
    return (this.#newer.get(id) ?? 0) > version;
  }

  /** The write of `id` is acknowledged: what was parked, in arrival order. */
  end(id: string): Message[] {
    const parked = this.#parked.get(id) ?? [];
    this.#parked.delete(id);
    this.#newer.delete(id);
    return parked;
  }

  /** Forgets every write; returns what was parked, by id (for a forced close). */
  drain(): Array<[string, Message[]]> {
    const all = [...this.#parked];
    this.#parked.clear();
    this.#newer.clear();
    return all;
  }
}
