/** Reading the Prometheus text a service (`/metrics`) or a store's registry exposes. */

/** One sample line: `name{label="value",…} value`. */
export interface MetricSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (comments skipped). */
export function parseMetrics(text: string): MetricSample[] {
  return text.split('\n').flatMap((line) => {
    const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (m === null) return [];
    const pairs = (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g);
    const labels: Record<string, string> = Object.fromEntries([...pairs].map(([, k, v]) => [k, v]));
    return [{ name: m[1] as string, labels, value: Number(m[3]) }];
  });
}

/** The samples of `<url>/metrics`. */
export const scrape = async (url: string): Promise<MetricSample[]> =>
  parseMetrics(await (await fetch(`${url}/metrics`)).text());

/** The sample of `name` whose labels include `labels`; undefined when there is none. */
export function metric(samples: MetricSample[], name: string, labels: Record<string, string> = {}) {
  const wanted = Object.entries(labels);
  return samples.find((s) => s.name === name && wanted.every(([k, v]) => s.labels[k] === v))?.value;
}

/**
 * The values of counter `name` for `table`, keyed by its other labels' values
 * joined with `,` (`''` when it has none).
 */
export function byLabels(samples: MetricSample[], name: string, table: string) {
  const out: Record<string, number> = {};
  for (const s of samples) {
    if (s.name !== name || s.labels.table !== table) continue;
    const { table: _, ...rest } = s.labels;
    const key = Object.values(rest).join(',');
    out[key] = (out[key] ?? 0) + s.value;
  }
  return out;
}
