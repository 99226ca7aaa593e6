/**
 * The benchmark's report pieces, which users read: the Markdown report states the targets from
 * the numbers it was given, the SVG figures are well-formed and carry every bar, and the TTFT
 * data file names its source.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { XMLValidator } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { groupedBarSvg } from '../bench/report/svg.js';
import { choosePlacement, onCpus } from '../bench/placement.js';
import { timelineSvg } from '../bench/report/timeline-svg.js';
import { parseBenchArgs, renderReport } from '../bench/ttft-matrix.js';

describe('groupedBarSvg', () => {
  it('draws one bar per value, skips missing ones, and is valid XML', () => {
    const svg = groupedBarSvg({
      title: 'T <&>',
      yLabel: 'ms',
      groups: ['a', 'b'],
      series: [
        { name: 'x', values: [1, -2] },
        { name: 'y', values: [null, 5] },
      ],
    });
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(svg.match(/<rect x=/g)?.length).toBe(3 + 2); // three bars and two legend swatches
    expect(svg).toContain('T &lt;&amp;&gt;');
  });
});

describe('renderReport', () => {
  const row = (context: number, hitRate: number, method: string, ttftMs: number, overheadPct: number, linkScale = 10, gbPerSec = 1) => ({
    context,
    hitRate,
    G: 64,
    N: 128,
    method,
    linkScale,
    msPerLayer: 29.87 * linkScale,
    ttftMs,
    predictedTtftMs: ttftMs,
    gbPerSec,
    backendReads: 10,
    firstLayerMs: 1,
    overheadPct,
    cpu: { client: 1, gateway: 2, minio: 3 },
  });
  const result = (rows: unknown[]) =>
    ({
      date: '2026-11-21T00:00:00Z',
      node: 'v20',
      settings: {},
      placement: { mode: 'pinned', gatewayCpus: '1', othersCpus: '0', description: 'pinned: gateway on CPU 1; MinIO and the load generator on CPU 0' },
      link: { bytesPerSec: 1.25e9, scale: 10, measured: true },
      rows,
      gateway: { cpuSecondsPerConfig: [{ config: '16K', cpuSeconds: 1.5 }], peakRssBytes: 100 * 1024 * 1024 },
    }) as never;

  it('reports the link scale, the placement, both tables and the targets from the measured rows', () => {
    const report = renderReport(
      result([
        row(16384, 0.5, 'Local-LW', 1000, 0),
        row(16384, 0.5, 'OC-LW', 1050, 5),
        row(16384, 0.5, 'S3-CW', 2000, 100),
        row(16384, 0.5, 'S3-LW', 1500, 50),
        row(16384, 0.5, 'Local-LW', 100, 0, 1),
        row(16384, 0.5, 'OC-LW', 500, 400, 1),
      ]),
    );
    expect(report).toContain('pinned: gateway on CPU 1');
    expect(report).toContain('reached 1.250 GB/s here');
    expect(report).toContain('K = 10.');
    expect(report).toContain('16K 50% 29.87 -> 298.7 ms');
    expect(report).toContain("## Compute x10: the paper's link-to-compute ratio");
    expect(report).toContain("## Table A8's compute as it is (K = 1)");
    expect(report).toContain('| 1.00 / 2.00 / 3.00 |');
    expect(report).toContain('16K, 50% hit, G=64: 5.0% (target <= 10%: met)');
    expect(report).toContain('OC-LW 1050 ms vs S3-CW 2000 ms and S3-LW 1500 ms (ahead of both)');
    expect(report).toContain("With table A8's compute as it is (K = 1), OC-LW is within 10% of Local-LW in 0 of 1");
    expect(report).toContain('gateway peak RSS: 100 MiB');
  });

  it('says why OC-LW is behind: the rate that hides transfer against the rate delivered', () => {
    // 128 chunks x 256 KiB per layer in 298.7 ms needs 0.11 GB/s; 0.05 delivered.
    const report = renderReport(
      result([row(16384, 0.5, 'Local-LW', 1000, 0), row(16384, 0.5, 'OC-LW', 3000, 200, 10, 0.05), row(16384, 0.5, 'S3-CW', 2000, 100), row(16384, 0.5, 'S3-LW', 2500, 150)]),
    );
    expect(report).toContain('(target <= 10%: not met)');
    expect(report).toContain('not ahead of both; OC-LW delivered 0.05 GB/s where hiding transfer behind this compute needs 0.11 GB/s');
    expect(report).toContain("Needs a faster link (or gateway) than this machine's: 16K 50% G64");
  });
});

describe('parseBenchArgs', () => {
  it('defaults to the pinned placement and a measured link scale', () => {
    expect(parseBenchArgs([])).toEqual({ quick: false, include64k: false, reps: 1, granularities: [16, 64, 256], placement: 'pinned', linkScale: 'auto', segments: false });
    expect(parseBenchArgs(['--segments'])).toMatchObject({ segments: true });
    expect(parseBenchArgs(['--link-scale', '12.5', '--placement', 'shared', '--reps', '2'])).toMatchObject({ linkScale: 12.5, placement: 'shared', reps: 2 });
  });

  it('rejects bad options with the usage error code', () => {
    for (const args of [['--link-scale', '0.5'], ['--link-scale', 'fast'], ['--placement', 'numa'], ['--reps', '0'], ['--granularities', '64,x'], ['--bogus']]) {
      expect(() => parseBenchArgs(args), args.join(' ')).toThrow(expect.objectContaining({ code: 'OC_ERR_CLIENT_USAGE' }));
    }
  });
});

describe('timelineSvg', () => {
  it('draws a ready dot and a compute bar per layer per panel, and is valid XML', () => {
    const panel = (name: string) => ({ name, readyMs: [10, 20, 30], computeStartMs: [10, 25, 35], computeMs: 5 });
    const svg = timelineSvg({ title: 'timeline <1>', panels: [panel('S3-CW'), panel('OC-LW')] });
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(svg.match(/<circle /g)?.length).toBe(2 * 3 + 1); // plus the legend's dot
    expect(svg.match(/<rect x=/g)?.length).toBe(2 * 3 + 1); // plus the legend's swatch
    expect(svg).toContain('TTFT 40 ms');
    expect(svg).toContain('timeline &lt;1&gt;');
  });
});

describe('placement', () => {
  it('pins the gateway (or, store apart, MinIO) to the last core and the others to the rest, where it can', () => {
    expect(choosePlacement('shared').mode).toBe('shared');
    const pinned = choosePlacement('pinned');
    if (process.platform === 'linux' && cpus().length >= 2) {
      const last = String(cpus().length - 1);
      expect(pinned).toMatchObject({ mode: 'pinned', gatewayCpus: last });
      expect(pinned.storeCpus).toBe(pinned.othersCpus);
      // store-apart: MinIO alone on the last core, the gateway beside the load generator.
      const apart = choosePlacement('store-apart');
      expect(apart).toMatchObject({ mode: 'store-apart', storeCpus: last, gatewayCpus: pinned.othersCpus, othersCpus: pinned.othersCpus });
    } else {
      expect(pinned.mode).toBe('shared');
      expect(pinned.description).toMatch(/pinning asked for/);
    }
  });

  it('runs a command on the CPUs it names', () => {
    expect(onCpus(undefined, 'node', ['x'])).toEqual(['node', ['x']]);
    if (choosePlacement('pinned').mode !== 'pinned') return;
    const [command, args] = onCpus('0', 'cat', ['/proc/self/status']);
    const status = execFileSync(command, args, { encoding: 'utf8' });
    expect(/Cpus_allowed_list:\s*(\S+)/.exec(status)?.[1]).toBe('0');
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

describe('the compressed-KV TTFT report', () => {
  it('puts the break-even link rate where decoding costs what the smaller transfer saves', async () => {
    const { breakEvenBytesPerSec } = await import('../bench/ttft-codecs-report.js');
    // Half the bytes, 1 CPU-s per GiB: saving 0.5 byte-times of the wire per byte pays until 0.5 GiB/s.
    expect(breakEvenBytesPerSec(2, 1)).toBeCloseTo(0.5 * 1024 ** 3, 0);
    expect(breakEvenBytesPerSec(1, 1)).toBe(0);
  });

  it('renders the committed run as tables and two well-formed figures', async () => {
    const { figures, markdown } = await import('../bench/ttft-codecs-report.js');
    const report = JSON.parse(readFileSync(new URL('../bench/results/ttft-codecs-latest.json', import.meta.url), 'utf8')) as Parameters<typeof markdown>[0];
    const text = markdown(report);
    expect(text).toContain('| `int8-kivi` |');
    expect(text.split('\n').filter((l) => l.includes(' MB/s |')).length).toBe(report.real.rows.filter((r) => r.capMBps > 0).length);
    const { real, a8 } = figures(report);
    for (const svg of [real, a8]) expect(XMLValidator.validate(svg)).toBe(true);
    expect(real.match(/<polyline/g)?.length).toBe(4);
  });
});
