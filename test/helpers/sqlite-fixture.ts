import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { onTestFinished } from 'vitest';

const ITEMS_SQL = readFileSync(new URL('../fixtures/items.sql', import.meta.url), 'utf8');

/**
 * A fresh SQLite file built from `test/fixtures/items.sql` (rows 'a' and 'b'
 * of `items(id, label, n, doc)`), in a temporary folder removed when the test ends.
 */
export function itemsDb(): string {
  const dir = mkdtempSync(join(tmpdir(), 'echostore-sqlite-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, `${randomUUID()}.sqlite`);
  const db = new Database(file);
  db.exec(ITEMS_SQL);
  db.close();
  return file;
}

/** How many file descriptors of this process are open on `file` (Linux: /proc/self/fd). */
export function openDescriptors(file: string): number {
  let n = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(join('/proc/self/fd', fd)) === file) n++;
    } catch {
      // closed between the listing and the look
    }
  }
  return n;
}
