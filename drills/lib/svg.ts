/** A hand-written SVG bar chart for drill reports: no dependencies, a pure function. */

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

/** The axis floor: 10^-0.5, under the first labelled gridline (1). */
const FLOOR = 10 ** -0.5;
const [WIDTH, HEIGHT] = [720, 440];
const MARGIN = { top: 70, right: 24, bottom: 64, left: 72 };

/**
 * A 720×440 bar chart with a log-10 y axis up to the first power of ten at or
 * above every value and expected value (at least 10), with a gridline and a
 * label at each decade (1, 10, 100, …); bars grow from half a decade below 1.
 * Each bar carries its value above it and its expected value under its label.
 *
 * @returns a standalone SVG document.
 */
export function barChartSvg(title: string, subtitle: string, yLabel: string, bars: Bar[]): string {
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const bottom = HEIGHT - MARGIN.bottom;
  const decades = Math.ceil(
    Math.log10(Math.max(10, ...bars.flatMap((b) => [b.value, b.expected]))),
  );
  // Bars grow from half a decade below 1, so a bar of 1 is visible and a bar of 0 is empty.
  const lo = Math.log10(FLOOR);
  const y = (v: number) =>
    bottom - ((Math.log10(Math.max(FLOOR, v)) - lo) / (decades - lo)) * (bottom - MARGIN.top);
  const [left, right, yMid] = [MARGIN.left, MARGIN.left + plotW, (MARGIN.top + bottom) / 2];
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="system-ui, sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="#fff"/>`,
    `<text x="${WIDTH / 2}" y="26" text-anchor="middle" font-size="16" font-weight="600">${xml(title)}</text>`,
    `<text x="${WIDTH / 2}" y="46" text-anchor="middle" fill="#555">${xml(subtitle)}</text>`,
  ];
  for (let d = 0; d <= decades; d++) {
    const gy = fmt(y(10 ** d));
    out.push(
      `<line x1="${left}" x2="${right}" y1="${gy}" y2="${gy}" stroke="#ddd"/>`,
      `<text x="${left - 8}" y="${gy}" text-anchor="end" dominant-baseline="middle">${(10 ** d).toLocaleString('en-US')}</text>`,
    );
  }
  out.push(
    `<line x1="${left}" x2="${right}" y1="${bottom}" y2="${bottom}" stroke="#333"/>`,
    `<line x1="${left}" x2="${left}" y1="${MARGIN.top}" y2="${bottom}" stroke="#333"/>`,
    `<text x="18" y="${yMid}" text-anchor="middle" transform="rotate(-90 18 ${yMid})">${xml(yLabel)} (log scale)</text>`,
  );
  const slot = plotW / Math.max(1, bars.length);
  const barW = Math.min(120, slot * 0.5);
  bars.forEach((b, i) => {
    const cx = left + slot * (i + 0.5);
    const [top, ey] = [y(b.value), fmt(y(b.expected))];
    out.push(
      `<rect x="${fmt(cx - barW / 2)}" y="${fmt(top)}" width="${fmt(barW)}" height="${fmt(bottom - top)}" fill="${b.pass ? '#3a8f5c' : '#c0392b'}"/>`,
      `<line x1="${fmt(cx - barW / 2 - 6)}" x2="${fmt(cx + barW / 2 + 6)}" y1="${ey}" y2="${ey}" stroke="#111" stroke-width="2" stroke-dasharray="6 4"/>`,
      `<text x="${fmt(cx)}" y="${fmt(Math.min(top, y(b.expected)) - 8)}" text-anchor="middle" font-weight="600">${b.value.toLocaleString('en-US')}</text>`,
      `<text x="${fmt(cx)}" y="${bottom + 20}" text-anchor="middle" font-weight="600">${xml(b.label)}</text>`,
      `<text x="${fmt(cx)}" y="${bottom + 38}" text-anchor="middle" fill="#555">expected ${b.expected.toLocaleString('en-US')}${b.pass ? '' : ' — FAIL'}</text>`,
    );
  });
  return `${[...out, '</svg>'].join('\n')}\n`;
}

const fmt = (n: number) => n.toFixed(1);

const xml = (text: string) =>
  text
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;');
