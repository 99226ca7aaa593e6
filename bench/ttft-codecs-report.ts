/**
 * The report of the compressed-KV TTFT benchmark (client/python/benchmarks/ttft_codecs.py): reads
 * its JSON and writes a Markdown report and two figures beside it (OC-LW's TTFT over the
 * KV-in-memory floor against link rate: SmolLM2 with real compute, and table A8's workload).
 *
 *   node dist/bench/ttft-codecs-report.js [bench/results/ttft-codecs-latest.json]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { lineSvg } from './report/line-svg.js';

interface Method {
  readonly ttftS: number;
  readonly overheadS?: number;
  readonly overheadPct?: number;
  readonly hookWaitsS?: number;
  readonly sameNextToken?: boolean;
}

interface RealRow {
  readonly capMBps: number;
  readonly kvInMemoryS: number;
  readonly methods: Record<string, Method>;
}

interface A8Link {
  readonly linkGbps: number;
  readonly scale: number;
  readonly computeMsPerLayerScaled: number;
  readonly localLwS: number;
  readonly methods: Record<string, Method>;
}

export interface CodecReport {
  readonly date: string;
  readonly args: { readonly reps: number; readonly codecs: string };
  readonly real: {
    readonly model: string;
    readonly cachedTokens: number;
    readonly suffixTokens: number;
    readonly rawBytes: number;
    readonly storedBytes: Record<string, number>;
    readonly decode: Record<string, { readonly clientCpuSecondsPerGiB: number; readonly fetchGBps: number }>;
    readonly rows: readonly RealRow[];
  };
  readonly a8: {
    readonly capMBps: number;
    readonly rows: readonly {
      readonly context: number;
      readonly hitRate: number;
      readonly msPerLayer: number;
      readonly rawBytes: number;
      readonly storedBytes: Record<string, number>;
      readonly links: readonly A8Link[];
    }[];
  };
}

const f2 = (v: number): string => v.toFixed(2);
const pct = (v: number): string => `${v >= 0 ? '+' : ''}${v.toFixed(1)}%`;
const capLabel = (cap: number): string => (cap === 0 ? 'none' : `${cap} MB/s`);

/**
 * The link rate (bytes/s) above which a codec stops paying on one decoding core: where decoding
 * a byte costs more time than the wire time it saves, (1 - 1/ratio) / R = cpuPerByte.
 */
export function breakEvenBytesPerSec(ratio: number, cpuSecondsPerGiB: number): number {
  return (1 - 1 / ratio) / (cpuSecondsPerGiB / 1024 ** 3);
}

