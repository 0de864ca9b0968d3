/**
 * The built-in demo catalog: a `products` table of deterministic rows, so that
 * `npm start` with no configuration serves something real and product 42 is
 * the same on every machine.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { mulberry32 } from '../random.js';

const CATALOG_SEED = 0x5eed_ec40;

const ADJECTIVES = ['Compact', 'Sturdy', 'Quiet', 'Bright', 'Classic', 'Rapid', 'Smart', 'Handy'];
/** [noun, category] */
const KINDS = [
  ['Kettle', 'kitchen'],
  ['Blender', 'kitchen'],
  ['Mug', 'kitchen'],
  ['Lamp', 'lighting'],
  ['Backpack', 'outdoor'],
  ['Tent', 'outdoor'],
  ['Headphones', 'audio'],
  ['Speaker', 'audio'],
  ['Notebook', 'office'],
  ['Drill', 'tools'],
  ['Hose', 'garden'],
] as const;
const MATERIALS = ['steel', 'bamboo', 'recycled plastic', 'aluminium', 'oak', 'ceramic'];

function pick<T>(random: () => number, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)] as T;
}

/** How many products the demo catalog holds. */
export const DEMO_COUNT = 10_000;

/**
 * One product row, `[id, sku, name, category, price_cents, stock, description]`;
 * seeded by its id alone, so a row does not depend on `count` (the SQL sources
 * seed the same rows).
 */
export function demoProduct(id: number): [number, string, string, string, number, number, string] {
  const random = mulberry32(CATALOG_SEED ^ Math.imul(id, 0x9e3779b1));
  const [noun, category] = pick(random, KINDS);
  const name = `${pick(random, ADJECTIVES)} ${noun}`;
  const priceCents = 199 + Math.floor(random() * 49_800);
  const stock = Math.floor(random() * 500);
  const description = `${name} made of ${pick(random, MATERIALS)}, from our ${category} range.`;
  return [id, `SKU-${String(id).padStart(6, '0')}`, name, category, priceCents, stock, description];
}

/**
 * Creates the demo catalog in the SQLite file `file` (and its parent
 * directory) unless the file already has a `products` table:
 * `products(id INTEGER PRIMARY KEY, sku, name, category, price_cents, stock, description)`
 * with ids 1..`count`, every row derived from its id by a fixed-seed PRNG.
 *
 * Idempotent, and safe when several processes seed the same file at once: the
 * check and the inserts run in one `BEGIN IMMEDIATE` transaction.
 *
 * @param file - path of the SQLite file, created if missing.
 * @param count - number of products. Default 10,000.
 * @throws {Error} when the directory or file cannot be created or written (SqliteError, fs errors).
 */
export function ensureDemoCatalog(file: string, count = DEMO_COUNT): void {
  mkdirSync(dirname(file), { recursive: true });
  const db = new Database(file);
  try {
    const hasProducts = db.prepare(
      "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'products'",
    );
    const seed = db.transaction(() => {
      if (hasProducts.get() !== undefined) return;
      db.exec(
        'CREATE TABLE products (id INTEGER PRIMARY KEY, sku TEXT, name TEXT, category TEXT, ' +
          'price_cents INTEGER, stock INTEGER, description TEXT)',
      );
      const insert = db.prepare('INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)');
      for (let id = 1; id <= count; id++) insert.run(demoProduct(id));
    });
    seed.immediate();
  } finally {
    db.close();
  }
}
