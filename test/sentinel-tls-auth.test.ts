/**
 * A Sentinel set in production dress: TLS-only Sentinels and data nodes with
 * client certificates required, the Sentinels behind a `requirepass` of
 * their own (and reaching the data nodes with `auth-pass`), the primary
 * serving the service as an ACL user (harness/secure.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SentinelSet, spawnSentinelSet } from '../harness/sentinel.js';
import { ask } from '../harness/valkey-server.js';
import type { ConfigError } from '../src/errors.js';
import type { ValkeyOptions } from '../src/valkey/client.js';
import { errorOf, openStore } from './helpers/probe.js';
import { countingLoader, uniqueTable } from './helpers/store.js';

let set: SentinelSet;
beforeAll(async () => {
  set = await spawnSentinelSet({ secure: true });
}, 60_000);
afterAll(() => set?.stop());

/** The set's service section, its Sentinel settings merged with `sentinel`. */
const valkey = (sentinel: Partial<NonNullable<ValkeyOptions['sentinel']>> = {}): ValkeyOptions => ({
  ...set.valkey,
  connectTimeoutMs: 1_000,
  sentinel: { ...(set.valkey.sentinel as NonNullable<ValkeyOptions['sentinel']>), ...sentinel },
});

describe('a TLS Sentinel set with passwords', () => {
  it('finds the primary through the Sentinels over TLS and serves from it as the ACL user', async () => {
    const table = uniqueTable('tls-sentinel');
    const source = countingLoader();
    const a = await openStore({ [table]: { load: source.load } }, { valkey: valkey() });
    const b = await openStore({ [table]: { load: source.load } }, { valkey: valkey() });
    expect(a.valkeyReady()).toBe(true);
    await a.table(table).get('x');
    expect((await b.table(table).get('x')).layer).toBe('l2');
    expect(source.calls()).toBe(1);
    const primary = await set.primary();
    if (primary === undefined) throw new Error('no primary');
    const list = await ask(primary, (r) => r.client('LIST') as Promise<string>);
    expect(list).toMatch(/ user=echostore /);
  });

  it('refuses a wrong Sentinel password at start, naming valkey.sentinel.password', async () => {
    const wrong = 'wrong-sentinel-81d2-never-echoed';
    const err = await errorOf(
      openStore({ t: { load: async () => 1 } }, { valkey: valkey({ password: wrong }) }),
    );
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe('valkey.sentinel.password');
    expect(err.message).not.toContain(wrong);
  });

  it('refuses to start without valkey.tls: no Sentinel answers in plain text', async () => {
    const { tls: _, ...plain } = valkey();
    const err = await errorOf(openStore({ t: { load: async () => 1 } }, { valkey: plain }));
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe('valkey.sentinel.sentinels');
  });
});
