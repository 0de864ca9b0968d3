/**
 * Alerts drill: a real Prometheus scrapes two real instances and evaluates
 * deploy/prometheus/alerts.yml (windows scaled down) while the origin fails, slows down and an
 * instance dies; exactly each fault's alerts fire, none after it. Usage and laws:
 * drills/README.md#alerts.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { freePort } from '../harness/free-port.js';
import { HOLD_PREFIX, startOrigin } from '../harness/origin.js';
import { type Service, startServices } from '../harness/service.js';
import { privateDir, settle, stopChild } from '../harness/spawn.js';
import { spawnValkey } from '../harness/valkey-server.js';
import { drillArgs, int, runDrill } from './lib/cli.js';
import { itemUrl, timed } from './lib/http.js';
import { track } from './lib/reaper.js';
import { type Check, check, sum } from './lib/report.js';
import { originConfig } from './lib/store.js';

const args = drillArgs({ scale: int(10, 1, 60), 'phase-s': int(16, 8, 300) });

/** The repository (the drills run from dist/drills/, as workerFile in lib/workers.ts assumes too). */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** One alert of Prometheus' `/api/v1/alerts`. */
type Alert = { labels: Record<string, string>; state: string };
/** One panel of deploy/grafana/dashboards/echostore.json. */
type Panel = { title: string; targets?: Array<{ expr: string }> };

/** alerts.yml with every range and `for` divided by `scale` (minutes become seconds × 60 / scale). */
function scaledRules(text: string, scale: number): string {
  const seconds = (n: number, unit: string) => (unit === 'm' ? n * 60 : n) / scale;
  return text
    .replace(/\[(\d+)([ms])\]/g, (_, n, u) => `[${Math.max(2, seconds(Number(n), u))}s]`)
    .replace(/for: (\d+)([ms])/g, (_, n, u) => `for: ${Math.max(1, seconds(Number(n), u))}s`);
}

