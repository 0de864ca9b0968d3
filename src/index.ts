/**
 * EchoStore for Node: a cache-aside store with single-flight per process.
 * An ES module (CommonJS callers use `await import('echostore')`); the
 * built-in source kinds (`sqliteSource`, `httpSource`, `postgresSource`,
 * `mysqlSource`, or `buildSource` from a configuration's `source`) give a
 * table its `load` / `loadMany`.
 *
 * @packageDocumentation
 */
export * from './errors.js';
export type { Envelope } from './l2/format.js';
export { epochsKey, eventsChannel, keyPrefix, leaseKey, valueKey } from './l2/keys.js';
export {
  type BuildContext,
  buildSource,
  ensureDemoCatalog,
  type HttpSourceOptions,
  httpSource,
  type MysqlSourceContext,
  mysqlSource,
  type PostgresSourceContext,
  postgresSource,
  type Source,
  type SourceConfig,
  type SqliteSourceOptions,
  type SqlSourceContext,
  type SqlSourceOptions,
  sourceFingerprint,
  sqliteSource,
} from './sources/index.js';
export { LoadResult, type RowPolicy, withPolicy } from './store/load-result.js';
export {
  DEFAULT_POLICY,
  type L1Policy,
  type TablePolicy,
  type TablePolicyInput,
} from './store/policy.js';
export {
  createStore,
  FINGERPRINT,
  NAMESPACE,
  type Store,
  type StoreOptions,
  type TableOptions,
} from './store/store.js';
export { assertId, MAX_BATCH_IDS, MAX_ID_BYTES, TABLE_NAME, type Table } from './store/table.js';
export { MAX_PURGE_TAGS, MAX_ROW_TAGS, MAX_TAG_BYTES, TAG } from './store/tags.js';
export type * from './store/types.js';
export { createValkeyClient, type ValkeyOptions, type ValkeyTlsOptions } from './valkey/client.js';
export type { Credentials } from './valkey/credentials.js';
export { keySlot } from './valkey/slots.js';
export type { ClusterSettings, SentinelSettings } from './valkey/topology.js';
