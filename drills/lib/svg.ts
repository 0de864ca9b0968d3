/** Hand-written SVG charts for drill reports: no dependencies, pure functions. */

/** One bar of {@link barChartSvg}. */
export interface Bar {
  /** Category under the bar, e.g. the regime name. */
  label: string;
  /** The measured value; 0 is drawn as an empty bar on the baseline. */
  value: number;
  /** The value the law expects, drawn as a dashed marker across the bar. */
  expected: number;
  /** Colours the bar: green when the law holds, red when it does not. */
  pass: boolean;
}

/** Options of {@link barChartSvg}. */
export interface BarChartOptions {
  title: string;
  /** A second, smaller line under the title. */
  subtitle?: string;
  /** Text along the y axis. */
  yLabel: string;
  bars: Bar[];
  /** Total width in px. Default 720. */
  width?: number;
  /** Total height in px. Default 440. */
  height?: number;
}

/** The axis floor: 10^-0.5, under the first labelled gridline (1). */
const FLOOR = 10 ** -0.5;
const PASS_FILL = '#3a8f5c';
const FAIL_FILL = '#c0392b';

/**
 * A bar chart with a log-10 y axis up to the first power of ten at or above
 * every value and expected value (at least 10), with a gridline and a label at
 * each decade (1, 10, 100, …); bars grow from half a decade below 1. Each bar carries its value above it
 * and its expected value under its label.
 *
 * @returns a standalone SVG document.
 */
export function barChartSvg(options: BarChartOptions): string {
  const width = options.width ?? 720;
  const height = options.height ?? 440;
  const { bars } = options;
  const margin = { top: 70, right: 24, bottom: 64, left: 72 };
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const bottom = margin.top + plotH;

  const highest = Math.max(10, ...bars.flatMap((b) => [b.value, b.expected]));
  const decades = Math.ceil(Math.log10(highest));
  // Bars grow from half a decade below 1, so a bar of 1 is visible and a bar of 0 is empty.
  const y = (v: number) =>
    bottom -
    ((Math.log10(Math.max(FLOOR, v)) - Math.log10(FLOOR)) / (decades - Math.log10(FLOOR))) * plotH;

  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="${width / 2}" y="26" text-anchor="middle" font-size="16" font-weight="600">${xml(options.title)}</text>`,
  ];
  if (options.subtitle !== undefined) {
    out.push(
      `<text x="${width / 2}" y="46" text-anchor="middle" fill="#555">${xml(options.subtitle)}</text>`,
    );
  }
  for (let d = 0; d <= decades; d++) {
    const gy = fmt(y(10 ** d));
    out.push(
      `<line x1="${margin.left}" x2="${margin.left + plotW}" y1="${gy}" y2="${gy}" stroke="#ddd"/>`,
      `<text x="${margin.left - 8}" y="${gy}" text-anchor="end" dominant-baseline="middle">${(10 ** d).toLocaleString('en-US')}</text>`,
    );
  }
  const yMid = margin.top + plotH / 2;
  out.push(
    `<line x1="${margin.left}" x2="${margin.left + plotW}" y1="${bottom}" y2="${bottom}" stroke="#333"/>`,
    `<line x1="${margin.left}" x2="${margin.left}" y1="${margin.top}" y2="${bottom}" stroke="#333"/>`,
    `<text x="18" y="${yMid}" text-anchor="middle" transform="rotate(-90 18 ${yMid})">${xml(options.yLabel)} (log scale)</text>`,
  );

  const slot = plotW / Math.max(1, bars.length);
  const barW = Math.min(120, slot * 0.5);
  bars.forEach((b, i) => {
    const cx = margin.left + slot * (i + 0.5);
    const x = fmt(cx - barW / 2);
    const top = y(b.value);
    const ey = fmt(y(b.expected));
    out.push(
      `<rect x="${x}" y="${fmt(top)}" width="${fmt(barW)}" height="${fmt(bottom - top)}" fill="${b.pass ? PASS_FILL : FAIL_FILL}"/>`,
      `<line x1="${fmt(cx - barW / 2 - 6)}" x2="${fmt(cx + barW / 2 + 6)}" y1="${ey}" y2="${ey}" stroke="#111" stroke-width="2" stroke-dasharray="6 4"/>`,
      `<text x="${fmt(cx)}" y="${fmt(Math.min(top, y(b.expected)) - 8)}" text-anchor="middle" font-weight="600">${b.value.toLocaleString('en-US')}</text>`,
      `<text x="${fmt(cx)}" y="${bottom + 20}" text-anchor="middle" font-weight="600">${xml(b.label)}</text>`,
      `<text x="${fmt(cx)}" y="${bottom + 38}" text-anchor="middle" fill="#555">expected ${b.expected.toLocaleString('en-US')}${b.pass ? '' : ' — FAIL'}</text>`,
    );
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

function fmt(n: number): string {
  return n.toFixed(1);
}

function xml(text: string): string {
  return text
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;');
}
