/**
 * Where a Valkey password comes from: inline, or a file read again on every
 * (re)connect, trailing newline trimmed, the last good read kept while the
 * file cannot be read.
 */
import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ConfigError } from '../../src/errors.js';
import { passwordSource } from '../../src/valkey/credentials.js';

const dir = mkdtempSync(join(tmpdir(), 'echostore-password-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('passwordSource', () => {
  it('reads the file again on every call, trailing newline trimmed', () => {
    const file = join(dir, 'rotating');
    writeFileSync(file, 'first\n');
    const password = passwordSource({ passwordFile: file }, 'valkey');
    expect(password()).toBe('first');
    writeFileSync(file, 'second\r\n');
    expect(password()).toBe('second');
  });

  it('keeps the last password read while the file is gone (a secret being replaced)', () => {
    const file = join(dir, 'replaced');
    writeFileSync(file, 'kept\n');
    const password = passwordSource({ passwordFile: file }, 'valkey');
    unlinkSync(file);
    expect(password()).toBe('kept');
    writeFileSync(file, '\n');
    expect(password()).toBe('kept');
  });

  it('gives an inline password, or none', () => {
    expect(passwordSource({ password: 'inline' }, 'valkey')()).toBe('inline');
    expect(passwordSource({}, 'valkey')()).toBeUndefined();
  });

  it.each([
    ['an unreadable file', { passwordFile: join(dir, 'missing') }, 'valkey.sentinel.passwordFile'],
    [
      'both forms',
      { password: 'a', passwordFile: join(dir, 'missing') },
      'valkey.sentinel.password',
    ],
    ['a username alone', { username: 'u' }, 'valkey.sentinel.username'],
  ])('refuses %s, naming the field', (_, credentials, field) => {
    let err: unknown;
    try {
      passwordSource(credentials, 'valkey.sentinel');
    } catch (e) {
      err = e;
    }
    expect((err as ConfigError).code).toBe('ECC_BAD_CONFIG');
    expect((err as ConfigError).field).toBe(field);
  });
});
