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
 * Then (unless --no-replay) a smaller trace from the same generator and seed (--replay-requests,
 * --replay-scale, and as many conversations in progress per request as the big trace) is
 * simulated under every policy and replayed through a real gateway at each budget
 * (bench/capacity/replay.ts): the same ChunkIndex, trimmed by the gateway itself rather than
 * after every request. A replay takes a minute or two here. The gateway's embedded store lives in
 * --replay-dir, /dev/shm where there is one: the replay measures eviction, not the disk, and a
 * tmpfs makes each PUT's fsyncs free. --replay-put-concurrency (default 1) stores a request's
 * missing chunks that many at a time rather than one after the other.
 *
 *   npm run bench:capacity [-- --scale 1/128 --requests 20000 --seed 1 --budgets 0.1,0.25,0.5]
 *   [-- --replay-requests 3000 --replay-scale 1/512 --replay-dir DIR --replay-put-concurrency 1] [-- --no-replay]
 *
 * Writes bench/results/capacity-latest.json and bench/results/capacity-hit-rate.svg (--out names
 * another directory).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { makePolicy, POLICY_NAMES, simulate, LruPolicy, type PolicyName, type SimulationOptions, type SimulationResult } from './capacity/policies.js';
import { replayThroughGateway, wholePercent, type ReplayResult } from './capacity/replay.js';
import { DEFAULT_WORKLOAD, generateTrace, workingSetBytes, type Trace, type WorkloadParams } from './capacity/workload.js';
import { COLORS, escapeXml, svgHead, yGrid } from './report/svg.js';

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

/** What each policy is called in the table and the figure. */
const LABELS: Record<PolicyName, string> = {
  'prefix-aware': 'prefix-aware (ChunkIndex)',
  lru: 'plain LRU',
  'write-age': 'write age (lifecycle expiry = FIFO)',
  belady: 'Belady with prefix rule (offline)',
};
const GATEWAY_LABEL = 'prefix-aware, through the gateway';

interface Row extends SimulationResult {
  readonly budgetShare: number;
  readonly budgetBytes: number;
  readonly seconds: number;
}

interface ReplayRow extends ReplayResult {
  readonly policy: 'prefix-aware (gateway)';
  readonly budgetShare: number;
  readonly budgetBytes: number;
}

/** The smaller trace replayed through the gateway, simulated too so that like is compared with like. */
interface ReplayReport {
  readonly params: WorkloadParams;
  readonly trace: Trace;
  readonly workingSet: number;
  readonly measureFrom: number;
  readonly unbounded: SimulationResult;
  readonly simulated: Row[];
  readonly gateway: ReplayRow[];
}

