/**
 * Valkey URLs with credentials and over TLS, against real servers of this
 * file's own: one with `requirepass`, one with an ACL user (the default user
 * off), one TLS-only with a throwaway CA made by openssl at test time.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { freePort } from '../harness/free-port.js';
import { makeSecure } from '../harness/secure.js';
import { serverBinary } from '../harness/valkey-server.js';
import { loadConfig } from '../src/config/load.js';
import { createStore, type Store } from '../src/index.js';
import { redactUrl, type ValkeyOptions } from '../src/valkey/client.js';
import { errorOf, openStore } from './helpers/probe.js';
import { countingLoader, uniqueTable, valkeyUrl } from './helpers/store.js';

const PASSWORD = 'pw-1d3a-never-logged';
const ALICE_PASSWORD = 'alice-9c2e-never-logged';
const WRONG_PASSWORD = 'wrong-77f0-never-logged';
/** Short, so a store that cannot connect starts degraded quickly (main.ts waits connectTimeoutMs). */
const CONNECT_TIMEOUT_MS = 500;

let dir: string;
/** PEM files of a throwaway CA and the server certificate it signed (SAN IP:127.0.0.1, DNS:localhost): harness/secure.ts. */
const pki = { ca: '', cert: '', key: '' };

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'echostore-tls-'));
  const { ca, cert, key } = makeSecure(dir).pki;
  Object.assign(pki, { ca, cert, key });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * Spawns a server of this test's own on a free port (no persistence), with
 * `args(port)` added, stopped when the test ends. Resolves with the port once
 * the server says it accepts connections (it needs no credentials to say so).
 */
async function ownServer(args: (port: number) => string[]): Promise<number> {
  const binary = serverBinary();
  if (binary === undefined) throw new Error('no valkey-server or redis-server on the PATH');
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const child = spawn(
      binary,
      ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...args(port)],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    onTestFinished(() => stop(child));
    let out = '';
    const ready = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 5_000);
      // Keeps draining stdout after that, so the server never blocks on its log.
      child.stdout?.on('data', (chunk: Buffer) => {
        if (out.length < 10_000) out += chunk.toString();
        if (out.includes('Ready to accept connections')) {
          clearTimeout(timer);
          resolve(true);
        }
      });
      child.once('exit', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
    if (ready) return port;
    await stop(child);
    // Another process may have taken the free port in between: try another.
    if (attempt === 3) throw new Error(`${binary} did not start:\n${out}`);
  }
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}

/** `--tls-port` only (no plain-text port), server certificate from {@link pki}, no client certificates. */
const tlsServerArgs = (port: number) => [
  ...['--port', '0', '--tls-port', String(port), '--tls-cert-file', pki.cert],
  ...['--tls-key-file', pki.key, '--tls-ca-cert-file', pki.ca, '--tls-auth-clients', 'no'],
];

/** A pino logger at `debug` that keeps every line, for looking for secrets in it. */
function capturedLog() {
  const lines: string[] = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => lines.push(line) });
  return { logger, text: () => lines.join('') };
}

/** Two stores on `valkey` sharing one table and one counting loader, both connected. */
async function storePair(valkey: ValkeyOptions, loadMs = 0) {
  const table = uniqueTable('auth');
  const source = countingLoader(loadMs);
  const open = () => openStore({ [table]: { load: source.load } }, { valkey });
  const a = await open();
  const b = await open();
  expect(a.valkeyReady()).toBe(true);
  expect(b.valkeyReady()).toBe(true);
  return { a: a.table(table), b: b.table(table), source, table };
}

/**
 * Cache-aside through L2, a write and an invalidation, seen across two
 * stores. A's L1 row can only go before its L1 TTL (30 s) by an event on
 * A's subscriber connection, so this also proves that connection is up.
 */
async function expectCoherentPair(valkey: ValkeyOptions): Promise<void> {
  const { a, b, source } = await storePair(valkey);
  expect(await a.get('1')).toMatchObject({ layer: 'origin', value: { id: '1', n: 1 } });
  expect(await b.get('1')).toMatchObject({ layer: 'l2', value: { id: '1', n: 1 } });
  expect(await a.get('1')).toMatchObject({ layer: 'l1' });

  await b.put('1', { id: '1', written: true });
  await vi.waitFor(
    async () => expect(await a.get('1')).toMatchObject({ value: { id: '1', written: true } }),
    { timeout: 2_000 },
  );

  await b.invalidate('1');
  await vi.waitFor(async () => expect(await a.get('1')).toMatchObject({ layer: 'origin' }), {
    timeout: 2_000,
  });
  expect(source.calls()).toBe(2);
}