runDrill('alerts', args.json, async () => {
  const version = spawnSync('prometheus', ['--version'], { encoding: 'utf8' });
  if (version.error) throw new Error('no prometheus on the PATH (apt-get install -y prometheus)');
  const phaseMs = args['phase-s'] * 1_000;
  // The instances' warn lines (shedding, failed loads) are the faults themselves: keep them quiet.
  process.env.LOG_LEVEL ??= 'error';
  const valkey = await spawnValkey();
  // The origin answers in 5 ms; the drill makes it fail (500) or slow (1.5 s) for a phase.
  const origin = await startOrigin(5);
  const table = 'alerts';
  const config = originConfig({ url: valkey.url }, table, origin.template, {
    loadTimeoutMs: 4_000,
  });
  const services = await startServices(2, config);
  const [a, b] = services as [Service, Service];
  /** GETs `id` on `s` with no client timeout; its status (0: no answer). */
  const status = async (s: Service, id: string) =>
    (await timed(itemUrl(s.url, table, id), 600_000)).status;
  const dir = privateDir('echostore-alerts-');
  const rules = readFileSync(join(ROOT, 'deploy/prometheus/alerts.yml'), 'utf8');
  writeFileSync(join(dir, 'alerts.yml'), scaledRules(rules, args.scale));
  const promPort = await freePort();
  const targets = [a.url, b.url].map((u) => new URL(u).host);
  const scrape = { job_name: 'echostore', scrape_timeout: '900ms', static_configs: [{ targets }] };
  const global = { scrape_interval: '1s', evaluation_interval: '1s' };
  const yml = { global, rule_files: ['alerts.yml'], scrape_configs: [scrape] };
  writeFileSync(join(dir, 'prometheus.yml'), JSON.stringify(yml)); // JSON is YAML
  const listen = `--web.listen-address=127.0.0.1:${promPort}`;
  const argv = [`--config.file=${join(dir, 'prometheus.yml')}`, '--log.level=warn', listen];
  argv.push(`--storage.tsdb.path=${join(dir, 'data')}`);
  const prometheus = spawn('prometheus', argv, { stdio: ['ignore', 'ignore', 'inherit'] });
  track(prometheus);
  const api = `http://127.0.0.1:${promPort}/api/v1`;
  const up = () => fetch(`${api}/query?query=up`).then((r) => r.ok || `${r.status}`);
  /** The `data` of Prometheus' answer to `GET <api>/<path>`. */
  const get = async <T>(path: string) =>
    ((await (await fetch(`${api}/${path}`)).json()) as { data: T }).data;
  await settle(10_000, 100, up, (last) => `prometheus did not answer: ${last}`, prometheus);

  // Traffic: both instances read the same cold ids at once, 20 ids a second, never awaited
  // (a slow or failing origin must not slow the traffic down).
  let next = 0;
  const traffic = setInterval(() => {
    const id = `id-${next++}`;
    for (const s of [a, b]) void status(s, id);
  }, 50);

  const alerts = async () => {
    const list = (await get<{ alerts: Alert[] }>('alerts')).alerts;
    const name = ({ labels }: Alert) =>
      `${labels.alertname}${labels.alertname === 'EchoStoreDown' ? `@${labels.instance}` : ''}`;
    const inState = (state: string) =>
      [...new Set(list.filter((x) => x.state === state).map(name))].sort();
    return { firing: inState('firing'), pending: inState('pending') };
  };
  const query = async (expr: string) => {
    const path = `query?query=${encodeURIComponent(expr)}`;
    const { result } = await get<{ result: Array<{ value: [number, string] }> }>(path);
    return sum(result, (r) => Number(r.value[1]));
  };
  const board = readFileSync(join(ROOT, 'deploy/grafana/dashboards/echostore.json'), 'utf8');
  const { panels } = JSON.parse(board) as { panels: Panel[] };
  const panelExpr = (title: string) => {
    const expr = panels.find((p) => p.title === title)?.targets?.[0]?.expr;
    if (expr === undefined) throw new Error(`the dashboard has no panel "${title}"`);
    return expr.replace(/\$(instance|table)/g, '.*').replaceAll('$__rate_interval', '5s');
  };

  const checks: Check[] = [];
  const takeovers: string[] = [];
  /** A phase of `phaseMs`: then exactly `must` fire, and perhaps `may`. */
  async function phase(name: string, must: string[], may: string[] = [], during = async () => {}) {
    // Sample the takeover alert all through the phase: it must never fire.
    const end = Date.now() + phaseMs;
    while (Date.now() < end) {
      const f = await alerts();
      if (f.firing.includes('EchoStoreLeaseTakeovers')) takeovers.push(name);
      await sleep(1_000);
    }
    await during();
    const f = await alerts();
    const pending = f.pending.length > 0 ? ` (pending: ${f.pending.join(', ')})` : '';
    const ok =
      must.every((x) => f.firing.includes(x)) &&
      f.firing.every((x) => must.includes(x) || may.includes(x));
    const expect = `${must.join(' and ') || 'nothing'} fires${may.length ? ` (perhaps ${may.join(', ')})` : ''}`;
    const firing = `firing: ${f.firing.join(', ') || 'none'}${pending}`;
    checks.push(check(`${name}: ${expect}`, ok, firing));
  }
  const panel = async (title: string, expr: string) => {
    const during = await query(expr);
    const seen = `${during.toFixed(2)} during it`;
    checks.push(check(`panel ${title} shows the fault`, during > 0, seen));
  };

  await phase('baseline', []);
  origin.answerWith('*', { status: 500 });
  await phase('errors', ['EchoStoreLoadErrors'], [], async () => {
    await panel('Load errors by code', panelExpr('Load errors by code'));
    await panel(
      'Request rate by route and status (5xx)',
      'sum(rate(http_request_duration_seconds_count{code="5xx"}[5s]))',
    );
  });
  origin.answerWith('*', undefined);
  await phase('recovered', []);
  origin.setLatency(1_500);
  // A source 300 times slower than the traffic needs sheds too (truthfully): allowed, not required.
  await phase('slow', ['EchoStoreSlowLoads'], ['EchoStoreShedding']);
  origin.setLatency(5);
  await phase('recovered again', []);
  // B dies holding leases: it reads ids only it has asked for, and is SIGKILLed while the source
  // holds them; then A reads them, waits out B's unrenewed leases and takes them over.
  const held = [0, 1, 2].map((i) => `${HOLD_PREFIX}alerts-${i}`);
  for (const id of held) void status(b, id);
  for (const id of held)
    if (!(await origin.seen(id, 5_000))) throw new Error('B did not read the held ids within 5 s');
  await stopChild(b.process);
  for (const id of held) origin.release(id);
  const takenOver = Promise.all(held.map((id) => status(a, id)));
  await phase('down', [`EchoStoreDown@${new URL(b.url).host}`, 'EchoStoreLeaseTakeovers']);
  const statuses = await takenOver;
  const sourceReads = held.map((id) => origin.readsOf(id));
  const before = [...new Set(takeovers.filter((p) => p !== 'down'))];
  clearInterval(traffic);
  prometheus.kill('SIGTERM');
  await Promise.all(services.map((s) => s.stop(2_000)));
  await origin.close();
  await valkey.stop();
  return {
    title: `alerts drill: ${version.stdout.split('\n')[0]?.trim()}, rules scaled 1/${args.scale}, ${phaseMs / 1000} s a phase`,
    scale: args.scale,
    checks: [
      ...checks,
      check(
        'taken over: A answers 200 for each held id, each read twice at the source (B, then A)',
        statuses.every((s) => s === 200) && sourceReads.every((n) => n === 2),
        `A answered ${statuses.join(', ')}; source reads per held id ${sourceReads.join(', ')}`,
      ),
      check(
        'EchoStoreLeaseTakeovers never fires before an instance dies',
        before.length === 0,
        before.map((p) => `fired during ${p}`).join(', ') || 'never did',
      ),
    ],
  };
});