/** "1/128" or "0.0078125". */
function parseScale(name: string, text: string): number {
  const [num, den] = text.split('/');
  const scale = den === undefined ? Number(num) : Number(num) / Number(den);
  if (!(scale > 0)) throw new Error(`--${name} must be a positive number or a fraction like 1/128, not ${text}`);
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

async function main(): Promise<void> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const { values } = parseArgs({
    allowNegative: true,
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
      replay: { type: 'boolean', default: true },
      'replay-requests': { type: 'string', default: '3000' },
      'replay-scale': { type: 'string', default: '1/512' },
      'replay-conversations': { type: 'string' },
      'replay-put-concurrency': { type: 'string', default: '1' },
      'replay-dir': { type: 'string', default: existsSync('/dev/shm') ? '/dev/shm' : tmpdir() },
      out: { type: 'string' },
    },
  });
  const params: WorkloadParams = {
    ...DEFAULT_WORKLOAD,
    scale: parseScale('scale', values.scale),
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
  if (engines && values.replay) throw new Error('--engines is simulated only (the replay is one engine without a cache of its own): add --no-replay');
  if (values.replay && (wholePercent(high) === undefined || wholePercent(low) === undefined)) throw new Error(`--high (${high}) and --low (${low}) must be whole percents (hundredths) to replay: the gateway takes percents; or add --no-replay`);
  const replayRequests = positive('replay-requests', values['replay-requests'], true);
  const replay = values.replay
    ? {
        requests: replayRequests,
        scale: parseScale('replay-scale', values['replay-scale']),
        // As many conversations in progress per request as the big trace: the same turns per
        // conversation and the same gap between turns, in requests, relative to the trace.
        conversations: values['replay-conversations'] === undefined ? Math.max(1, Math.round((params.activeConversations * replayRequests) / params.requests)) : positive('replay-conversations', values['replay-conversations'], true),
        putConcurrency: positive('replay-put-concurrency', values['replay-put-concurrency'], true),
        dir: values['replay-dir'],
      }
    : undefined;
  const settings = { budgets, high, low, warmup, policies, engines: engines ?? null, workload: params, replay: replay ?? null };
  console.log(`node ${process.version}, ${cpus().length} cores; settings ${JSON.stringify(settings)}`);

  const started = performance.now();
  const trace = generateTrace(params);
  const workingSet = workingSetBytes(trace);
  const measureFrom = Math.floor(trace.requests.length * warmup);
  console.log(`\n${describeTrace(trace, workingSet)} (generated in ${((performance.now() - started) / 1000).toFixed(1)} s)`);
  console.log(`eviction from ${high} to ${low} of the budget, after each request; the first ${measureFrom} requests (${warmup * 100}%) warm up and are not counted`);
  console.log(engines ? `engine caches: ${engines.count} engines of ${engines.chunks} chunks each in front of the bucket (a conversation sticks to one)\n` : 'no engine caches: every request looks its whole prompt up in the bucket\n');
  const { unbounded, rows } = simulateBudgets(trace, workingSet, budgets, policies, { high, low, measureFrom, engines });

  let replayed: ReplayReport | undefined;
  if (replay) {
    const replayParams: WorkloadParams = { ...params, requests: replay.requests, scale: replay.scale, activeConversations: replay.conversations };
    const replayTrace = generateTrace(replayParams);
    const replayWorkingSet = workingSetBytes(replayTrace);
    const replayFrom = Math.floor(replayTrace.requests.length * warmup);
    console.log(`\nReplay trace (same generator and seed, ${replay.conversations} conversations in progress), simulated, then through the gateway:\n${describeTrace(replayTrace, replayWorkingSet)}`);
    console.log(`the first ${replayFrom} requests warm up; the gateway trims on its own (every 250 ms, --evict-rate 5000), on its embedded store in ${replay.dir}; ${replay.putConcurrency} PUT(s) at a time\n`);
    const simulated = simulateBudgets(replayTrace, replayWorkingSet, budgets, policies, { high, low, measureFrom: replayFrom });
    const gateway: ReplayRow[] = [];
    for (const share of budgets) {
      const budgetBytes = Math.floor(replayWorkingSet * share);
      const progressEvery = Math.max(1, Math.round(replayTrace.requests.length / 4));
      const result = await replayThroughGateway(replayTrace, budgetBytes, {
        measureFrom: replayFrom,
        high,
        low,
        putConcurrency: replay.putConcurrency,
        storeDir: replay.dir,
        progressEvery,
        onProgress: (done, seconds) => console.log(`  budget ${pct(share, 0)} through the gateway: ${done} requests in ${seconds.toFixed(0)} s`),
      });
      const row: ReplayRow = { ...result, policy: 'prefix-aware (gateway)', budgetShare: share, budgetBytes };
      gateway.push(row);
      console.log(describeReplay(row, simulated.rows.find((r) => r.policy === 'prefix-aware' && r.budgetShare === share)));
    }
    replayed = { params: replayParams, trace: replayTrace, workingSet: replayWorkingSet, measureFrom: replayFrom, unbounded: simulated.unbounded, simulated: simulated.rows, gateway };
  }

  console.log(`\nSimulated, ${trace.requests.length}-request trace (chunks of ${trace.chunkBytes / 1024} KiB):\n${markdownTable(tableLines(rows, [], policies))}`);
  if (replayed) console.log(`\nReplay trace, ${replayed.trace.requests.length} requests (chunks of ${replayed.trace.chunkBytes / 1024} KiB), simulated and through the gateway:\n${markdownTable(tableLines(replayed.simulated, replayed.gateway, policies))}`);
  const targets = checkTargets(rows, budgets);
  console.log('\nTargets:');
  for (const t of targets) console.log(`- ${t.met ? 'met' : 'NOT met'}: ${t.target} (${t.detail})`);

  const out = values.out ?? defaultOut();
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'capacity-hit-rate.svg'), hitRateSvg(rows, policies, unbounded.hitRate, params, replayed));
  const json = {
    benchmark: 'capacity',
    date: new Date().toISOString(),
    node: process.version,
    cores: cpus().length,
    settings,
    trace: traceFacts(trace, workingSet, measureFrom),
    unbounded: { hitRate: unbounded.hitRate, bytesRead: unbounded.bytesRead, bytesWritten: unbounded.bytesWritten },
    results: rows,
    targets,
    replay: replayed
      ? {
          trace: traceFacts(replayed.trace, replayed.workingSet, replayed.measureFrom),
          unbounded: { hitRate: replayed.unbounded.hitRate, bytesRead: replayed.unbounded.bytesRead, bytesWritten: replayed.unbounded.bytesWritten },
          simulated: replayed.simulated,
          gateway: replayed.gateway,
        }
      : null,
  };
  writeFileSync(join(out, 'capacity-latest.json'), `${JSON.stringify(json, null, 2)}\n`);
  console.log(`\nwrote ${join(out, 'capacity-latest.json')} and ${join(out, 'capacity-hit-rate.svg')}`);
}

