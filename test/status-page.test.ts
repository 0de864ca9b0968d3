import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness/free-port.js';
import { type Origin, startOrigin } from '../harness/origin.js';
import { type ServiceProcess, startServiceProcess } from './helpers/service.js';
import { uniqueTable, valkeyUrl } from './helpers/store.js';

const TOKEN = 'status-admin-token-0123456789';
// docs/status-page.png is refreshed only on demand (ECHOSTORE_SCREENSHOT=1), so a test run leaves the tree clean.
const SCREENSHOT =
  process.env.ECHOSTORE_SCREENSHOT === '1'
    ? fileURLToPath(new URL('../docs/status-page.png', import.meta.url))
    : join(tmpdir(), `echostore-status-${process.pid}.png`);

/** Debian's chromium (`apt-get install -y chromium`), or undefined. */
function chromiumPath(): string | undefined {
  try {
    return (
      execFileSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' }).trim() || undefined
    );
  } catch {
    return undefined;
  }
}

const executablePath = chromiumPath();
if (executablePath === undefined && process.env.CI) {
  throw new Error('chromium is not on the PATH: .ci/run installs it (apt-get install -y chromium)');
}

/** The status page in a real browser (Debian's chromium driven by playwright-core). */
describe.skipIf(executablePath === undefined)('the status page', () => {
  const table = uniqueTable('status');
  const broken = uniqueTable('status-down');
  let origin: Origin;
  let service: ServiceProcess;
  let browser: Browser;

  beforeAll(async () => {
    origin = await startOrigin(1);
    const closed = await freePort(); // nothing listens: every load of this table fails
    service = await startServiceProcess(
      {
        valkey: { url: valkeyUrl() },
        http: { adminToken: TOKEN },
        tables: {
          [table]: { source: { kind: 'http', url: origin.template } },
          [broken]: { source: { kind: 'http', url: `http://127.0.0.1:${closed}/items/{id}` } },
        },
      },
      { inHook: true },
    );
    browser = await chromium.launch({
      executablePath,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    service?.process.kill('SIGKILL');
    await origin?.close();
  });

  it('shows each table, Valkey and recent errors live, and inspects an id with the token', async () => {
    // Three loads and three L1 hits: a 50 % hit ratio.
    for (const id of ['1', '2', '3', '1', '2', '3']) {
      expect((await fetch(`${service.url}/v1/tables/${table}/items/${id}`)).status).toBe(200);
    }
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const problems: string[] = [];
    page.on('pageerror', (e) => problems.push(e.message));
    page.on('console', (m) => {
      // The 401 this test asks for on purpose is reported as a console error too.
      if (m.type() === 'error' && !m.text().includes('status of 401')) problems.push(m.text());
    });
    const answer = await page.goto(`${service.url}/status`);
    expect(answer?.headers()['content-security-policy']).toContain("script-src 'self'");

    const row = page.locator(`#tables tr[data-table="${table}"]`);
    await row.waitFor({ timeout: 10_000 });
    const cells = await row.locator('td').allTextContents();
    expect(cells[0]).toBe(table);
    expect(cells[1]).toBe('50.0 %');
    expect(cells[4]).toBe('3'); // loads, as the origin counted them
    expect(origin.totalReads()).toBe(3);
    expect(await page.locator('#state').textContent()).toBe('ready');
    expect(await page.locator('#v-status').textContent()).toBe('ready');
    expect(await page.locator('#v-topology').textContent()).toBe(
      `standalone: ${new URL(valkeyUrl()).host}`,
    );

    // A failing source: the next refresh shows the errors as recent, without a reload.
    for (const id of ['a', 'b']) {
      expect((await fetch(`${service.url}/v1/tables/${broken}/items/${id}`)).status).toBe(502);
    }
    const brokenRow = page.locator(`#tables tr[data-table="${broken}"] td`).last();
    await expect.poll(() => brokenRow.textContent(), { timeout: 10_000 }).toBe('2');
    const errorRow = page.locator('#errors tr', { hasText: 'load ECC_LOAD_FAILED' });
    expect(await errorRow.locator('td').allTextContents()).toEqual([
      broken,
      'load ECC_LOAD_FAILED',
      '2',
      '2',
    ]);

    // Inspect without the token: 401; with it: the L1 row and the L2 value.
    await page.selectOption('#i-table', table);
    await page.fill('#i-id', '1');
    await page.click('#i-go');
    await expect.poll(() => page.locator('#i-result').textContent()).toContain('ECC_UNAUTHORIZED');
    await page.fill('#i-token', TOKEN);
    await page.click('#i-go');
    await expect.poll(() => page.locator('#i-result').textContent()).toContain('"l2"');
    const shown = JSON.parse((await page.locator('#i-result').textContent()) as string);
    expect(shown.l1.negative).toBe(false);
    expect(shown.l2.softTtlMs).toBeGreaterThan(0);
    expect(origin.totalReads()).toBe(3); // inspecting loaded nothing

    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);
});