const AUTH_SERVERS = [
  {
    name: 'requirepass',
    args: (port: number) => ['--port', String(port), '--requirepass', PASSWORD],
    url: (port: number) => `redis://:${PASSWORD}@127.0.0.1:${port}`,
    wrongUrl: (port: number) => `redis://:${WRONG_PASSWORD}@127.0.0.1:${port}`,
  },
  {
    // The default user is off: a connection that did not log in as alice can do nothing,
    // and alice may publish and subscribe (&*) as the lease scripts and the events need.
    name: 'ACL user',
    args: (port: number) => [
      ...['--port', String(port), '--user', 'default', 'off'],
      ...['--user', 'alice', 'on', `>${ALICE_PASSWORD}`, '~*', '&*', '+@all'],
    ],
    url: (port: number) => `redis://alice:${ALICE_PASSWORD}@127.0.0.1:${port}`,
    wrongUrl: (port: number) => `redis://alice:${WRONG_PASSWORD}@127.0.0.1:${port}`,
  },
];

describe('Valkey URL with credentials', () => {
  it.each(AUTH_SERVERS)(
    '$name: get, put and invalidate work, and the subscriber connection logs in too (a PUT on one store drops the other store’s L1 row)',
    async ({ args, url }) => {
      const port = await ownServer(args);
      await expectCoherentPair({ url: url(port) });
    },
  );

  it.each(AUTH_SERVERS)(
    '$name: a wrong password starts the store degraded; neither the client error nor any log line carries the password',
    async ({ name, args, wrongUrl }) => {
      const port = await ownServer(args);
      const log = capturedLog();
      const table = uniqueTable('wrongpass');
      const store = await openStore(
        { [table]: { load: (id) => ({ id }) } },
        {
          valkey: { url: wrongUrl(port), connectTimeoutMs: CONNECT_TIMEOUT_MS },
          readyTimeoutMs: CONNECT_TIMEOUT_MS,
          logger: log.logger,
        },
      );
      expect(store.valkeyReady()).toBe(false);
      expect(await store.table(table).get('1')).toMatchObject({ layer: 'origin' });

      const [err] = (await once(store.valkey, 'error')) as [Error & { command?: unknown }];
      expect(err.message).toMatch(/^WRONGPASS/);
      expect(err.command).toEqual({
        name: 'auth',
        args: name === 'ACL user' ? ['alice', '***'] : ['***'],
      });
      // Everything a logger could serialise: own enumerable fields, message and stack.
      expect(JSON.stringify({ ...err, message: err.message, stack: err.stack })).not.toContain(
        WRONG_PASSWORD,
      );

      // The subscriber connection (a duplicate of the client) is refused too and logs it.
      await vi.waitFor(() => expect(log.text().match(/WRONGPASS/g)?.length).toBeGreaterThan(1));
      expect(log.text()).not.toContain(WRONG_PASSWORD);
    },
  );

  it('redactUrl hides the password and keeps the user, host, port and db', () => {
    expect(redactUrl(`redis://alice:${PASSWORD}@cache:6380/2`)).toBe(
      'redis://alice:***@cache:6380/2',
    );
    expect(redactUrl(`rediss://:${PASSWORD}@127.0.0.1:6379`)).toBe('rediss://:***@127.0.0.1:6379');
    expect(redactUrl('redis://127.0.0.1:6379')).toBe('redis://127.0.0.1:6379');
    expect(redactUrl(`redis://[bad:${PASSWORD}@`)).toBe('<invalid url>');
  });
});