/** The no-budget ceiling, then every policy at every budget, printed as it goes. */
function simulateBudgets(trace: Trace, workingSet: number, budgets: readonly number[], policies: readonly PolicyName[], options: Omit<SimulationOptions, 'budgetBytes'>): { unbounded: SimulationResult; rows: Row[] } {
  console.log(`bytes at scale ${trace.params.scale} of Llama-3.1-8B bf16 KV: ${trace.chunkBytes / 1024} KiB a chunk (full size ${(trace.chunkBytes / trace.params.scale / MIB).toFixed(0)} MiB)`);
  const unbounded = simulate(trace, new LruPolicy(trace.chunkBytes), { ...options, budgetBytes: Infinity });
  console.log(`no budget (compulsory misses only): token hit rate ${pct(unbounded.hitRate)}`);
  const rows: Row[] = [];
  for (const share of budgets) {
    const budgetBytes = Math.floor(workingSet * share);
    for (const name of policies) {
      const started = performance.now();
      const result = simulate(trace, makePolicy(name, trace), { ...options, budgetBytes });
      const seconds = (performance.now() - started) / 1000;
      rows.push({ ...result, budgetShare: share, budgetBytes, seconds });
      const fromBucket = options.engines ? `  (bucket ${pct(result.bucketHitTokens / result.prefixTokens)})` : '';
      console.log(`budget ${pct(share, 0)} ${LABELS[name].padEnd(36)} hit ${pct(result.hitRate, 2)}${fromBucket}  dead ${pct(result.deadShare)}  ${result.evictionRounds} rounds  ${seconds.toFixed(1)} s`);
    }
  }
  return { unbounded, rows };
}

/** One replay's line: its hit rate against the simulated ChunkIndex's, the bucket as the gateway reports it, its wall time. */
function describeReplay(row: ReplayRow, simulated: Row | undefined): string {
  const versus = simulated ? ` (simulated ChunkIndex ${pct(simulated.hitRate, 2)}: ${((row.hitRate - simulated.hitRate) * 100).toFixed(2)} points)` : '';
  const evictions = Object.entries(row.evictions).map(([reason, n]) => `${reason} ${n}`).join(', ') || 'none';
  return [
    `budget ${pct(row.budgetShare, 0)} ${GATEWAY_LABEL.padEnd(36)} hit ${pct(row.hitRate, 2)}${versus}  wall ${row.seconds.toFixed(1)} s`,
    `    stored ${(row.bucket.bytes / MIB).toFixed(1)} MiB in ${row.bucket.chunks} chunks of a ${(row.bucket.budget / MIB).toFixed(1)} MiB budget (marks ${(row.bucket.lowBytes / MIB).toFixed(1)}-${(row.bucket.highBytes / MIB).toFixed(1)} MiB), peak ${(row.peakBytes / MIB).toFixed(1)} MiB (${pct(row.peakBytes / row.bucket.budget)});`,
    `    evictions ${evictions}; ${row.refetches} fetches found a hit chunk evicted since the lookup (${pct(row.lostHitTokens / row.prefixTokens, 2)} of the prefix tokens lost so)`,
  ].join('\n');
}

