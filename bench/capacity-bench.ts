/**
 * Capacity benchmark: token hit rate of a budgeted bucket under each eviction policy, simulated
 * over one trace of engine requests with shared, growing prefixes (bench/capacity/workload.ts).
 * The prefix-aware policy is the gateway's own ChunkIndex; the others are plain LRU, write age
 * (an S3 lifecycle expiration rule; FIFO alike) and Belady's offline order with the prefix rule
 * (bench/capacity/policies.ts says what each does and why).
 *
 * Budgets are shares of the working set (the bytes of the trace's distinct chunks). The bucket is
 * trimmed from the high watermark down to the low one. Byte counts are Llama-3.1-8B's KV in bf16
 * (128 KiB per token, 32 MiB per 256-token chunk) times --scale (default 1/128: 256 KiB a chunk);
 * hit rates do not depend on the scale, bytes read and written are reported at it.
 *
 *   npm run bench:capacity [-- --scale 1/128 --requests 20000 --seed 1 --budgets 0.1,0.25,0.5]
 *
 * Writes bench/results/capacity-latest.json and bench/results/capacity-hit-rate.svg (--out names
 * another directory).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { makePolicy, POLICY_NAMES, simulate, LruPolicy, type PolicyName, type SimulationResult } from './capacity/policies.js';
import { DEFAULT_WORKLOAD, generateTrace, workingSetBytes, type Trace, type WorkloadParams } from './capacity/workload.js';
import { COLORS, escapeXml, svgHead, yGrid } from './report/svg.js';

const GIB = 1024 ** 3;

/** What each policy is called in the table and the figure. */
const LABELS: Record<PolicyName, string> = {
  'prefix-aware': 'prefix-aware (ChunkIndex)',
  lru: 'plain LRU',
  'write-age': 'write age (lifecycle expiry = FIFO)',
  belady: 'Belady with prefix rule (offline)',
};

interface Row extends SimulationResult {
  readonly budgetShare: number;
  readonly budgetBytes: number;
  readonly seconds: number;
}

/** "1/128" or "0.0078125". */
function parseScale(text: string): number {
  const [num, den] = text.split('/');
  const scale = den === undefined ? Number(num) : Number(num) / Number(den);
  if (!(scale > 0)) throw new Error(`--scale must be a positive number or a fraction like 1/128, not ${text}`);
  return scale;
}

function positive(name: string, text: string | undefined, integer = false): number {
  const value = Number(text);
  if (!(value > 0) || (integer && !Number.isInteger(value))) throw new Error(`--${name} must be a positive ${integer ? 'integer' : 'number'}, not ${text}`);
  return value;
}

/** The repository's bench/results, found from this file (bench/ or dist/bench/), else ./bench/results. */
function defaultOut(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'scripts', 'install-minio.sh'))) return join(dir, 'bench', 'results');
    if (dirname(dir) === dir) return join(process.cwd(), 'bench', 'results');
  }
}

