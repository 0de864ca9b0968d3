/** Reading the Prometheus text a service (`/metrics`) or a store's registry exposes. */

/** One sample line: `name{label="value",…} value`. */
export interface MetricSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (comments skipped). */
export function parseMetrics(text: string): MetricSample[] {
  const samples: MetricSample[] = [];
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (m === null) continue;
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[k as string] = v as string;
    }
    samples.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return samples;
}

/** The samples of `<url>/metrics`. */
export async function scrape(url: string): Promise<MetricSample[]> {
  return parseMetrics(await (await fetch(`${url}/metrics`)).text());
}

/** The sample of `name` whose labels include `labels`; undefined when there is none. */
export function metric(
  samples: MetricSample[],
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  return samples.find(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  )?.value;
}

/**
 * The values of counter `name` for `table`, keyed by its other labels' values
 * joined with `,` (`''` when it has none).
 */
export function byLabels(
  samples: MetricSample[],
  name: string,
  table: string,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples) {
    if (s.name !== name || s.labels.table !== table) continue;
    const { table: _, ...rest } = s.labels;
    const key = Object.values(rest).join(',');
    out[key] = (out[key] ?? 0) + s.value;
  }
  return out;
}
