/**
 * `npm run docs:config`: writes docs/configuration.md from the configuration
 * schema (see src/config/doc.ts). Run it after changing a field of
 * src/config/schema.ts or src/store/policy.ts; a test fails while the
 * committed file differs from what this writes.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CONFIG_DOC_PATH, renderConfigDoc } from '../src/config/doc.js';

// Compiled to dist/scripts/: the repository root is two levels up.
const file = fileURLToPath(new URL(`../../${CONFIG_DOC_PATH}`, import.meta.url));
writeFileSync(file, renderConfigDoc());
console.log(`wrote ${file}`);