export function markdown(report: CodecReport): string {
  const codecs = report.args.codecs.split(',');
  const { real } = report;
  const raw = real.rawBytes;
  const lines: string[] = [];
  lines.push(`Compressed-KV TTFT, ${report.date} (median of ${report.args.reps}; ${real.model}, ${real.cachedTokens} cached tokens in bf16, ${real.suffixTokens}-token suffix).`);
  lines.push('');
  lines.push(
    '| codec | stored, smaller than bf16 | client CPU-s per GiB of KV (fetch and decode) | full-speed fetch GB/s | link rate above which it stops paying, one decoding core |',
  );
  lines.push('|---|---|---|---|---|');
  const noneCpu = real.decode['none']?.clientCpuSecondsPerGiB ?? 0;
  for (const codec of codecs) {
    const ratio = raw / (real.storedBytes[codec] as number);
    const d = real.decode[codec] as { clientCpuSecondsPerGiB: number; fetchGBps: number };
    const extra = d.clientCpuSecondsPerGiB - noneCpu;
    const stop = codec === 'none' ? '—' : `${f2((breakEvenBytesPerSec(ratio, Math.max(extra, 1e-6)) * 8) / 1e9)} Gbps`;
    lines.push(`| \`${codec}\` | ${f2(ratio)}x | ${f2(d.clientCpuSecondsPerGiB)} | ${f2(d.fetchGBps)} | ${stop} |`);
  }
  lines.push('');
  lines.push('Real compute (TTFT in seconds, and over the KV in memory); "transfer / compute" is the raw prefix\'s time on the link over the suffix\'s compute:');
  lines.push('');
  lines.push(`| link | transfer / compute | KV in memory | ${codecs.map((c) => `\`${c}\``).join(' | ')} | raw overhead / int8 overhead |`);
  lines.push(`|---|---|---|${codecs.map(() => '---').join('|')}|---|`);
  for (const row of real.rows) {
    const ratio = row.capMBps === 0 ? '—' : f2(raw / (row.capMBps * 1e6) / row.kvInMemoryS);
    const cells = codecs.map((c) => {
      const m = row.methods[c] as Method;
      return `${f2(m.ttftS)} (${(m.overheadS as number) >= 0 ? '+' : ''}${f2(m.overheadS as number)})${m.sameNextToken === false ? ' *' : ''}`;
    });
    const rawOver = row.methods['none']?.overheadS;
    const int8Over = row.methods['int8-kivi']?.overheadS;
    // The cut means something only where the raw transfer exceeds the compute; elsewhere all are level.
    const transferBound = row.capMBps > 0 && raw / (row.capMBps * 1e6) > row.kvInMemoryS;
    const cut = !transferBound ? 'level' : rawOver !== undefined && int8Over !== undefined && int8Over > 0.005 ? `${f2(rawOver / int8Over)}x` : '—';
    lines.push(`| ${capLabel(row.capMBps)} | ${ratio} | ${f2(row.kvInMemoryS)} | ${cells.join(' | ')} | ${cut} |`);
  }
  lines.push('');
  lines.push('(* the first generated token differed from exact reuse.)');
  lines.push('');
  lines.push(`Table A8 (Llama-3.1-8B geometry, synthetic KV; one gateway capped at ${report.a8.capMBps} MB/s, compute scaled to the emulated link): OC-LW over Local-LW:`);
  lines.push('');
  lines.push(`| context, hit | link | compute/layer (scaled) | ${codecs.map((c) => `\`${c}\``).join(' | ')} |`);
  lines.push(`|---|---|---|${codecs.map(() => '---').join('|')}|`);
  for (const row of report.a8.rows) {
    const ratios = codecs.map((c) => `${c} ${f2(row.rawBytes / (row.storedBytes[c] as number))}x`).join(', ');
    for (const link of row.links) {
      lines.push(
        `| ${row.context / 1024}K ${row.hitRate * 100}% | ${link.linkGbps} Gbps | ${row.msPerLayer} ms (${f2(link.computeMsPerLayerScaled)} ms) | ${codecs.map((c) => pct((link.methods[c] as Method).overheadPct as number)).join(' | ')} |`,
      );
    }
    lines.push(`| | stored: ${ratios} | | ${codecs.map(() => '').join(' | ')} |`);
  }
  return `${lines.join('\n')}\n`;
}

export function figures(report: CodecReport): { real: string; a8: string } {
  const codecs = report.args.codecs.split(',');
  const capped = report.real.rows.filter((r) => r.capMBps > 0);
  const real = lineSvg({
    title: `${report.real.model}: OC-LW TTFT over KV in memory, by link rate`,
    xLabel: 'link rate (gateway --cap), MB/s',
    yLabel: 'seconds over KV in memory',
    xTicks: capped.map((r) => [r.capMBps, String(r.capMBps)] as const),
    series: codecs.map((c) => ({ name: c === 'none' ? 'raw' : c, points: capped.map((r) => [r.capMBps, (r.methods[c] as Method).overheadS as number] as const) })),
  });
  const row = report.a8.rows.at(-1);
  const a8 = lineSvg({
    title: row ? `Table A8, ${row.context / 1024}K ${row.hitRate * 100}% hit: OC-LW over Local-LW, by emulated link` : 'Table A8',
    xLabel: 'emulated link, Gbps',
    yLabel: '% over Local-LW',
    xTicks: (row?.links ?? []).map((l) => [l.linkGbps, String(l.linkGbps)] as const),
    series: codecs.map((c) => ({ name: c === 'none' ? 'raw' : c, points: (row?.links ?? []).map((l) => [l.linkGbps, (l.methods[c] as Method).overheadPct as number] as const) })),
  });
  return { real, a8 };
}

if (process.argv[1]?.endsWith('ttft-codecs-report.js')) {
  const path = process.argv[2] ?? 'bench/results/ttft-codecs-latest.json';
  const report = JSON.parse(readFileSync(path, 'utf8')) as CodecReport;
  const dir = dirname(path);
  writeFileSync(join(dir, 'ttft-codecs-report.md'), markdown(report));
  const { real, a8 } = figures(report);
  writeFileSync(join(dir, 'ttft-codecs.svg'), real);
  writeFileSync(join(dir, 'ttft-codecs-a8.svg'), a8);
  process.stdout.write(markdown(report));
}