function main(): void {
  const { values } = parseArgs({
    options: {
      scale: { type: 'string', default: '1/128' },
      requests: { type: 'string', default: String(DEFAULT_WORKLOAD.requests) },
      seed: { type: 'string', default: String(DEFAULT_WORKLOAD.seed) },
      budgets: { type: 'string', default: '0.1,0.25,0.5' },
      conversations: { type: 'string', default: String(DEFAULT_WORKLOAD.activeConversations) },
      high: { type: 'string', default: '0.95' },
      low: { type: 'string', default: '0.85' },
      warmup: { type: 'string', default: '0.2' },
      policies: { type: 'string', default: POLICY_NAMES.join(',') },
      engines: { type: 'string', default: '0' },
      'engine-chunks': { type: 'string', default: '0' },
      out: { type: 'string' },
    },
  });
  const params: WorkloadParams = {
    ...DEFAULT_WORKLOAD,
    scale: parseScale(values.scale),
    requests: positive('requests', values.requests, true),
    seed: Number(values.seed),
    activeConversations: positive('conversations', values.conversations, true),
  };
  if (!Number.isInteger(params.seed)) throw new Error(`--seed must be an integer, not ${values.seed}`);
  const budgets = values.budgets.split(',').map((b) => positive('budgets', b));
  const high = positive('high', values.high);
  const low = positive('low', values.low);
  if (low >= high || high > 1) throw new Error(`--low (${low}) must be below --high (${high}), and --high at most 1`);
  const warmup = Number(values.warmup);
  if (!(warmup >= 0 && warmup < 1)) throw new Error(`--warmup must be in [0, 1), not ${values.warmup}`);
  const policies = values.policies.split(',').map((p) => {
    if (!(POLICY_NAMES as readonly string[]).includes(p)) throw new Error(`--policies: unknown policy ${p} (${POLICY_NAMES.join(', ')})`);
    return p as PolicyName;
  });
  const engineCount = Number(values.engines);
  const engineChunks = Number(values['engine-chunks']);
  if (!Number.isInteger(engineCount) || engineCount < 0 || !Number.isInteger(engineChunks) || engineChunks < 0 || (engineCount > 0 && engineChunks === 0)) {
    throw new Error(`--engines and --engine-chunks are whole numbers, --engine-chunks positive when --engines is (got ${values.engines}, ${values['engine-chunks']})`);
  }
  const engines = engineCount === 0 ? undefined : { count: engineCount, chunks: engineChunks };
  const settings = { budgets, high, low, warmup, policies, engines: engines ?? null, workload: params };
  console.log(`node ${process.version}, ${cpus().length} cores; settings ${JSON.stringify(settings)}`);

  let started = performance.now();
  const trace = generateTrace(params);
  const workingSet = workingSetBytes(trace);
  const measureFrom = Math.floor(trace.requests.length * warmup);
  console.log(`\n${describeTrace(trace, workingSet)} (generated in ${((performance.now() - started) / 1000).toFixed(1)} s)`);
  console.log(`bytes at scale ${params.scale} of Llama-3.1-8B bf16 KV: ${trace.chunkBytes / 1024} KiB a chunk (full size ${(trace.chunkBytes / params.scale / 2 ** 20).toFixed(0)} MiB)`);
  console.log(`eviction from ${high} to ${low} of the budget, after each request; the first ${measureFrom} requests (${warmup * 100}%) warm up and are not counted`);
  console.log(engines ? `engine caches: ${engines.count} engines of ${engines.chunks} chunks each in front of the bucket (a conversation sticks to one)\n` : 'no engine caches: every request looks its whole prompt up in the bucket\n');

  started = performance.now();
  const unbounded = simulate(trace, new LruPolicy(trace.chunkBytes), { budgetBytes: Infinity, high, low, measureFrom, engines });
  console.log(`no budget (compulsory misses only): token hit rate ${pct(unbounded.hitRate)}`);
  const rows: Row[] = [];
  for (const share of budgets) {
    const budgetBytes = Math.floor(workingSet * share);
    for (const name of policies) {
      started = performance.now();
      const result = simulate(trace, makePolicy(name, trace), { budgetBytes, high, low, measureFrom, engines });
      const seconds = (performance.now() - started) / 1000;
      rows.push({ ...result, budgetShare: share, budgetBytes, seconds });
      const fromBucket = engines ? `  (bucket ${pct(result.bucketHitTokens / result.prefixTokens)})` : '';
      console.log(`budget ${pct(share, 0)} ${LABELS[name].padEnd(36)} hit ${pct(result.hitRate, 2)}${fromBucket}  dead ${pct(result.deadShare)}  ${result.evictionRounds} rounds  ${seconds.toFixed(1)} s`);
    }
  }

  console.log(`\n${markdownTable(rows, policies)}`);
  const targets = checkTargets(rows, budgets);
  console.log('\nTargets:');
  for (const t of targets) console.log(`- ${t.met ? 'met' : 'NOT met'}: ${t.target} (${t.detail})`);

  const out = values.out ?? defaultOut();
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'capacity-hit-rate.svg'), hitRateSvg(rows, policies, unbounded.hitRate, params));
  const json = {
    benchmark: 'capacity',
    date: new Date().toISOString(),
    node: process.version,
    cores: cpus().length,
    settings,
    trace: { requests: trace.requests.length, chunkTokens: trace.chunkTokens, chunkBytes: trace.chunkBytes, workingSetBytes: workingSet, measuredFrom: measureFrom },
    unbounded: { hitRate: unbounded.hitRate, bytesRead: unbounded.bytesRead, bytesWritten: unbounded.bytesWritten },
    results: rows,
    targets,
  };
  writeFileSync(join(out, 'capacity-latest.json'), `${JSON.stringify(json, null, 2)}\n`);
  console.log(`\nwrote ${join(out, 'capacity-latest.json')} and ${join(out, 'capacity-hit-rate.svg')}`);
}