function traceFacts(trace: Trace, workingSet: number, measureFrom: number): Record<string, number> {
  return { requests: trace.requests.length, activeConversations: trace.params.activeConversations, chunkTokens: trace.chunkTokens, chunkBytes: trace.chunkBytes, workingSetBytes: workingSet, measuredFrom: measureFrom };
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

/** A line of the printed table: a simulated policy, or the gateway replay (which has no dead share to report). */
interface TableLine {
  readonly label: string;
  readonly budgetShare: number;
  readonly budgetBytes: number;
  readonly hitRate: number;
  readonly bytesRead: number;
  readonly bytesWritten: number;
  readonly deadShare: number | undefined;
}

/** Budget by budget: the policies in their order, then the gateway. */
function tableLines(rows: readonly Row[], gateway: readonly ReplayRow[], policies: readonly PolicyName[]): TableLine[] {
  const lines: TableLine[] = [];
  for (const share of [...new Set([...rows, ...gateway].map((r) => r.budgetShare))]) {
    for (const name of policies) {
      const row = rows.find((r) => r.budgetShare === share && r.policy === name);
      if (row) lines.push({ ...row, label: LABELS[name] });
    }
    const replayed = gateway.find((r) => r.budgetShare === share);
    if (replayed) lines.push({ ...replayed, label: GATEWAY_LABEL, deadShare: undefined });
  }
  return lines;
}

function markdownTable(lines: readonly TableLine[]): string {
  const out = ['| policy | budget | token hit rate | GiB read | GiB written | dead share of budget |', '| --- | ---: | ---: | ---: | ---: | ---: |'];
  for (const l of lines) {
    out.push(`| ${l.label} | ${pct(l.budgetShare, 0)} (${(l.budgetBytes / GIB).toFixed(2)} GiB) | ${pct(l.hitRate, 2)} | ${(l.bytesRead / GIB).toFixed(2)} | ${(l.bytesWritten / GIB).toFixed(2)} | ${l.deadShare === undefined ? 'n/a' : pct(l.deadShare)} |`);
  }
  return out.join('\n');
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

/**
 * Token hit rate against budget: one line per policy, the no-budget ceiling dashed; with a
 * replay, the smaller trace's simulated ChunkIndex and the gateway's replay of it, dashed.
 */
function hitRateSvg(rows: readonly Row[], policies: readonly PolicyName[], ceiling: number, params: WorkloadParams, replay: ReplayReport | undefined): string {
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
  const title = `Token hit rate against budget (${params.requests} requests, seed ${params.seed}${replay ? `; replay ${replay.params.requests}` : ''})`;
  const out = svgHead(width, height, title);
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
  let entries = 0;
  const series = (label: string, color: string, dashed: boolean, points: readonly { budgetShare: number; hitRate: number }[]): void => {
    const dash = dashed ? ' stroke-dasharray="6 3"' : '';
    const at = [...points].sort((a, b) => a.budgetShare - b.budgetShare).map((p) => [x(p.budgetShare), y(p.hitRate), p.hitRate, p.budgetShare] as const);
    out.push(`<polyline fill="none" stroke="${color}" stroke-width="2"${dash} points="${at.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' ')}"/>`);
    for (const [px, py, rate, b] of at) out.push(`<circle cx="${px.toFixed(1)}" cy="${py.toFixed(1)}" r="3" fill="${color}"><title>${escapeXml(`${label}: ${pct(rate)} at ${pct(b, 0)}`)}</title></circle>`);
    const ly = top + 28 + entries++ * 20;
    out.push(`<line x1="${legendX}" x2="${legendX + 18}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color}" stroke-width="2"${dash}/>`);
    out.push(`<text x="${legendX + 24}" y="${ly}">${escapeXml(label)}</text>`);
  };
  policies.forEach((name, s) => series(LABELS[name], COLORS[s % COLORS.length] as string, false, rows.filter((r) => r.policy === name)));
  if (replay) {
    const requests = replay.params.requests;
    const chunkIndex = policies.indexOf('prefix-aware');
    const simulated = replay.simulated.filter((r) => r.policy === 'prefix-aware');
    if (chunkIndex !== -1) series(`ChunkIndex simulated, ${requests} req.`, COLORS[chunkIndex % COLORS.length] as string, true, simulated);
    series(`through the gateway, ${requests} req.`, COLORS[policies.length % COLORS.length] as string, true, replay.gateway);
  }
  const notes = [`chunk ${params.chunkTokens} tokens; bytes x ${params.scale}`, ...(replay ? [`replay trace: bytes x ${replay.params.scale}`] : [])];
  notes.forEach((note, i) => out.push(`<text x="${legendX}" y="${top + 40 + entries * 20 + i * 16}" fill="#555">${escapeXml(note)}</text>`));
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
