/**
 * The write protocol of one table owner: `put` → `written`, `invalidate` →
 * `invalidated`, and the book of writes in flight per id. Runs inside the
 * owner (its methods are message handlers); the Valkey side runs outside and
 * reports back by message.
 *
 * Ordering rules it keeps:
 * - While a write of an id awaits Valkey, later messages for that id are
 *   parked and replayed in order once it is acknowledged, so a read can never
 *   bring back a value the write replaced.
 * - Valkey orders writes: each script raises the version above the key's, and
 *   an acknowledgement that another write overtook (its event, newer, arrived
 *   first) does not go into L1.
 */
import { ValkeyUnavailableError } from '../errors.js';
import { BORN_NOW } from '../l2/format.js';
import { LateWriteError } from '../l2/scripts.js';
import { bump } from '../metrics.js';
import type { L1 } from '../store/l1.js';
import { hardTtlMs, mintEnvelope, tombstone } from '../store/mint.js';
import { classifyValkeyError, isReplyError, valkeyReason } from '../valkey/breaker.js';
import { WARN_WINDOW_MS, WarnLimiter } from '../warn-limiter.js';
import { noteWritten, type TableContext } from './flight.js';
import type { Message } from './messages.js';

const firstWord = (text: string) => text.split(' ', 1)[0] ?? '';

/** How long a DELETE's tombstone outlives the lease: a write queued on a slow connection lands before it expires. */
const TOMBSTONE_EXTRA_MS = 60_000;

type Put = Extract<Message, { kind: 'put' }>;
type WrittenMessage = Extract<Message, { kind: 'written' }>;
type Invalidate = Extract<Message, { kind: 'invalidate' }>;
type Invalidated = Extract<Message, { kind: 'invalidated' }>;

/** The owner's write side. Touched only from the owner's mailbox. */
export class Writes {
  readonly #ctx: TableContext;
  readonly #l1: L1;
  readonly #post: (m: Message) => void;
  readonly #replay: (m: Message) => void;
  /** Per id with a write in flight: the messages parked behind it. */
  readonly #parked = new Map<string, Message[]>();
  /** Per id with a write in flight: the highest version another write was announced at meanwhile. */
  readonly #newer = new Map<string, number>();
  /** Per id with a write in flight: that write (its caller waits for Valkey's answer). */
  readonly #sent = new Map<string, Put | Invalidate>();
  /** One warning per refusal of coherence messages per window (every write is refused alike). */
  readonly #unpublished: WarnLimiter;

