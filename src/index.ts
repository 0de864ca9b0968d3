/**
 * EchoStore for Node: a cache-aside store with single-flight per process.
 *
 * @packageDocumentation
 */
export * from './errors.js';
export type { Envelope } from './store/envelope.js';
export { LoadResult, type RowPolicy, withPolicy } from './store/envelope.js';
export {
  DEFAULT_POLICY,
  type L1Policy,
  type TablePolicy,
  type TablePolicyInput,
} from './store/policy.js';
export { createStore, type Store, type StoreOptions, type TableOptions } from './store/store.js';
export { assertId, MAX_BATCH_IDS, MAX_ID_BYTES, TABLE_NAME, type Table } from './store/table.js';
export type * from './store/types.js';
export { leaseKey, valueKey } from './store/valkey/scripts.js';
export { keySlot } from './store/valkey/slots.js';
export { createValkeyClient, type ValkeyOptions, type ValkeyTlsOptions } from './valkey.js';
export type { ClusterSettings, SentinelSettings } from './valkey-topology.js';