function pct(value: number, digits = 1): string {
  return `${(value * 100).toFixed(digits)}%`;
}

function describeTrace(trace: Trace, workingSet: number): string {
  const tokens = trace.requests.map((r) => r.tokens).sort((a, b) => a - b);
  const at = (q: number): number => tokens[Math.min(tokens.length - 1, Math.floor(q * tokens.length))] ?? 0;
  const conversations = new Set(trace.requests.map((r) => r.conversation)).size;
  const accesses = trace.requests.reduce((sum, r) => sum + r.keys.length, 0);
  const chunks = workingSet / trace.chunkBytes;
  return [
    `trace: ${trace.requests.length} requests of ${conversations} conversations (${(trace.requests.length / conversations).toFixed(1)} turns each)`,
    `prompt tokens p5 ${at(0.05)}, median ${at(0.5)}, p95 ${at(0.95)}, max ${at(1)}`,
    `${accesses} chunk lookups, ${chunks} distinct chunks; working set ${(workingSet / GIB).toFixed(2)} GiB at scale (${((workingSet / trace.params.scale) / 2 ** 40).toFixed(2)} TiB full size)`,
  ].join('\n');
}

function markdownTable(rows: readonly Row[], policies: readonly PolicyName[]): string {
  const lines = ['| policy | budget | token hit rate | GiB read | GiB written | dead share of budget |', '| --- | ---: | ---: | ---: | ---: | ---: |'];
  const budgets = [...new Set(rows.map((r) => r.budgetShare))];
  for (const share of budgets) {
    for (const name of policies) {
      const row = rows.find((r) => r.budgetShare === share && r.policy === name);
      if (!row) continue;
      lines.push(`| ${LABELS[name]} | ${pct(share, 0)} (${(row.budgetBytes / GIB).toFixed(2)} GiB) | ${pct(row.hitRate, 2)} | ${(row.bytesRead / GIB).toFixed(2)} | ${(row.bytesWritten / GIB).toFixed(2)} | ${pct(row.deadShare)} |`);
    }
  }
  return lines.join('\n');
}

interface TargetCheck {
  readonly target: string;
  readonly met: boolean;
  readonly detail: string;
}

/** "Far ahead" is read as at least 10 points of token hit rate. */
function checkTargets(rows: readonly Row[], budgets: readonly number[]): TargetCheck[] {
  const rate = (policy: PolicyName, share: number): number | undefined => rows.find((r) => r.policy === policy && r.budgetShare === share)?.hitRate;
  const checks: TargetCheck[] = [];
  const compare = (target: string, other: PolicyName, margin: number): void => {
    const pairs = budgets.map((b) => [b, rate('prefix-aware', b), rate(other, b)] as const).filter((p): p is readonly [number, number, number] => p[1] !== undefined && p[2] !== undefined);
    if (pairs.length === 0) return;
    const met = pairs.every(([, pa, o]) => pa - o > margin);
    checks.push({ target, met, detail: pairs.map(([b, pa, o]) => `${pct(b, 0)}: ${pct(pa, 2)} vs ${pct(o, 2)}, ${((pa - o) * 100).toFixed(2)} points`).join('; ') });
  };
  compare('prefix-aware ahead of plain LRU at every budget', 'lru', 0);
  compare('prefix-aware far ahead (>= 10 points) of write-age expiry at every budget', 'write-age', 0.1 - 1e-12);
  const pa = rate('prefix-aware', 0.5);
  const opt = rate('belady', 0.5);
  if (pa !== undefined && opt !== undefined) checks.push({ target: "prefix-aware within 10% of the offline reference's hit rate at 50%", met: pa >= 0.9 * opt, detail: `${pct(pa)} vs ${pct(opt)}: ${pct(pa / opt)} of it` });
  return checks;
}