describe('Valkey over TLS (rediss://)', () => {
  it('with the CA: a read from the source, an L2 hit after a rebuild, and one load for two stores on one cold key (lease)', async () => {
    const port = await ownServer(tlsServerArgs);
    const valkey = { url: `rediss://127.0.0.1:${port}`, tls: { caFile: pki.ca } };
    const table = uniqueTable('tls');
    const source = countingLoader(50);

    const first = await createStore({ valkey, tables: { [table]: { load: source.load } } });
    expect(first.valkeyReady()).toBe(true);
    expect(await first.table(table).get('a')).toMatchObject({ layer: 'origin' });
    await first.close(100);

    const [a, b] = await Promise.all(
      [1, 2].map(() => openStore({ [table]: { load: source.load } }, { valkey })),
    );
    expect(await (a as Store).table(table).get('a')).toMatchObject({
      layer: 'l2',
      value: { n: 1 },
    });

    const reads = [a, b].flatMap((s) =>
      Array.from({ length: 20 }, () => (s as Store).table(table).get('cold')),
    );
    const results = await Promise.all(reads);
    expect(source.calls()).toBe(2);
    expect(new Set(results.map((r) => r.layer))).toEqual(new Set(['origin', 'l2']));
  });

  it('with the CA: put and invalidate work, and the subscriber connection is on TLS too', async () => {
    const port = await ownServer(tlsServerArgs);
    await expectCoherentPair({ url: `rediss://127.0.0.1:${port}`, tls: { caFile: pki.ca } });
  });

  it('without the CA: the store starts degraded within connectTimeoutMs, reads go to the source', async () => {
    const port = await ownServer(tlsServerArgs);
    const log = capturedLog();
    const table = uniqueTable('tls-noca');
    const started = performance.now();
    const store = await openStore(
      { [table]: { load: (id) => ({ id }) } },
      {
        valkey: { url: `rediss://127.0.0.1:${port}`, connectTimeoutMs: CONNECT_TIMEOUT_MS },
        readyTimeoutMs: CONNECT_TIMEOUT_MS,
        logger: log.logger,
      },
    );
    expect(performance.now() - started).toBeLessThan(CONNECT_TIMEOUT_MS + 1_000);
    expect(store.valkeyReady()).toBe(false);
    expect(await store.table(table).get('1')).toMatchObject({ layer: 'origin' });
    // Refused for its certificate, not for anything else.
    // (Redis sends its CA in the chain, a server that does not gets the second code.)
    expect(log.text()).toMatch(
      /"code":"(SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE)"/,
    );
  });

  it('servername is the name checked against the certificate', async () => {
    const port = await ownServer(tlsServerArgs);
    const url = `rediss://127.0.0.1:${port}`;
    const table = uniqueTable('tls-name');
    const open = (servername: string, logger = pino({ level: 'silent' })) =>
      openStore(
        { [table]: { load: (id) => ({ id }) } },
        {
          valkey: {
            url,
            connectTimeoutMs: CONNECT_TIMEOUT_MS,
            tls: { caFile: pki.ca, servername },
          },
          readyTimeoutMs: CONNECT_TIMEOUT_MS,
          logger,
        },
      );
    expect((await open('localhost')).valkeyReady()).toBe(true);
    const log = capturedLog();
    expect((await open('wrong.invalid', log.logger)).valkeyReady()).toBe(false);
    expect(log.text()).toContain('ERR_TLS_CERT_ALTNAME_INVALID');
  });

  it('rejectUnauthorized: false connects without the CA', async () => {
    const port = await ownServer(tlsServerArgs);
    const store = await openStore(
      { [uniqueTable('tls-insecure')]: { load: (id) => ({ id }) } },
      { valkey: { url: `rediss://127.0.0.1:${port}`, tls: { rejectUnauthorized: false } } },
    );
    expect(store.valkeyReady()).toBe(true);
  });

  it('an upper-case REDISS:// scheme is TLS too', async () => {
    const port = await ownServer(tlsServerArgs);
    const store = await openStore(
      { [uniqueTable('tls-case')]: { load: (id) => ({ id }) } },
      { valkey: { url: `REDISS://127.0.0.1:${port}`, tls: { caFile: pki.ca } } },
    );
    expect(store.valkeyReady()).toBe(true);
  });

  it('tls settings are ignored with a redis:// URL', async () => {
    const store = await openStore(
      { [uniqueTable('tls-plain')]: { load: (id) => ({ id }) } },
      { valkey: { url: valkeyUrl(), tls: { caFile: pki.ca } } },
    );
    expect(store.valkeyReady()).toBe(true);
  });

  it.each([
    ['cannot be read', () => join(dir, 'missing.pem')],
    ['holds no PEM certificate', () => pki.key],
  ])('a caFile that %s is ECC_BAD_CONFIG naming valkey.tls.caFile', async (_, caFile) => {
    const err = await errorOf(
      createStore({
        valkey: { url: 'rediss://127.0.0.1:6379', tls: { caFile: caFile() } },
        tables: { t: { load: (id) => ({ id }) } },
      }),
    );
    expect(err.code).toBe('ECC_BAD_CONFIG');
    expect(err.message).toMatch(/^valkey\.tls\.caFile: /);
  });

  it('a config file’s valkey section (rediss://, a caFile relative to the file) drives createStore as main.ts passes it', async () => {
    const port = await ownServer(tlsServerArgs);
    const file = join(dir, 'service.yaml');
    writeFileSync(
      file,
      `valkey:\n  url: rediss://127.0.0.1:${port}\n  tls: { caFile: ca.pem, servername: localhost }\n` +
        'tables:\n  t: { source: { kind: http, url: "http://127.0.0.1:9/{id}" } }\n',
    );
    const config = loadConfig({ argv: ['--config', file], env: {} });
    expect(config.valkey.tls).toEqual({
      caFile: pki.ca,
      rejectUnauthorized: true,
      servername: 'localhost',
    });
    const store = await openStore(
      { t: { load: (id) => ({ id }) } },
      { valkey: config.valkey, readyTimeoutMs: config.valkey.connectTimeoutMs },
    );
    expect(store.valkeyReady()).toBe(true);
  });
});
