/**
 * A per-layer timeline as standalone SVG: one panel per method, one row per layer, a dot where
 * the layer's bytes were ready and a bar for its (simulated) compute. Where the dots run ahead of
 * the bars, transfer is hidden behind compute; where the bars wait for the dots, the GPU stalls.
 */
import { COLORS, escapeXml, niceStep } from './svg.js';

export interface TimelinePanel {
  readonly name: string;
  /** Milliseconds from the request to each layer's bytes being ready. */
  readonly readyMs: readonly number[];
  /** Milliseconds from the request to each layer's compute starting. */
  readonly computeStartMs: readonly number[];
  readonly computeMs: number;
}

export interface Timeline {
  readonly title: string;
  readonly panels: readonly TimelinePanel[];
}

export function timelineSvg(chart: Timeline): string {
  const layers = Math.max(1, ...chart.panels.map((p) => p.readyMs.length));
  const rowH = 5;
  const panelH = layers * rowH + 28;
  const left = 90;
  const right = 20;
  const top = 40;
  const width = 760;
  const height = top + chart.panels.length * panelH + 78;
  const end = Math.max(1, ...chart.panels.flatMap((p) => [...p.readyMs, ...p.computeStartMs.map((s) => s + p.computeMs)]));
  const step = niceStep(end / 2);
  const xMax = Math.ceil(end / step) * step;
  const x = (ms: number): number => left + (ms / xMax) * (width - left - right);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`);
  out.push(`<rect width="100%" height="100%" fill="white"/>`);
  out.push(`<text x="${width / 2}" y="20" text-anchor="middle" font-size="14">${escapeXml(chart.title)}</text>`);
  const axisY = top + chart.panels.length * panelH;
  for (let v = 0; v <= xMax + step / 2; v += step) {
    out.push(`<line x1="${x(v)}" x2="${x(v)}" y1="${top}" y2="${axisY}" stroke="#eee"/>`);
    out.push(`<text x="${x(v)}" y="${axisY + 14}" text-anchor="middle">${Math.round(v)}</text>`);
  }
  out.push(`<text x="${(left + width - right) / 2}" y="${axisY + 32}" text-anchor="middle">milliseconds since the request</text>`);
  chart.panels.forEach((panel, p) => {
    const y0 = top + p * panelH + 18;
    const color = COLORS[p % COLORS.length];
    out.push(`<text x="8" y="${y0 + (layers * rowH) / 2}">${escapeXml(panel.name)}</text>`);
    const ttft = Math.max(0, ...panel.computeStartMs.map((s) => s + panel.computeMs));
    out.push(`<text x="${x(ttft) - 4}" y="${y0 - 4}" font-size="10" text-anchor="end">TTFT ${Math.round(ttft)} ms</text>`);
    out.push(`<line x1="${x(ttft)}" x2="${x(ttft)}" y1="${y0 - 12}" y2="${y0 + layers * rowH}" stroke="#333" stroke-dasharray="3 2"/>`);
    for (let l = 0; l < layers; l++) {
      const ly = y0 + l * rowH;
      const start = panel.computeStartMs[l];
      if (start !== undefined)
        out.push(`<rect x="${x(start)}" y="${ly}" width="${Math.max(0.5, x(start + panel.computeMs) - x(start))}" height="${rowH - 1}" fill="${color}" opacity="0.55"/>`);
      const ready = panel.readyMs[l];
      if (ready !== undefined) out.push(`<circle cx="${x(ready)}" cy="${ly + rowH / 2}" r="1.8" fill="#222"><title>layer ${l} ready at ${Math.round(ready)} ms</title></circle>`);
    }
  });
  const ly = height - 12;
  out.push(`<circle cx="${left + 5}" cy="${ly - 4}" r="2.5" fill="#222"/><text x="${left + 14}" y="${ly}">layer ready (bytes in the target)</text>`);
  out.push(
    `<rect x="${left + 220}" y="${ly - 8}" width="14" height="8" fill="${COLORS[0]}" opacity="0.55"/><text x="${left + 240}" y="${ly}">layer compute (one row per layer, layer 0 on top)</text>`,
  );
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