/** Token hit rate against budget: one line per policy, the no-budget ceiling dashed. */
function hitRateSvg(rows: readonly Row[], policies: readonly PolicyName[], ceiling: number, params: WorkloadParams): string {
  const width = 800;
  const height = 420;
  const left = 64;
  const right = 290; // the legend
  const top = 44;
  const bottom = 56;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const budgets = [...new Set(rows.map((r) => r.budgetShare))].sort((a, b) => a - b);
  const xMax = Math.max(...budgets, 0.1);
  const x = (v: number): number => left + (v / xMax) * plotW;
  const y = (v: number): number => top + (1 - v) * plotH;
  const out = svgHead(width, height, `Token hit rate against budget (${params.requests} requests, seed ${params.seed})`);
  out.push(...yGrid({ left, right: left + plotW, top, plotH, yMin: 0, yMax: 1, step: 0.2, y, label: 'token hit rate' }));
  out.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}" stroke="#333"/>`);
  for (const b of budgets) {
    out.push(`<line x1="${x(b)}" x2="${x(b)}" y1="${top + plotH}" y2="${top + plotH + 4}" stroke="#333"/>`);
    out.push(`<text x="${x(b)}" y="${top + plotH + 16}" text-anchor="middle">${Math.round(b * 100)}%</text>`);
  }
  out.push(`<text x="${left + plotW / 2}" y="${top + plotH + 36}" text-anchor="middle">budget, share of the working set</text>`);
  out.push(`<line x1="${left}" x2="${left + plotW}" y1="${y(ceiling).toFixed(1)}" y2="${y(ceiling).toFixed(1)}" stroke="#888" stroke-dasharray="5 4"/>`);
  const legendX = left + plotW + 20;
  out.push(`<line x1="${legendX}" x2="${legendX + 18}" y1="${top + 6}" y2="${top + 6}" stroke="#888" stroke-dasharray="5 4"/>`);
  out.push(`<text x="${legendX + 24}" y="${top + 10}">no budget (${pct(ceiling)})</text>`);
  policies.forEach((name, s) => {
    const color = COLORS[s % COLORS.length] as string;
    const points = budgets.flatMap((b) => {
      const row = rows.find((r) => r.policy === name && r.budgetShare === b);
      return row ? [[x(b), y(row.hitRate), row.hitRate, b] as const] : [];
    });
    out.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${points.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' ')}"/>`);
    for (const [px, py, rate, b] of points) out.push(`<circle cx="${px.toFixed(1)}" cy="${py.toFixed(1)}" r="3" fill="${color}"><title>${escapeXml(`${LABELS[name]}: ${pct(rate)} at ${pct(b, 0)}`)}</title></circle>`);
    const ly = top + 28 + s * 20;
    out.push(`<line x1="${legendX}" x2="${legendX + 18}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color}" stroke-width="2"/>`);
    out.push(`<text x="${legendX + 24}" y="${ly}">${escapeXml(LABELS[name])}</text>`);
  });
  out.push(`<text x="${legendX}" y="${top + 40 + policies.length * 20}" fill="#555">chunk ${params.chunkTokens} tokens; bytes x ${params.scale}</text>`);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

main();
