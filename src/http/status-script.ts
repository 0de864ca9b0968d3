/**
 * The status page's script (`/status.js`), plain browser JavaScript kept as
 * text: it is sent as is, never run by Node. It polls the service's own JSON
 * and metrics every 2 s, keeps a minute of error counts to show what is
 * recent, and writes only `textContent` (nothing the service returns is ever
 * parsed as HTML).
 */
export const STATUS_SCRIPT = String.raw`'use strict';
const REFRESH_MS = 2000;
const WINDOW_MS = 60000;
const $ = (id) => document.getElementById(id);
const history = []; // [{ at, errors: Map<key, count> }], the last minute

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

/** Samples of the counters the page shows as errors, by "table\u0000what". */
function errorCounts(text) {
  const counts = new Map();
  const add = (key, n) => counts.set(key, (counts.get(key) || 0) + n);
  for (const line of text.split('\n')) {
    const m = /^(echostore_load_errors_total|echostore_valkey_errors_total|echostore_writes_refused_total)\{([^}]*)\} (\S+)$/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...m[2].matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    const what = m[1] === 'echostore_load_errors_total' ? 'load ' + labels.code
      : m[1] === 'echostore_valkey_errors_total' ? 'valkey ' + labels.op : 'refused ' + labels.op;
    add(labels.table + '\u0000' + what, Number(m[3]));
  }
  return counts;
}

function recent(now, counts) {
  history.push({ at: now, errors: counts });
  while (history.length > 1 && history[0].at < now - WINDOW_MS) history.shift();
  const first = history[0].errors;
  const delta = new Map();
  for (const [key, n] of counts) delta.set(key, n - (first.get(key) || 0));
  return delta;
}

function showValkey(ready) {
  const status = ready.status + (ready.reason ? ' (' + ready.reason + ')' : '');
  $('state').textContent = status;
  $('state').className = ready.status === 'ready' ? 'ok' : ready.status === 'degraded' ? 'bad' : 'warn';
  $('v-status').textContent = ready.valkey;
  $('v-status').className = ready.valkey === 'ready' ? 'ok' : 'bad';
  const d = ready.details || {};
  const t = d.topology;
  $('v-topology').textContent = t ? t.mode + (t.master ? ' ' + t.master : '') + ': ' + (t.nodes.join(', ') || 'none known') : '-';
  $('v-subscriber').textContent = d.coherence === false ? 'off' : String(d.subscriber);
  $('v-policy').textContent = (d.maxmemoryPolicy || 'unknown') + (d.evictionRisk ? ' — ' + d.evictionRisk : '');
  $('v-policy').className = d.evictionRisk ? 'warn' : '';
}

function showTables(tables, delta) {
  const body = $('tables').tBodies[0];
  body.replaceChildren();
  const recentOf = (name) => {
    let n = 0;
    for (const [key, d] of delta) if (key.startsWith(name + '\u0000')) n += d;
    return n;
  };
  for (const t of tables) {
    const s = t.stats;
    const reads = s.hits + s.misses;
    const row = body.insertRow();
    row.dataset.table = t.name;
    cell(row, t.name);
    const ratio = reads === 0 ? null : s.hits / reads;
    cell(row, ratio === null ? '-' : (100 * ratio).toFixed(1) + ' %', ratio === null ? '' : ratio > 0.8 ? 'ok' : ratio > 0.5 ? 'warn' : 'bad');
    for (const k of ['hits', 'misses', 'loads', 'l2_hits', 'coalesced', 'flights']) cell(row, String(s[k]));
    cell(row, s.loads_active + ' / ' + s.load_limit, s.load_limit < Math.min(t.policy.initialConcurrentLoads, t.policy.maxConcurrentLoads) ? 'warn' : '');
    cell(row, String(s.loads_queued));
    cell(row, s.queue_delay_ms + ' ms', s.queue_delay_ms > t.policy.maxQueueDelayMs / 2 ? 'bad' : '');
    cell(row, String(s.l1_entries));
    cell(row, String(s.l1_bytes));
    const errors = recentOf(t.name);
    cell(row, String(errors), errors > 0 ? 'bad' : 'ok');
  }
}

function showErrors(counts, delta) {
  const body = $('errors').tBodies[0];
  body.replaceChildren();
  const keys = [...counts.keys()].filter((k) => counts.get(k) > 0).sort();
  if (keys.length === 0) {
    const row = body.insertRow();
    const td = cell(row, 'none since start', 'ok');
    td.colSpan = 4;
    return;
  }
  for (const key of keys) {
    const [table, what] = key.split('\u0000');
    const row = body.insertRow();
    cell(row, table);
    cell(row, what);
    const d = delta.get(key) || 0;
    cell(row, String(d), d > 0 ? 'bad' : '');
    cell(row, String(counts.get(key)));
  }
}

function fillTables(tables) {
  const select = $('i-table');
  if (select.options.length === tables.length) return;
  select.replaceChildren(...tables.map((t) => new Option(t.name, t.name)));
}

async function refresh() {
  try {
    const [tables, ready, metrics] = await Promise.all([
      fetch('/v1/tables').then((r) => r.json()),
      fetch('/readyz').then((r) => r.json()),
      fetch('/metrics').then((r) => r.text()),
    ]);
    const counts = errorCounts(metrics);
    const delta = recent(Date.now(), counts);
    showValkey(ready);
    showTables(tables.tables, delta);
    showErrors(counts, delta);
    fillTables(tables.tables);
    $('updated').textContent = new Date().toLocaleTimeString();
  } catch (err) {
    $('state').textContent = 'unreachable (' + err.message + ')';
    $('state').className = 'bad';
  }
}

async function admin(method) {
  const table = $('i-table').value;
  const id = $('i-id').value;
  const token = $('i-token').value;
  const path = method === 'DELETE'
    ? '/v1/tables/' + encodeURIComponent(table) + '/items/' + encodeURIComponent(id)
    : '/v1/admin/tables/' + encodeURIComponent(table) + '/items/' + encodeURIComponent(id);
  const headers = token ? { authorization: 'Bearer ' + token } : {};
  const out = $('i-result');
  try {
    const r = await fetch(path, { method, headers });
    const text = await r.text();
    out.className = r.ok ? '' : 'bad';
    out.textContent = r.status === 204 ? 'purged ' + table + ' ' + JSON.stringify(id)
      : JSON.stringify(JSON.parse(text), null, 2);
  } catch (err) {
    out.className = 'bad';
    out.textContent = String(err);
  }
}

$('inspect').addEventListener('submit', (e) => { e.preventDefault(); admin('GET'); });
$('i-purge').addEventListener('click', () => { if ($('i-id').value) admin('DELETE'); });
refresh();
setInterval(refresh, REFRESH_MS);
`;
