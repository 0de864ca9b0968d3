import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CONFIG_DOC_PATH, renderConfigDoc } from '../src/config/doc.js';
import { configSchema } from '../src/config/schema.js';
import { TablePolicySchema } from '../src/store/policy.js';

describe('docs/configuration.md', () => {
  it('is what npm run docs:config renders from the schema', () => {
    const committed = readFileSync(CONFIG_DOC_PATH, 'utf8');
    expect(
      committed === renderConfigDoc(),
      `${CONFIG_DOC_PATH} is stale: run npm run docs:config`,
    ).toBe(true);
  });

  it('lists every field of every section with a description', () => {
    const doc = renderConfigDoc();
    const sections = [
      ...Object.entries(configSchema.properties.valkey.properties),
      ...Object.entries(configSchema.properties.http.properties),
      ...Object.entries(configSchema.properties.log.properties),
      ...Object.entries(TablePolicySchema.properties),
    ];
    for (const [name, field] of sections) {
      expect(field.description, name).toBeTruthy();
      expect(doc).toMatch(new RegExp(`^\\| \`${name}\` +\\|`, 'm'));
    }
  });

  it('shows a default with the duration or size it means', () => {
    const doc = renderConfigDoc();
    expect(doc).toMatch(/^\| `ttlMs` +\| integer +\| `300000` \(5 min\) +\|/m);
    expect(doc).toMatch(/^\| `bodyLimitBytes` +\| integer +\| `1048576` \(1 MiB\) +\|/m);
  });
});
