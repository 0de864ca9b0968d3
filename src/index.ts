/**
 * EchoStore for Node: a cache-aside store with single-flight per process.
 *
 * @packageDocumentation
 */
export * from './errors.js';
export type { Envelope } from './store/envelope.js';
export { assertId, leaseKey, MAX_ID_BYTES, TABLE_NAME, valueKey } from './store/keys.js';
export {
  DEFAULT_POLICY,
  type L1Policy,
  type TablePolicy,
  type TablePolicyInput,
} from './store/policy.js';
export { LoadResult, type RowPolicy, withPolicy } from './store/result.js';
export { createStore, type Store, type StoreOptions, type TableOptions } from './store/store.js';
export type { Table } from './store/table.js';
export type * from './store/types.js';
export { createValkeyClient, type ValkeyOptions, type ValkeyTlsOptions } from './valkey.js';
