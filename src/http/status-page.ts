/**
 * `GET /status`: a page for people, in the manner of HAProxy's stats page —
 * one dense table of the tables, the Valkey connection, recent errors —
 * refreshed every 2 s by a little script from the JSON and metrics the
 * service already serves (`/v1/tables`, `/readyz`, `/metrics`). Plain HTML,
 * no build step; the script is `/status.js` so the page can forbid inline
 * script (CSP). The inspect and purge form sends the admin token the user
 * types, to the admin routes; the page itself is open, like `/v1/tables`.
 */
import type { FastifyInstance } from 'fastify';
import { errorResponses } from './openapi.js';
import { STATUS_SCRIPT } from './status-script.js';

const CSP =
  "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; frame-ancestors 'none'";

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>EchoStore status</title>
<style>
  body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #222; background: #fafafa; }
  h1 { font-size: 18px; margin: 0 0 4px; } h2 { font-size: 14px; margin: 20px 0 6px; }
  table { border-collapse: collapse; background: #fff; }
  th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; white-space: nowrap; }
  th { background: #e8eef6; } td:first-child, th:first-child { text-align: left; }
  .ok { background: #d9f2d9; } .warn { background: #fff1c2; } .bad { background: #f7d0d0; }
  #state { font-weight: 600; padding: 2px 8px; border-radius: 3px; }
  .muted { color: #777; } pre { background: #fff; border: 1px solid #ccc; padding: 8px; max-width: 900px; overflow: auto; }
  form { display: flex; gap: 6px; align-items: center; flex-wrap: wrap; }
</style>
</head>
<body>
<h1>EchoStore <span id="state" class="muted">…</span></h1>
<div class="muted">Refreshed every 2 s from <code>/v1/tables</code>, <code>/readyz</code> and <code>/metrics</code>; last: <span id="updated">never</span></div>

<h2>Valkey</h2>
<table id="valkey"><tbody>
  <tr><th>connection</th><td id="v-status">…</td></tr>
  <tr><th>topology</th><td id="v-topology">…</td></tr>
  <tr><th>coherence (subscriber)</th><td id="v-subscriber">…</td></tr>
  <tr><th>maxmemory-policy</th><td id="v-policy">…</td></tr>
</tbody></table>

<h2>Tables</h2>
<table id="tables">
  <thead><tr>
    <th>table</th><th>L1 hit ratio</th><th>hits</th><th>misses</th><th>loads</th><th>L2 hits</th>
    <th>coalesced</th><th>flights</th><th>loads active / limit</th><th>queued</th><th>queueing delay</th>
    <th>L1 rows</th><th>L1 bytes</th><th>errors, last minute</th>
  </tr></thead>
  <tbody></tbody>
</table>

<h2>Recent errors</h2>
<table id="errors">
  <thead><tr><th>table</th><th>what</th><th>last minute</th><th>since start</th></tr></thead>
  <tbody></tbody>
</table>

<h2>Inspect an id</h2>
<form id="inspect" autocomplete="off">
  <select id="i-table" aria-label="table"></select>
  <input id="i-id" placeholder="id" aria-label="id" required>
  <input id="i-token" type="password" placeholder="admin token" aria-label="admin token">
  <button type="submit" id="i-go">Inspect</button>
  <button type="button" id="i-purge">Purge</button>
</form>
<pre id="i-result" class="muted">The instance's L1 row, the Valkey value and the lease of an id (admin token).</pre>
<script src="/status.js"></script>
</body>
</html>
`;

/** Registers `GET /status` (the page) and `GET /status.js` (its script). */
export function statusRoutes(app: FastifyInstance): void {
  const page = (summary: string, type: string) => ({
    schema: {
      summary,
      tags: ['operator'],
      response: {
        200: { description: summary, content: { [type]: { schema: { type: 'string' } } } },
        ...errorResponses({}),
      },
    },
  });
  app.get(
    '/status',
    page('The status page, for people (docs/operations.md)', 'text/html'),
    async (_request, reply) =>
      reply
        .type('text/html; charset=utf-8')
        .header('content-security-policy', CSP)
        .header('cache-control', 'no-store')
        .send(PAGE),
  );
  app.get(
    '/status.js',
    page("The status page's script", 'text/javascript'),
    async (_request, reply) =>
      reply
        .type('text/javascript; charset=utf-8')
        .header('cache-control', 'no-store')
        .send(STATUS_SCRIPT),
  );
}
