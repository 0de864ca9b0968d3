/** A hand-written SVG bar chart for drill reports: no dependencies, a pure function. */

/** One bar: its label, the measured value, the value the law expects (a dashed marker), green when `pass`. */
export interface Bar {
  label: string;
  value: number;
  expected: number;
  pass: boolean;
}

/**
 * A 720×440 bar chart with a log-10 y axis up to the first power of ten at or above every value
 * and expected value (at least 10), a gridline and a label at each decade; bars grow from half a
 * decade below 1, so a bar of 1 shows and a bar of 0 is empty. Each bar carries its value above
 * it and its expected value under its label. A standalone SVG document.
 */
export function barChartSvg(title: string, subtitle: string, yLabel: string, bars: Bar[]): string {
  const [W, H, top, left, bottom, right] = [720, 440, 70, 72, 440 - 64, 720 - 24];
  const decades = Math.ceil(
    Math.log10(Math.max(10, ...bars.flatMap((b) => [b.value, b.expected]))),
  );
  const lo = -0.5;
  const y = (v: number) =>
    (bottom - ((Math.max(lo, Math.log10(v)) - lo) / (decades - lo)) * (bottom - top)).toFixed(1);
  const text = (x: number | string, yy: number | string, s: string, attrs = '') =>
    `<text x="${x}" y="${yy}" text-anchor="middle"${attrs}>${xml(s)}</text>`;
  const n = (v: number) => v.toLocaleString('en-US');
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="system-ui, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    text(W / 2, 26, title, ' font-size="16" font-weight="600"'),
    text(W / 2, 46, subtitle, ' fill="#555"'),
  ];
  for (let d = 0; d <= decades; d++) {
    out.push(
      `<line x1="${left}" x2="${right}" y1="${y(10 ** d)}" y2="${y(10 ** d)}" stroke="#ddd"/>`,
      `<text x="${left - 8}" y="${y(10 ** d)}" text-anchor="end" dominant-baseline="middle">${n(10 ** d)}</text>`,
    );
  }
  const mid = (top + bottom) / 2;
  out.push(
    `<line x1="${left}" x2="${right}" y1="${bottom}" y2="${bottom}" stroke="#333"/>`,
    `<line x1="${left}" x2="${left}" y1="${top}" y2="${bottom}" stroke="#333"/>`,
    text(18, mid, `${yLabel} (log scale)`, ` transform="rotate(-90 18 ${mid})"`),
  );
  const slot = (right - left) / Math.max(1, bars.length);
  const w = Math.min(120, slot * 0.5);
  bars.forEach((b, i) => {
    const cx = left + slot * (i + 0.5);
    const x0 = (cx - w / 2).toFixed(1);
    out.push(
      `<rect x="${x0}" y="${y(b.value)}" width="${w.toFixed(1)}" height="${(bottom - Number(y(b.value))).toFixed(1)}" fill="${b.pass ? '#3a8f5c' : '#c0392b'}"/>`,
      `<line x1="${(cx - w / 2 - 6).toFixed(1)}" x2="${(cx + w / 2 + 6).toFixed(1)}" y1="${y(b.expected)}" y2="${y(b.expected)}" stroke="#111" stroke-width="2" stroke-dasharray="6 4"/>`,
      text(
        cx.toFixed(1),
        (Math.min(+y(b.value), +y(b.expected)) - 8).toFixed(1),
        n(b.value),
        ' font-weight="600"',
      ),
      text(cx.toFixed(1), bottom + 20, b.label, ' font-weight="600"'),
      text(
        cx.toFixed(1),
        bottom + 38,
        `expected ${n(b.expected)}${b.pass ? '' : ' — FAIL'}`,
        ' fill="#555"',
      ),
    );
  });
  return `${[...out, '</svg>'].join('\n')}\n`;
}

const xml = (s: string) =>
  s
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;');
