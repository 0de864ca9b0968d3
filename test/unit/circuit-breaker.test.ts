import type { Redis } from 'ioredis';
import { ReplyError } from 'ioredis';
import type { Logger } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { Breaker, BreakerOpenError, classifyValkeyError } from '../../src/valkey/breaker.js';

/** A reply error as ioredis raises it (`name` is 'ReplyError'). */
const reply = (message: string): Error => new ReplyError(message) as Error;

const timeout = () => new Error('Command timed out');
const WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value';
const OOM = "OOM command not allowed when used memory > 'maxmemory'.";
const READONLY = "READONLY You can't write against a read only replica.";
const NOPERM = "NOPERM User default has no permissions to run the 'evalsha' command";
// What ioredis reports when a script's own redis.call failed on a health error.
const SCRIPT_OOM = `ERR Error running script (call to f_5d0e6f4b): @user_script:3: ${OOM}`;
const SCRIPT_OOM_OLD = `ERR Error running script (call to f_5d0e6f4b): @user_script:3: @user_script: 3: -${OOM}`;

/**
 * A breaker over a tiny fake client (only `status`, `on`, `off`) and a clock
 * the test moves; `log` records the transitions it reports.
 */
function breaker(options: { failureThreshold?: number; coolDownMs?: number } = {}) {
  let now = 1_000_000;
  const client = { status: 'ready', on: vi.fn(), off: vi.fn() };
  const log = { warn: vi.fn(), info: vi.fn() };
  const b = new Breaker(client as unknown as Redis, log as unknown as Logger, {
    coolDownMs: 1_000,
    ...options,
    now: () => now,
  });
  const fail = (err: unknown) => b.run(() => Promise.reject(err)).catch((e: unknown) => e);
  return {
    b,
    client,
    log,
    advance(ms: number) {
      now += ms;
    },
    fail,
    /** Three timeouts: the circuit opens. */
    async open() {
      for (let i = 0; i < 3; i++) await fail(timeout());
      expect(b.degraded).toBe(true);
    },
    /** Runs a command; 'skipped' when the breaker did not call it. */
    async attempt(): Promise<'ran' | 'skipped'> {
      const op = vi.fn(() => Promise.resolve('OK'));
      try {
        await b.run(op);
      } catch (err) {
        if (!(err instanceof BreakerOpenError)) throw err;
        expect(op).not.toHaveBeenCalled();
        return 'skipped';
      }
      expect(op).toHaveBeenCalledTimes(1);
      return 'ran';
    },
  };
}

