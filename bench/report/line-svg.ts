/**
 * A line chart as standalone SVG (no plotting dependency): x on a log scale (link rates), one
 * polyline with dots per series, a labelled y axis. Used for the codec benchmark's TTFT against
 * link rate.
 */
import { COLORS, escapeXml, niceStep, svgHead, yGrid } from './svg.js';

export interface LineSeries {
  readonly name: string;
  /** [x, y] points; x > 0. */
  readonly points: readonly (readonly [number, number])[];
}

export interface LineChart {
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly series: readonly LineSeries[];
  /** Tick labels of x, by value. */
  readonly xTicks: readonly (readonly [number, string])[];
}

export function lineSvg(chart: LineChart): string {
  const width = 720;
  const height = 400;
  const left = 70;
  const right = 30;
  const top = 40;
  const bottom = 80;
  const xs = chart.series.flatMap((s) => s.points.map(([x]) => x)).concat(chart.xTicks.map(([x]) => x));
  const ys = chart.series.flatMap((s) => s.points.map(([, y]) => y)).filter((v) => Number.isFinite(v));
  const [xMin, xMax] = [Math.log10(Math.min(...xs)), Math.log10(Math.max(...xs))];
  const min = Math.min(0, ...ys);
  const max = Math.max(0, ...ys);
  const step = niceStep(max - min || 1);
  const yMax = Math.ceil(max / step) * step || step;
  const yMin = Math.floor(min / step) * step;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const x = (v: number): number => left + ((Math.log10(v) - xMin) / (xMax - xMin || 1)) * plotW;
  const y = (v: number): number => top + ((yMax - v) / (yMax - yMin)) * plotH;
  const out = svgHead(width, height, chart.title);
  out.push(...yGrid({ left, right: width - right, top, plotH, yMin, yMax, step, y, label: chart.yLabel }));
  for (const [value, label] of chart.xTicks) {
    out.push(`<line x1="${x(value)}" x2="${x(value)}" y1="${top}" y2="${top + plotH}" stroke="#eee"/>`);
    out.push(`<text x="${x(value)}" y="${top + plotH + 16}" text-anchor="middle">${escapeXml(label)}</text>`);
  }
  out.push(`<text x="${left + plotW / 2}" y="${top + plotH + 34}" text-anchor="middle">${escapeXml(chart.xLabel)}</text>`);
  chart.series.forEach((series, s) => {
    const color = COLORS[s % COLORS.length] as string;
    const points = series.points.filter(([, v]) => Number.isFinite(v));
    out.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${points.map(([a, b]) => `${x(a).toFixed(1)},${y(b).toFixed(1)}`).join(' ')}"/>`);
    for (const [a, b] of points)
      out.push(
        `<circle cx="${x(a).toFixed(1)}" cy="${y(b).toFixed(1)}" r="3" fill="${color}"><title>${escapeXml(`${series.name}: ${Math.round(b * 1000) / 1000} at ${a}`)}</title></circle>`,
      );
    const lx = left + s * 140;
    out.push(`<rect x="${lx}" y="${height - 22}" width="10" height="10" fill="${color}"/>`);
    out.push(`<text x="${lx + 14}" y="${height - 13}">${escapeXml(series.name)}</text>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
