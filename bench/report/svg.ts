/**
 * A grouped bar chart as standalone SVG (no plotting dependency): groups along x, one bar per
 * series in each group, a labelled y axis with a zero line. Used for the benchmark report's
 * figures (TTFT overhead per configuration, added TTFT per policy).
 */

export interface Series {
  readonly name: string;
  readonly values: readonly (number | null)[];
}

export interface BarChart {
  readonly title: string;
  readonly yLabel: string;
  readonly groups: readonly string[];
  readonly series: readonly Series[];
}

export const COLORS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1'];

export function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function niceStep(range: number): number {
  const raw = range / 5;
  const power = 10 ** Math.floor(Math.log10(raw || 1));
  const unit = raw / power;
  return (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10) * power;
}

/** A chart's opening lines: the svg element, a white ground and the title. */
export function svgHead(width: number, height: number, title: string): string[] {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${width / 2}" y="20" text-anchor="middle" font-size="14">${escapeXml(title)}</text>`,
  ];
}

/** Horizontal grid lines with their values from yMin to yMax (the zero line darker), and the y label. */
export function yGrid(a: { left: number; right: number; top: number; plotH: number; yMin: number; yMax: number; step: number; y: (v: number) => number; label: string }): string[] {
  const out: string[] = [];
  for (let v = a.yMin; v <= a.yMax + a.step / 2; v += a.step) {
    out.push(`<line x1="${a.left}" x2="${a.right}" y1="${a.y(v)}" y2="${a.y(v)}" stroke="${Math.abs(v) < a.step / 1e6 ? '#333' : '#ddd'}"/>`);
    out.push(`<text x="${a.left - 6}" y="${a.y(v) + 4}" text-anchor="end">${Math.round(v * 1000) / 1000}</text>`);
  }
  out.push(`<text transform="translate(16 ${a.top + a.plotH / 2}) rotate(-90)" text-anchor="middle">${escapeXml(a.label)}</text>`);
  return out;
}

export function groupedBarSvg(chart: BarChart): string {
  const width = Math.max(640, 160 + chart.groups.length * (chart.series.length * 14 + 26));
  const height = 380;
  const left = 70;
  const right = 90; // room for the last rotated group label
  const top = 40;
  const bottom = 90;
  const values = chart.series.flatMap((s) => s.values.filter((v): v is number => v !== null && Number.isFinite(v)));
  const max = Math.max(0, ...values);
  const min = Math.min(0, ...values);
  const step = niceStep(max - min || 1);
  const yMax = Math.ceil(max / step) * step || step;
  const yMin = Math.floor(min / step) * step;
  const plotH = height - top - bottom;
  const y = (v: number): number => top + ((yMax - v) / (yMax - yMin)) * plotH;
  const groupW = (width - left - right) / chart.groups.length;
  const barW = Math.min(14, (groupW - 10) / chart.series.length);
  const out = svgHead(width, height, chart.title);
  out.push(...yGrid({ left, right: width - right, top, plotH, yMin, yMax, step, y, label: chart.yLabel }));
  chart.groups.forEach((group, g) => {
    const x0 = left + g * groupW + (groupW - barW * chart.series.length) / 2;
    chart.series.forEach((series, s) => {
      const v = series.values[g];
      if (v === null || v === undefined || !Number.isFinite(v)) return;
      const top0 = y(Math.max(0, v));
      const h = Math.abs(y(v) - y(0));
      out.push(
        `<rect x="${x0 + s * barW}" y="${top0}" width="${barW - 1}" height="${Math.max(h, 0.5)}" fill="${COLORS[s % COLORS.length]}"><title>${escapeXml(`${series.name} ${group}: ${Math.round(v * 100) / 100}`)}</title></rect>`,
      );
    });
    out.push(`<text transform="translate(${left + g * groupW + groupW / 2} ${height - bottom + 12}) rotate(35)" text-anchor="start">${escapeXml(group)}</text>`);
  });
  chart.series.forEach((series, s) => {
    const lx = left + s * 110;
    out.push(`<rect x="${lx}" y="${height - 22}" width="10" height="10" fill="${COLORS[s % COLORS.length]}"/>`);
    out.push(`<text x="${lx + 14}" y="${height - 13}">${escapeXml(series.name)}</text>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
