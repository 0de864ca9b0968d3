/**
 * Cluster redirects, seen and counted: `MOVED` (the slot has a new owner),
 * `ASK` (the slot is being migrated and the key is on the importing node) and
 * `TRYAGAIN` (the slot is being migrated and a multi-key command's keys are
 * split between the two nodes, or some are missing on the importing node:
 * redis/redis#9526, the cluster spec's "Multi-keys operations").
 *
 * ioredis follows `MOVED` and `ASK` itself, and answers `TRYAGAIN` by re-sending
 * the command every `retryDelayOnTryAgain` (100 ms) to a random node until
 * `maxRedirections` (16) run out: about a second per command for as long as the
 * move lasts, then a plain `Error` ("Too many Cluster redirections") that looks
 * like a lost connection. Here a `TRYAGAIN` is handed back at once as the
 * server's reply instead: the store's scripts with several keys then take
 * their one-key path (see `l2/scripts.ts`), which a migrating slot always serves.
 */
import type { Cluster } from 'ioredis';

/** The redirects counted by `echostore_valkey_redirects_total{kind}`. */
export type RedirectKind = 'moved' | 'ask' | 'tryagain';

/** Every {@link RedirectKind}, for metrics that list them all. */
export const REDIRECT_KINDS: readonly RedirectKind[] = ['moved', 'ask', 'tryagain'];

type HandleError = (
  error: Error,
  ttl: { value?: unknown },
  handlers: { defaults(): void } & Record<string, unknown>,
) => void;

/** Where a cluster client keeps its listeners (one wrapper per client, however many stores share it). */
const LISTENERS = Symbol('echostore.redirectListeners');

type Watched = Cluster & { [LISTENERS]?: Set<(kind: RedirectKind) => void> };

/**
 * Calls `listener` with every redirect a command of `cluster` receives, and
 * makes `TRYAGAIN` fail the command at once with the server's reply (a
 * `ReplyError` whose message starts `TRYAGAIN`). Installed once per client,
 * by wrapping ioredis's `Cluster#handleError` (the one place it reads a
 * command's redirect; ioredis 5); every later call only adds a listener.
 *
 * @returns a function that removes `listener` (the `TRYAGAIN` rule stays).
 */
export function watchRedirects(
  cluster: Cluster,
  listener: (kind: RedirectKind) => void,
): () => void {
  const watched = cluster as Watched;
  let listeners = watched[LISTENERS];
  if (listeners === undefined) {
    const own = new Set<(kind: RedirectKind) => void>();
    listeners = own;
    watched[LISTENERS] = own;
    const original = (cluster.handleError as HandleError).bind(cluster);
    const wrapped: HandleError = (error, ttl, handlers) => {
      const kind = redirectOf(error);
      if (kind !== undefined) for (const l of own) l(kind);
      if (kind === 'tryagain') handlers.defaults();
      else original(error, ttl, handlers);
    };
    (cluster as unknown as { handleError: HandleError }).handleError = wrapped;
  }
  const set = listeners;
  set.add(listener);
  return () => set.delete(listener);
}

/** The redirect a command's error is, if any (`MOVED 3999 127.0.0.1:6381`, `ASK …`, `TRYAGAIN …`). */
function redirectOf(error: Error): RedirectKind | undefined {
  const [word] = error.message.split(' ', 1);
  if (word === 'MOVED') return 'moved';
  if (word === 'ASK') return 'ask';
  if (word === 'TRYAGAIN') return 'tryagain';
  return undefined;
}

/** True when `err` is a `TRYAGAIN` reply: the command was not run (its slot is being migrated). */
export function isTryAgain(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError' && err.message.startsWith('TRYAGAIN');
}
