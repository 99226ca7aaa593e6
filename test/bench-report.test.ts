/**
 * The benchmark's report pieces, which users read: the Markdown report states the targets from
 * the numbers it was given, the SVG figures are well-formed and carry every bar, and the TTFT
 * data file names its source.
 */
import { readFileSync } from 'node:fs';
import { XMLValidator } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { groupedBarSvg } from '../bench/report/svg.js';
import { renderReport } from '../bench/ttft-matrix.js';

describe('groupedBarSvg', () => {
  it('draws one bar per value, skips missing ones, and is valid XML', () => {
    const svg = groupedBarSvg({ title: 'T <&>', yLabel: 'ms', groups: ['a', 'b'], series: [{ name: 'x', values: [1, -2] }, { name: 'y', values: [null, 5] }] });
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(svg.match(/<rect x=/g)?.length).toBe(3 + 2); // three bars and two legend swatches
    expect(svg).toContain('T &lt;&amp;&gt;');
  });
});

describe('renderReport', () => {
  it('reports the issue targets from the measured rows', () => {
    const row = (context: number, hitRate: number, method: string, ttftMs: number, overheadPct: number) => ({ context, hitRate, G: 64, N: 10, method, ttftMs, predictedTtftMs: ttftMs, gbPerSec: 1, backendReads: 10, firstLayerMs: 1, overheadPct });
    const report = renderReport({
      date: '2026-11-21T00:00:00Z',
      node: 'v20',
      settings: {},
      rows: [row(16384, 0.5, 'Local-LW', 1000, 0), row(16384, 0.5, 'OC-LW', 1050, 5) as never, row(16384, 0.5, 'S3-CW', 2000, 100) as never, row(4096, 0.5, 'OC-LW', 300, 50) as never],
      gateway: { cpuSecondsPerConfig: [{ config: '16K', cpuSeconds: 1.5 }], peakRssBytes: 100 * 1024 * 1024 },
    } as never);
    expect(report).toContain('16K, 50% hit, G=64: 5.0% (target <= 10%: met)');
    expect(report).toContain('4K, 50% hit, G=64: 50.0% (target <= 10%: not met)');
    expect(report).toContain('OC-LW 1050 ms vs S3-CW 2000 ms (ahead)');
    expect(report).toContain('gateway peak RSS: 100 MiB');
  });
});

describe('bench/data/table-a8.json', () => {
  it('names its source and holds the eight table rows', () => {
    const table = JSON.parse(readFileSync(new URL('../bench/data/table-a8.json', import.meta.url), 'utf8')) as { source: string; rows: { msPerLayer: number; totalMs: number }[] };
    expect(table.source).toMatch(/Table A8/);
    expect(table.rows).toHaveLength(8);
    for (const r of table.rows) expect(r.msPerLayer).toBeCloseTo(r.totalMs / 32, 1);
  });
});