describe('circuit breaker in front of Valkey', () => {
  it('passes answers and errors through while closed', async () => {
    const t = breaker();
    expect(await t.b.run(() => Promise.resolve(7))).toBe(7);
    const err = timeout();
    expect(await t.fail(err)).toBe(err);
    expect(t.b.degraded).toBe(false);
  });

  it('opens after 3 consecutive health failures, not before', async () => {
    const t = breaker();
    await t.fail(timeout());
    await t.fail(timeout());
    expect(t.b.degraded).toBe(false);
    expect(await t.attempt()).toBe('ran'); // an answer resets the count
    await t.fail(timeout());
    await t.fail(timeout());
    expect(t.b.degraded).toBe(false);
    await t.fail(timeout());
    expect(t.b.degraded).toBe(true);
  });

  it('while open, skips every command with BreakerOpenError without calling it', async () => {
    const t = breaker();
    await t.open();
    for (let i = 0; i < 5; i++) expect(await t.attempt()).toBe('skipped');
    t.advance(999);
    expect(await t.attempt()).toBe('skipped');
  });

  it('after coolDownMs lets exactly one probe through; the others are still skipped', async () => {
    const t = breaker();
    await t.open();
    t.advance(1_000);
    let answer!: (v: string) => void;
    const probe = vi.fn(() => new Promise<string>((r) => (answer = r)));
    const probing = t.b.run(probe);
    expect(probe).toHaveBeenCalledTimes(1);
    for (let i = 0; i < 3; i++) expect(await t.attempt()).toBe('skipped');
    expect(t.b.degraded).toBe(true);
    answer('PONG');
    expect(await probing).toBe('PONG');
    // The server answered: closed again.
    expect(t.b.degraded).toBe(false);
    expect(await t.attempt()).toBe('ran');
  });

  it('a probe that fails opens the circuit for another coolDownMs, then probes again', async () => {
    const t = breaker();
    await t.open();
    t.advance(1_000);
    const probe = vi.fn(() => Promise.reject(timeout()));
    await t.b.run(probe).catch(() => {});
    expect(probe).toHaveBeenCalledTimes(1);
    expect(await t.attempt()).toBe('skipped');
    t.advance(999);
    expect(await t.attempt()).toBe('skipped');
    t.advance(1);
    expect(await t.attempt()).toBe('ran');
    expect(t.b.degraded).toBe(false);
  });

  it.each([
    [
      'throws synchronously',
      () => {
        throw new Error('socket closed');
      },
    ],
    ['rejects', () => Promise.reject(new Error('socket closed'))],
  ])('a probe that %s gives the probe back: the next cool-down probes again', async (_, op) => {
    const t = breaker();
    await t.open();
    t.advance(1_000);
    await t.b.run(op as () => Promise<unknown>).catch(() => {});
    t.advance(1_000);
    expect(await t.attempt()).toBe('ran');
  });

  it('a data reply error (WRONGTYPE) never counts against Valkey', async () => {
    const t = breaker();
    for (let i = 0; i < 10; i++)
      expect(await t.fail(reply(WRONGTYPE))).toMatchObject({ name: 'ReplyError' });
    expect(t.b.degraded).toBe(false);
    // It proves the server answered: it even resets the count of failures.
    await t.fail(timeout());
    await t.fail(timeout());
    await t.fail(reply(WRONGTYPE));
    await t.fail(timeout());
    await t.fail(timeout());
    expect(t.b.degraded).toBe(false);
  });

  it('a data reply error closes a half-open circuit (the server answered the probe)', async () => {
    const t = breaker();
    await t.open();
    t.advance(1_000);
    await t.fail(reply(WRONGTYPE));
    expect(t.b.degraded).toBe(false);
    expect(await t.attempt()).toBe('ran');
  });

  it.each([
    ['OOM', OOM],
    ['READONLY', READONLY],
    ['NOPERM', NOPERM],
    ['OOM inside a script, as ioredis reports it', SCRIPT_OOM],
    ['OOM inside a script, older wording', SCRIPT_OOM_OLD],
  ])('a health reply error (%s) counts like a timeout', async (_, message) => {
    const t = breaker();
    for (let i = 0; i < 3; i++) await t.fail(reply(message));
    expect(t.b.degraded).toBe(true);
    expect(await t.attempt()).toBe('skipped');
  });

  it('skips every command while the client is not connected, and reports degraded', async () => {
    const t = breaker();
    t.client.status = 'reconnecting';
    expect(await t.attempt()).toBe('skipped');
    expect(t.b.degraded).toBe(true);
    t.client.status = 'ready';
    expect(await t.attempt()).toBe('ran');
    expect(t.b.degraded).toBe(false);
  });

  it('a reconnect lets the next command probe at once, unless the server refused', async () => {
    const t = breaker();
    const onReady = t.client.on.mock.calls.find((c) => c[0] === 'ready')?.[1] as () => void;
    await t.open();
    expect(await t.attempt()).toBe('skipped');
    onReady();
    expect(await t.attempt()).toBe('ran');
    expect(t.b.degraded).toBe(false);

    const r = breaker();
    const onReadyR = r.client.on.mock.calls.find((c) => c[0] === 'ready')?.[1] as () => void;
    await r.fail(reply(OOM));
    onReadyR();
    expect(await r.attempt()).toBe('skipped');
    expect(r.b.degraded).toBe(true);
  });

  it('logs each transition once: one warning when it opens, one line when it closes', async () => {
    const t = breaker();
    await t.open();
    await t.attempt();
    await t.attempt();
    expect(t.log.warn).toHaveBeenCalledTimes(1);
    expect(t.log.info).not.toHaveBeenCalled();
    t.advance(1_000);
    await t.attempt();
    await t.attempt();
    expect(t.log.warn).toHaveBeenCalledTimes(1);
    expect(t.log.info).toHaveBeenCalledTimes(1);
  });

  it('close stops listening to the client', () => {
    const t = breaker();
    expect(t.client.on.mock.calls.map((c) => c[0])).toEqual(['ready', 'close']);
    t.b.close();
    expect(t.client.off.mock.calls.map((c) => c[0])).toEqual(['ready', 'close']);
    expect(t.client.off.mock.calls.map((c) => c[1])).toEqual(
      t.client.on.mock.calls.map((c) => c[1]),
    );
  });
});

describe('classifyValkeyError', () => {
  it.each([
    ['a command the open circuit did not send', new BreakerOpenError(), 'unsent'],
    ['a timeout', timeout(), 'health'],
    ['a lost connection', new Error('Connection is closed.'), 'health'],
    ['something that is not an Error', 'ECONNRESET', 'health'],
    ['WRONGTYPE', reply(WRONGTYPE), 'data'],
    [
      "a script's own error",
      reply('ERR Error running script (call to f_1): @user_script:1: bad id'),
      'data',
    ],
    ['an unknown command', reply("ERR unknown command 'FOO'"), 'data'],
    ['a data error whose text merely contains OOM', reply('WRONGTYPE key ROOM is a hash'), 'data'],
    ['OOM', reply(OOM), 'health'],
    ['READONLY', reply(READONLY), 'health'],
    ['NOPERM', reply(NOPERM), 'health'],
    ['LOADING', reply('LOADING Redis is loading the dataset in memory'), 'health'],
    ['BUSY', reply('BUSY Redis is busy running a script.'), 'health'],
    [
      'MISCONF',
      reply('MISCONF Redis is configured to save RDB snapshots, but it cannot persist'),
      'health',
    ],
    ['NOAUTH', reply('NOAUTH Authentication required.'), 'health'],
    ['MASTERDOWN', reply('MASTERDOWN Link with MASTER is down'), 'health'],
    ['CLUSTERDOWN', reply('CLUSTERDOWN The cluster is down'), 'health'],
    [
      'TRYAGAIN (a slot in migration: the node is healthy)',
      reply('TRYAGAIN Multiple keys request during rehashing of slot'),
      'data',
    ],
    ['OOM inside a script', reply(SCRIPT_OOM), 'health'],
    ['OOM inside a script, older wording', reply(SCRIPT_OOM_OLD), 'health'],
  ])('%s is %s', (_, err, kind) => {
    expect(classifyValkeyError(err)).toBe(kind);
  });
});
