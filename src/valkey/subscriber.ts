/**
 * The connection a store's event subscriber listens on. Coherence events and
 * fill wake-ups are plain PUBLISH messages; in a cluster, the server
 * broadcasts each over the cluster bus to every node, so one SUBSCRIBE on any
 * node hears every shard's events (docs/operations.md#cluster weighs this
 * against sharded Pub/Sub).
 */
import { randomInt } from 'node:crypto';
import { connect as netConnect, type Socket } from 'node:net';
import { type TLSSocket, connect as tlsConnect } from 'node:tls';
import { AbstractConnector, type Cluster, Redis, type RedisOptions } from 'ioredis';
import { passwordSourceOf, refreshPassword } from './credentials.js';
import { isCluster } from './slots.js';
import type { Address } from './topology.js';

/**
 * A subscriber connection for `client`'s events, with `overrides` applied:
 * `client.duplicate()` for a single server (a Sentinel-managed client asks the
 * sentinels for the primary on every reconnect, so it follows a failover), or,
 * for a cluster, a connection to one of its nodes (a random primary, or seed
 * node before the slot map is known) that moves on to the next primary the
 * cluster client knows whenever it loses its node (a killed node, a
 * failover), through its own retry strategy. Either way the
 * connection emits `ready` after each reconnect, when the subscriber flushes
 * L1 (messages sent meanwhile were lost) and re-subscribes (`l2/events.ts`).
 */
export function openSubscriber(client: Redis | Cluster, overrides: Partial<RedisOptions>): Redis {
  if (!isCluster(client)) return client.duplicate(overrides);
  // A random first pick spreads a fleet's subscribers over the primaries, so that one primary's
  // death flushes the L1 of about a third of the instances, not of all of them.
  let turn = randomInt(1_000_000);
  const next = (): Address | undefined => {
    // Before the slot map is known these are the seed nodes, replicas perhaps among them: a
    // replica hears the broadcast too, and connecting at once keeps the store's first events.
    const known = client.nodes('master');
    const node = known[turn++ % Math.max(1, known.length)];
    const { host, port } = node?.options ?? {};
    return host === undefined || port === undefined ? undefined : { host, port };
  };
  const options: RedisOptions = {
    ...client.options.redisOptions,
    ...overrides,
    Connector: rotatingConnector(next),
    retryStrategy: (attempt: number) => Math.min(50 * 2 ** Math.min(attempt, 5), 1_000),
  };
  const subscriber = new Redis(options);
  // A password file is read again on each of its reconnects too, as on the nodes' connections.
  const password = passwordSourceOf(client.options.redisOptions);
  if (password !== undefined) refreshPassword(subscriber, password);
  return subscriber;
}

/**
 * An ioredis connector that asks `next` for the node to connect to on every
 * (re)connect, and records it in the client's `host` and `port` options (so
 * logs and tests can see which node the subscriber is on).
 */
function rotatingConnector(next: () => Address | undefined) {
  return class RotatingConnector extends AbstractConnector {
    readonly #options: RedisOptions;

    // ioredis passes the client's own options object (typed `unknown` by its ConnectorConstructor).
    constructor(options: unknown) {
      super((options as RedisOptions).disconnectTimeout ?? 2_000);
      this.#options = options as RedisOptions;
    }

    connect(): Promise<Socket | TLSSocket> {
      this.connecting = true;
      return new Promise((resolve, reject) => {
        // As ioredis's own connector, the stream is handed over on a later tick, unless closed
        // meanwhile; a rejection would end the client for good, so no known node means wait.
        const attempt = () => {
          if (!this.connecting) {
            reject(new Error('Connection is closed.'));
            return;
          }
          const address = next();
          if (address === undefined) {
            setTimeout(attempt, 100).unref();
            return;
          }
          const { host, port } = address;
          this.#options.host = host;
          this.#options.port = port;
          const tls = this.#options.tls;
          this.stream =
            tls === undefined ? netConnect({ host, port }) : tlsConnect({ ...tls, host, port });
          this.stream.once('error', (err) => {
            this.firstError = err;
          });
          resolve(this.stream);
        };
        process.nextTick(attempt);
      });
    }
  };
}