  /**
   * @param post posts a message to the owner (for the acknowledgements).
   * @param replay handles a parked message again, in the owner, once its write is acknowledged.
   */
  constructor(ctx: TableContext, l1: L1, post: (m: Message) => void, replay: (m: Message) => void) {
    this.#ctx = ctx;
    this.#l1 = l1;
    this.#post = post;
    this.#replay = replay;
    this.#unpublished = new WarnLimiter((fields, repeats) =>
      ctx.log.warn(
        { ...fields, repeats },
        `${repeats} more writes whose coherence message valkey refused in ${WARN_WINDOW_MS / 1000} s (logged at debug)`,
      ),
    );
  }

  /** Ids with a write in flight. */
  get size(): number {
    return this.#parked.size;
  }

  /** True while a write of `id` awaits Valkey. */
  has(id: string): boolean {
    return this.#parked.has(id);
  }

  /** Parks `m` behind the write of `id` in flight; false when there is none. */
  park(id: string, m: Message): boolean {
    const parked = this.#parked.get(id);
    if (parked === undefined) return false;
    parked.push(m);
    return true;
  }

  /** Another write of `id` was announced at `version` (a coherence event). */
  noteEvent(id: string, version: number): void {
    if (!this.#parked.has(id)) return;
    if (version > (this.#newer.get(id) ?? 0)) this.#newer.set(id, version);
  }

  /**
   * Sends a PUT: a new envelope with the table's TTLs, written by
   * `writeAndCancel` (cancelling the lease refuses any fill in flight anywhere).
   */
  put(m: Put): void {
    const ctx = this.#ctx;
    const { policy } = ctx;
    const now = ctx.now();
    // The version is Valkey's to set (above the key's); 0 stands until it answers.
    const envelope = mintEnvelope(
      { value: m.value, json: m.json, version: 0, deltaMs: 0, negative: false },
      policy,
      now,
    );
    // Its data is as of Valkey's clock when it is stored (no purge before covers it); its own
    // source's fingerprint; no tags (a PUT is reached by a table purge, not a tag's).
    envelope.born = BORN_NOW;
    envelope.fingerprint = ctx.fingerprint;
    this.#parked.set(m.id, []);
    this.#sent.set(m.id, m);
    ctx.l2.write(m.id, envelope, now, hardTtlMs(envelope, now), 'put').then(
      (written) => {
        noteWritten(ctx, written);
        this.#warnUnpublished('put', m.id, written.unpublished);
        const { version } = written;
        // In L1, born as Valkey stamped it (its µs clock at the write; else its ms, never later).
        const born = written.valkeyNowUs ?? written.valkeyNowMs * 1000;
        this.#post({
          kind: 'written',
          id: m.id,
          envelope: { ...envelope, version, born },
          waiter: m.waiter,
        });
      },
      (error: unknown) =>
        this.#post({ kind: 'written', id: m.id, envelope, error, waiter: m.waiter }),
    );
  }

  /** Valkey answered a PUT. */
  written(m: WrittenMessage): void {
    if (m.error === undefined) {
      // This instance's own acknowledged write goes into its L1, unless Valkey
      // already applied a later write of the id (its event arrived before this
      // acknowledgement): then L1 must not hold ours.
      if ((this.#newer.get(m.id) ?? 0) > m.envelope.version) this.#l1.delete(m.id);
      else this.#l1.set(m.id, m.envelope, this.#ctx.now());
      m.waiter.resolve({ version: m.envelope.version });
    } else {
      // The write may or may not have reached Valkey: drop L1 so the next read asks L2.
      this.#l1.delete(m.id);
      m.waiter.reject(this.valkeyError('put', m.id, m.error));
    }
    this.#end(m.id);
  }

  /**
   * Sends a DELETE: a tombstone (kept `leaseMs` + 60 s) written by
   * `writeAndCancel`, so no fill that read the old value can bring it back.
   * When Valkey is out of memory (it refuses the tombstone, or the circuit is
   * open for that), the value and the lease are deleted instead (`forget`):
   * DEL is accepted under OOM, and the fleet still hears of the deletion.
   * `soft`: the value is kept in Valkey, stale from now (`staleAndCancel`), not tombstoned.
   */
  invalidate(m: Invalidate): void {
    const ctx = this.#ctx;
    this.#l1.delete(m.id);
    this.#parked.set(m.id, []);
    this.#sent.set(m.id, m);
    const now = ctx.now();
    // Of this table's source, so no instance takes it for another source's row.
    const dead = { ...tombstone(now), born: BORN_NOW, fingerprint: ctx.fingerprint };
    const pxMs = ctx.policy.leaseMs + TOMBSTONE_EXTRA_MS;
    // Soft: the value stays in Valkey, stale (the next read anywhere answers it, one refresh
    // runs); the lease is cancelled all the same, so a fill that read the old row is refused.
    const sent =
      m.soft === true
        ? ctx.l2.markStale(m.id, dead, now, pxMs)
        : ctx.l2.write(m.id, dead, now, pxMs, 'del');
    sent
      .catch((error: unknown) => {
        if (valkeyReason(error) !== 'oom') throw error;
        ctx.counters.tombstoneFallbacks++;
        return ctx.l2.forget(m.id);
      })
      .then(
        (written) => {
          noteWritten(ctx, written);
          this.#warnUnpublished('delete', m.id, written.unpublished);
          this.#post({ kind: 'invalidated', id: m.id, waiter: m.waiter });
        },
        (error: unknown) => this.#post({ kind: 'invalidated', id: m.id, error, waiter: m.waiter }),
      );
  }

  /** Valkey answered a DELETE. */
  invalidated(m: Invalidated): void {
    this.#l1.delete(m.id);
    if (m.error === undefined) {
      this.#ctx.counters.invalidations++;
      m.waiter.resolve();
    } else {
      m.waiter.reject(this.valkeyError('delete', m.id, m.error));
    }
    this.#end(m.id);
  }

  /** Forgets the write of `id` without replaying: what was parked behind it (its handler failed). */
  abandon(id: string): Message[] {
    const parked = this.#parked.get(id) ?? [];
    this.#parked.delete(id);
    this.#newer.delete(id);
    this.#sent.delete(id);
    return parked;
  }

  /**
   * Forgets every write; returns, by id, the write in flight and what was parked behind it (for
   * a forced close, once the writes' deadline has passed: a write still unanswered then may have
   * run before it, never after).
   */
  drain(): Array<[string, Message[]]> {
    const all = [...this.#parked].map(([id, parked]): [string, Message[]] => {
      const sent = this.#sent.get(id);
      return [id, sent === undefined ? parked : [sent, ...parked]];
    });
    this.#parked.clear();
    this.#newer.clear();
    this.#sent.clear();
    return all;
  }

  /** The write of `id` is acknowledged: replay what arrived meanwhile, in order. */
  #end(id: string): void {
    for (const m of this.abandon(id)) this.#replay(m);
  }

  /**
   * The client's error, saying what is known of the write: not sent (open
   * circuit), refused (a reply error: each script's first effect is the one
   * refused, so nothing was written), too late (run after its deadline:
   * nothing was written), or unconfirmed (a timeout: it may have landed, but
   * only before the moment it was given up on, so never after a write
   * acknowledged after this error).
   */
  valkeyError(
    op: 'put' | 'delete' | 'purge',
    id: string | undefined,
    cause: unknown,
  ): ValkeyUnavailableError {
    if (cause instanceof LateWriteError) {
      bump(this.#ctx.counters.valkeyErrors, op === 'delete' ? 'del' : op);
      return new ValkeyUnavailableError(
        `valkey ran the ${op} after its deadline: nothing was written`,
        { table: this.#ctx.name, ...(id === undefined ? {} : { id }), cause, notSent: true },
      );
    }
    const kind = classifyValkeyError(cause);
    if (kind !== 'unsent') bump(this.#ctx.counters.valkeyErrors, op === 'delete' ? 'del' : op);
    else if (op !== 'purge') this.#ctx.counters.writesRefused[op === 'put' ? 'put' : 'del']++;
    const reason = valkeyReason(cause);
    const message =
      kind === 'unsent'
        ? `valkey is unavailable (${reason}): the ${op} was not sent`
        : isReplyError(cause)
          ? `valkey refused the ${op} (${reason ?? firstWord(cause.message)}): nothing was written`
          : `valkey did not confirm the ${op}; it may or may not have been applied`;
    return new ValkeyUnavailableError(message, {
      table: this.#ctx.name,
      ...(id === undefined ? {} : { id }),
      cause,
      // A refused write wrote nothing, like one never sent.
      notSent: kind === 'unsent' || isReplyError(cause),
    });
  }

  /** A write happened but its coherence message was refused (counted by {@link noteWritten}): other instances may keep the old row in L1 until its TTL. */
  #warnUnpublished(op: 'put' | 'delete', id: string, refusal: string | undefined): void {
    if (refusal === undefined) return;
    const level = this.#unpublished.take({ op, refusal }) ? 'warn' : 'debug';
    this.#ctx.log[level](
      { id, op, refusal },
      'written, but valkey refused the coherence message: other instances may serve the old row from L1 until its TTL',
    );
  }
}
