/**
 * The report of the real-model TTFT benchmark (client/python/benchmarks/ttft_engine.py): reads
 * its JSON and writes a Markdown table and two figures (TTFT per method, and each fetching
 * method's TTFT over the KV-in-memory floor) beside it.
 *
 *   node dist/bench/ttft-engine-report.js [bench/results/ttft-engine-latest.json]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { groupedBarSvg } from './report/svg.js';

interface Row {
  readonly promptTokens: number;
  readonly hit: number;
  readonly cachedTokens: number;
  readonly suffixTokens: number;
  readonly prefixBytes: number;
  readonly ttftSeconds: Record<string, number>;
  readonly layerwiseHookWaitSeconds: number;
  readonly layerwiseFetchOnlySeconds: number;
}

interface Report {
  readonly date: string;
  readonly model: string;
  readonly reps: number;
  readonly methods: readonly string[];
  readonly machine: { readonly placement: string; readonly torch: string };
  readonly results: readonly Row[];
}

const FETCHING = ['s3-chunk-gets', 'oc-layerwise', 'lmcache-plugin', 'lmcache-s3'];

function label(row: Row): string {
  return `${row.promptTokens / 1024}K ${Math.round(row.hit * 1000) / 10}%`;
}

export function markdown(report: Report): string {
  const lines = [
    `Real-model TTFT, ${report.date} (${report.model}; ${report.machine.placement}; median of ${report.reps}).`,
    '',
    `| prompt | hit | cached / suffix tokens | prefix KV | ${report.methods.join(' | ')} | OC-LW over in-memory | hook waits | fetch alone |`,
    `|---|---|---|---|${report.methods.map(() => '---').join('|')}|---|---|---|`,
  ];
  for (const row of report.results) {
    const t = row.ttftSeconds;
    const floor = t['kv-in-memory'] ?? NaN;
    const over = ((t['oc-layerwise'] ?? NaN) / floor - 1) * 100;
    lines.push(
      `| ${row.promptTokens} | ${row.hit * 100}% | ${row.cachedTokens} / ${row.suffixTokens} | ${(row.prefixBytes / 2 ** 20).toFixed(0)} MiB | ` +
        report.methods.map((m) => `${(t[m] ?? NaN).toFixed(3)} s`).join(' | ') +
        ` | ${over >= 0 ? '+' : ''}${over.toFixed(1)}% | ${row.layerwiseHookWaitSeconds.toFixed(3)} s | ${row.layerwiseFetchOnlySeconds.toFixed(3)} s |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

function main(): void {
  const path = process.argv[2] ?? 'bench/results/ttft-engine-latest.json';
  const report = JSON.parse(readFileSync(path, 'utf8')) as Report;
  const dir = dirname(path);
  const groups = report.results.map(label);
  writeFileSync(join(dir, 'ttft-engine-report.md'), markdown(report));
  writeFileSync(
    join(dir, 'ttft-engine.svg'),
    groupedBarSvg({
      title: 'Real-model TTFT (SmolLM2-135M, 1 core): seconds to the first token',
      yLabel: 'TTFT (s)',
      groups,
      series: report.methods.map((name) => ({ name, values: report.results.map((r) => r.ttftSeconds[name] ?? null) })),
    }),
  );
  writeFileSync(
    join(dir, 'ttft-engine-overhead.svg'),
    groupedBarSvg({
      title: 'TTFT over the KV already in memory (%)',
      yLabel: 'added TTFT (%)',
      groups,
      series: FETCHING.map((name) => ({ name, values: report.results.map((r) => ((r.ttftSeconds[name] ?? NaN) / (r.ttftSeconds['kv-in-memory'] ?? NaN) - 1) * 100) })),
    }),
  );
  process.stdout.write(markdown(report));
}

main();
