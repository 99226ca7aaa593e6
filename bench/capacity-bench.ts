// Over 600 lines: one benchmark's workload, replay and report, run as one command.
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
 * Two scenarios on that trace. Without engine caches (--no-plain skips it) every request looks its
 * whole prompt up in the bucket. Behind engine caches (--engines 0 skips it): --engines engines
 * (default 8), each with a prefix cache of its own of --engine-share of the working set's chunks
 * (default 0.02; --engine-chunks gives a count), an LRU that trims prompts from their tails;
 * --routing affinity (default: a conversation stays on its engine, what session- and
 * prefix-aware routers do) or random; every --restart-every requests (default 1000; 0 never) one
 * engine, each in turn, restarts with an empty cache (a crash, an upgrade, a new replica). An
 * engine serves the leading chunks it holds and asks the bucket for the rest, loads what the
 * bucket has, computes the rest and stores the missing chunks, each naming the key before it
 * (`x-amz-meta-objectcache-after`); the prefix-aware policy is also run with PUTs that name
 * nothing (prefix-aware-no-after, the LMCache backends today). Reported: the end-to-end token hit
 * rate (engine and bucket), the bucket's share of the prompt, of what was asked, and of the
 * lookups from chunk 0 (an engine that held nothing of the prompt).
 *
 * Then (unless --no-replay) a smaller trace from the same generator and seed (--replay-requests,
 * --replay-scale, and as many conversations in progress per request as the big trace) is
 * simulated under every policy and replayed through a real gateway at each budget
 * (bench/capacity/replay.ts): the same ChunkIndex, trimmed by the gateway itself rather than
 * after every request; reported with the bucket's peak and least use once full and the gateway's
 * CPU per request. A replay takes a minute or two here. The gateway's embedded store lives in
 * --replay-dir, /dev/shm where there is one: the replay measures eviction, not the disk, and a
 * tmpfs makes each PUT's fsyncs free. --replay-put-concurrency (default 1) stores a request's
 * missing chunks that many at a time rather than one after the other. The gateway runs at its
 * default settings but for the budget, the marks and a quicker capacity sync and lease (so that
 * it leads at once); --replay-evict-rate sets its --evict-rate.
 *
 * With --trace FILE the trace is a file in Mooncake's JSONL format instead (bench/capacity/mooncake-trace.ts:
 * its first --requests requests, all without it; the replay its first --replay-requests), such as
 * the traces of Mooncake's FAST'25 release (github.com/kvcache-ai/Mooncake, FAST25-release/traces).
 *
 *   npm run bench:capacity [-- --scale 1/128 --requests 20000 --seed 1 --budgets 0.1,0.25,0.5] [-- --trace FILE]
 *   [-- --engines 8 --engine-share 0.02 --routing affinity --restart-every 1000] [-- --engines 0] [-- --no-plain]
 *   [-- --replay-requests 3000 --replay-scale 1/512 --replay-dir DIR --replay-put-concurrency 1 --replay-evict-rate N] [-- --no-replay]
 *
 * Writes bench/results/capacity-latest.json and bench/results/capacity-hit-rate.svg (--out names
 * another directory).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  makePolicy,
  planEngineTier,
  PrefixAwarePolicy,
  POLICY_NAMES,
  simulate,
  LruPolicy,
  type EngineTier,
  type EngineTierOptions,
  type PolicyName,
  type SimulationOptions,
  type SimulationResult,
} from './capacity/policies.js';
import { replayThroughGateway, wholePercent, type ReplayResult } from './capacity/replay.js';
import { loadMooncakeTrace } from './capacity/mooncake-trace.js';
import { DEFAULT_WORKLOAD, generateTrace, reuseFacts, workingSetBytes, type ReuseFacts, type Trace, type WorkloadParams } from './capacity/workload.js';
import { COLORS, escapeXml, svgHead, yGrid } from './report/svg.js';

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

/** What each policy is called in the table and the figure. */
const LABELS: Record<PolicyName, string> = {
  'prefix-aware': 'prefix-aware (ChunkIndex)',
  'prefix-aware-no-after': 'prefix-aware, PUTs without after',
  lru: 'plain LRU',
  'write-age': 'write age (lifecycle expiry = FIFO)',
  's3-fifo': 'S3-FIFO, prefix-aware',
  'lfu-da': 'LFU with dynamic aging, prefix-aware',
  belady: 'Belady with prefix rule (offline)',
};
const GATEWAY_LABEL = 'prefix-aware, through the gateway';

interface Row extends SimulationResult {
  readonly budgetShare: number;
  readonly budgetBytes: number;
  readonly seconds: number;
  /** ChunkIndex only: victims evicted as dead (a predecessor gone) rather than as LRU leaves. */
  readonly evictedDead?: number;
}

/** The same trace behind engine caches. */
interface TierReport {
  readonly options: EngineTierOptions;
  readonly facts: Record<string, number>;
  readonly unbounded: SimulationResult;
  readonly rows: Row[];
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
      requests: { type: 'string' },
      trace: { type: 'string' },
      seed: { type: 'string', default: String(DEFAULT_WORKLOAD.seed) },
      budgets: { type: 'string', default: '0.1,0.25,0.5' },
      conversations: { type: 'string', default: String(DEFAULT_WORKLOAD.activeConversations) },
      high: { type: 'string', default: '0.99' },
      low: { type: 'string', default: '0.97' },
      warmup: { type: 'string', default: '0.2' },
      policies: { type: 'string', default: POLICY_NAMES.join(',') },
      engines: { type: 'string', default: '8' },
      'engine-share': { type: 'string', default: '0.02' },
      'engine-chunks': { type: 'string' },
      routing: { type: 'string', default: 'affinity' },
      'restart-every': { type: 'string', default: '1000' },
      plain: { type: 'boolean', default: true },
      replay: { type: 'boolean', default: true },
      'replay-requests': { type: 'string', default: '3000' },
      'replay-scale': { type: 'string', default: '1/512' },
      'replay-conversations': { type: 'string' },
      'replay-put-concurrency': { type: 'string', default: '1' },
      'replay-evict-rate': { type: 'string' },
      'replay-dir': { type: 'string', default: existsSync('/dev/shm') ? '/dev/shm' : tmpdir() },
      out: { type: 'string' },
    },
  });
  const params: WorkloadParams = {
    ...DEFAULT_WORKLOAD,
    scale: parseScale('scale', values.scale),
    requests: positive('requests', values.requests ?? String(DEFAULT_WORKLOAD.requests), true),
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
  if (!Number.isInteger(engineCount) || engineCount < 0) throw new Error(`--engines must be a whole number (0: no engine-cache scenario), not ${values.engines}`);
  const engineShare = positive('engine-share', values['engine-share']);
  const engineChunks = values['engine-chunks'] === undefined ? undefined : positive('engine-chunks', values['engine-chunks'], true);
  const routing = values.routing;
  if (routing !== 'affinity' && routing !== 'random') throw new Error(`--routing is affinity or random, not ${routing}`);
  const restartEvery = Number(values['restart-every']);
  if (!Number.isInteger(restartEvery) || restartEvery < 0) throw new Error(`--restart-every must be a whole number of requests (0: never), not ${values['restart-every']}`);
  if (!values.plain && engineCount === 0) throw new Error('--no-plain with --engines 0 leaves nothing to simulate');
  if (values.replay && (wholePercent(high) === undefined || wholePercent(low) === undefined))
    throw new Error(`--high (${high}) and --low (${low}) must be whole percents (hundredths) to replay: the gateway takes percents; or add --no-replay`);
  const replayRequests = positive('replay-requests', values['replay-requests'], true);
  const replay = values.replay
    ? {
        requests: replayRequests,
        scale: parseScale('replay-scale', values['replay-scale']),
        // As many conversations in progress per request as the big trace: the same turns per
        // conversation and the same gap between turns, in requests, relative to the trace.
        conversations:
          values['replay-conversations'] === undefined
            ? Math.max(1, Math.round((params.activeConversations * replayRequests) / params.requests))
            : positive('replay-conversations', values['replay-conversations'], true),
        putConcurrency: positive('replay-put-concurrency', values['replay-put-concurrency'], true),
        evictRate: values['replay-evict-rate'] === undefined ? null : positive('replay-evict-rate', values['replay-evict-rate'], true),
        dir: values['replay-dir'],
      }
    : undefined;
  const engineSettings =
    engineCount === 0 ? null : { count: engineCount, share: engineChunks === undefined ? engineShare : null, chunks: engineChunks ?? null, routing, restartEvery };
  const traceFile = values.trace;
  const settings = {
    budgets,
    high,
    low,
    warmup,
    policies,
    plain: values.plain,
    engines: engineSettings,
    workload: traceFile ? null : params,
    trace: traceFile ?? null,
    replay: replay ?? null,
  };
  console.log(`node ${process.version}, ${cpus().length} cores; settings ${JSON.stringify(settings)}`);

  const started = performance.now();
  const trace = traceFile ? loadMooncakeTrace(traceFile, { scale: params.scale, ...(values.requests === undefined ? {} : { limit: params.requests }) }) : generateTrace(params);
  const workingSet = workingSetBytes(trace);
  const measureFrom = Math.floor(trace.requests.length * warmup);
  console.log(`\n${describeTrace(trace, workingSet)} (generated in ${((performance.now() - started) / 1000).toFixed(1)} s)`);
  console.log(`eviction from ${high} to ${low} of the budget, after each request; the first ${measureFrom} requests (${warmup * 100}%) warm up and are not counted`);
  // Without engine caches every lookup names the prompt from chunk 0, so the index learns every
  // link from the lookups and the PUTs' `after` adds nothing: the two prefix-aware runs are the same.
  const plainPolicies = policies.filter((p) => p !== 'prefix-aware-no-after');
  let unbounded: SimulationResult | undefined;
  let rows: Row[] = [];
  if (values.plain) {
    console.log('\nNo engine caches: every request looks its whole prompt up in the bucket');
    ({ unbounded, rows } = simulateBudgets(trace, workingSet, budgets, plainPolicies, { high, low, measureFrom }));
  }
  let tiered: TierReport | undefined;
  if (engineSettings) {
    const chunks = engineChunks ?? Math.max(1, Math.round((workingSet / trace.chunkBytes) * engineShare));
    const tierOptions: EngineTierOptions = { count: engineCount, chunks, routing, restartEvery, seed: params.seed };
    const plannedAt = performance.now();
    const tier = planEngineTier(trace, tierOptions);
    console.log(`\n${describeTier(trace, tier, workingSet, measureFrom)} (planned in ${((performance.now() - plannedAt) / 1000).toFixed(1)} s)`);
    const simulated = simulateBudgets(trace, workingSet, budgets, policies, { high, low, measureFrom, tier });
    tiered = { options: tierOptions, facts: tierFacts(trace, tier, workingSet, measureFrom), unbounded: simulated.unbounded, rows: simulated.rows };
  }

  let replayed: ReplayReport | undefined;
  if (replay) {
    const replayParams: WorkloadParams = { ...params, requests: replay.requests, scale: replay.scale, activeConversations: replay.conversations };
    const replayTrace = traceFile ? loadMooncakeTrace(traceFile, { scale: replay.scale, limit: replay.requests }) : generateTrace(replayParams);
    const replayWorkingSet = workingSetBytes(replayTrace);
    const replayFrom = Math.floor(replayTrace.requests.length * warmup);
    console.log(
      `\nReplay trace (same generator and seed, ${replay.conversations} conversations in progress), simulated, then through the gateway:\n${describeTrace(replayTrace, replayWorkingSet)}`,
    );
    console.log(
      `the first ${replayFrom} requests warm up; the gateway trims on its own (every 250 ms, --evict-rate ${replay.evictRate ?? 'at its default'}), on its embedded store in ${replay.dir}; ${replay.putConcurrency} PUT(s) at a time\n`,
    );
    const simulated = simulateBudgets(replayTrace, replayWorkingSet, budgets, plainPolicies, { high, low, measureFrom: replayFrom });
    const gateway: ReplayRow[] = [];
    for (const share of budgets) {
      const budgetBytes = Math.floor(replayWorkingSet * share);
      const progressEvery = Math.max(1, Math.round(replayTrace.requests.length / 4));
      const result = await replayThroughGateway(replayTrace, budgetBytes, {
        measureFrom: replayFrom,
        high,
        low,
        putConcurrency: replay.putConcurrency,
        ...(replay.evictRate === null ? {} : { evictRate: replay.evictRate }),
        storeDir: replay.dir,
        progressEvery,
        onProgress: (done, seconds) => console.log(`  budget ${pct(share, 0)} through the gateway: ${done} requests in ${seconds.toFixed(0)} s`),
      });
      const row: ReplayRow = { ...result, policy: 'prefix-aware (gateway)', budgetShare: share, budgetBytes };
      gateway.push(row);
      console.log(
        describeReplay(
          row,
          simulated.rows.find((r) => r.policy === 'prefix-aware' && r.budgetShare === share),
        ),
      );
    }
    replayed = {
      params: replayTrace.params,
      trace: replayTrace,
      workingSet: replayWorkingSet,
      measureFrom: replayFrom,
      unbounded: simulated.unbounded,
      simulated: simulated.rows,
      gateway,
    };
  }

  if (values.plain)
    console.log(
      `\nSimulated, ${trace.requests.length}-request trace (chunks of ${trace.chunkBytes / 1024} KiB), no engine caches:\n${markdownTable(tableLines(rows, [], plainPolicies))}`,
    );
  if (tiered)
    console.log(
      `\nSimulated, the same trace behind ${tiered.options.count} engine caches of ${tiered.options.chunks} chunks each (${tiered.options.routing} routing, a restart every ${tiered.options.restartEvery || 'never'} requests):\n${tierTable(tiered.rows, policies)}`,
    );
  if (replayed)
    console.log(
      `\nReplay trace, ${replayed.trace.requests.length} requests (chunks of ${replayed.trace.chunkBytes / 1024} KiB), simulated and through the gateway:\n${markdownTable(tableLines(replayed.simulated, replayed.gateway, plainPolicies))}`,
    );
  const targets = checkTargets(rows, budgets);
  if (values.plain) {
    console.log('\nTargets, no engine caches:');
    for (const t of targets) console.log(`- ${t.met ? 'met' : 'NOT met'}: ${t.target} (${t.detail})`);
  }
  const tierTargets = tiered ? checkTargets(tiered.rows, budgets) : [];
  if (tiered) {
    console.log("\nTargets, behind engine caches (end-to-end hit rate; the engines serve the same tokens under every policy, so the points are the bucket's):");
    for (const t of tierTargets) console.log(`- ${t.met ? 'met' : 'NOT met'}: ${t.target} (${t.detail})`);
  }

  const out = values.out ?? defaultOut();
  mkdirSync(out, { recursive: true });
  writeFileSync(
    join(out, 'capacity-hit-rate.svg'),
    hitRateSvg(values.plain ? { rows, policies: plainPolicies, ceiling: unbounded?.hitRate ?? 0 } : undefined, tiered, policies, params, replayed),
  );
  const json = {
    benchmark: 'capacity',
    date: new Date().toISOString(),
    node: process.version,
    cores: cpus().length,
    settings,
    trace: traceFacts(trace, workingSet, measureFrom),
    unbounded: unbounded ? { hitRate: unbounded.hitRate, bytesRead: unbounded.bytesRead, bytesWritten: unbounded.bytesWritten } : null,
    results: rows,
    targets,
    engineTier: tiered
      ? {
          options: tiered.options,
          facts: tiered.facts,
          unbounded: {
            hitRate: tiered.unbounded.hitRate,
            bucketHitRate: tiered.unbounded.bucketHitTokens / tiered.unbounded.prefixTokens,
            bytesRead: tiered.unbounded.bytesRead,
            bytesWritten: tiered.unbounded.bytesWritten,
          },
          results: tiered.rows,
          targets: tierTargets,
        }
      : null,
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
function simulateBudgets(
  trace: Trace,
  workingSet: number,
  budgets: readonly number[],
  policies: readonly PolicyName[],
  options: Omit<SimulationOptions, 'budgetBytes'>,
): { unbounded: SimulationResult; rows: Row[] } {
  console.log(
    `bytes at scale ${trace.params.scale} of Llama-3.1-8B bf16 KV: ${trace.chunkBytes / 1024} KiB a chunk (full size ${(trace.chunkBytes / trace.params.scale / MIB).toFixed(0)} MiB)`,
  );
  const unbounded = simulate(trace, new LruPolicy(trace.chunkBytes), { ...options, budgetBytes: Infinity });
  console.log(
    `no budget (compulsory misses only): token hit rate ${pct(unbounded.hitRate)}${options.tier ? `, bucket ${pct(unbounded.bucketHitTokens / unbounded.prefixTokens)}` : ''}`,
  );
  const rows: Row[] = [];
  for (const share of budgets) {
    const budgetBytes = Math.floor(workingSet * share);
    for (const name of policies) {
      const started = performance.now();
      const policy = makePolicy(name, trace, budgetBytes, options.tier);
      const result = simulate(trace, policy, { ...options, budgetBytes });
      const seconds = (performance.now() - started) / 1000;
      const evictedDead = policy instanceof PrefixAwarePolicy ? policy.evicted.dead : undefined;
      rows.push({ ...result, budgetShare: share, budgetBytes, seconds, ...(evictedDead === undefined ? {} : { evictedDead }) });
      const fromBucket = options.tier
        ? `  bucket ${pct(result.bucketHitTokens / result.prefixTokens, 2)} (${pct(result.bucketHitTokens / result.askedTokens)} of asked, ${pct(result.coldHitTokens / result.coldPrefixTokens)} from chunk 0)`
        : '';
      console.log(
        `budget ${pct(share, 0)} ${LABELS[name].padEnd(36)} hit ${pct(result.hitRate, 2)}${fromBucket}  dead ${pct(result.deadShare)}  ${result.evictionRounds} rounds  ${seconds.toFixed(1)} s`,
      );
    }
  }
  return { unbounded, rows };
}

/** One replay's line: its hit rate against the simulated ChunkIndex's, the bucket as the gateway reports it, its wall time. */
function describeReplay(row: ReplayRow, simulated: Row | undefined): string {
  const versus = simulated ? ` (simulated ChunkIndex ${pct(simulated.hitRate, 2)}: ${((row.hitRate - simulated.hitRate) * 100).toFixed(2)} points)` : '';
  const evictions =
    Object.entries(row.evictions)
      .map(([reason, n]) => `${reason} ${n}`)
      .join(', ') || 'none';
  return [
    `budget ${pct(row.budgetShare, 0)} ${GATEWAY_LABEL.padEnd(36)} hit ${pct(row.hitRate, 2)}${versus}  wall ${row.seconds.toFixed(1)} s`,
    `    stored ${(row.bucket.bytes / MIB).toFixed(1)} MiB in ${row.bucket.chunks} chunks of a ${(row.bucket.budget / MIB).toFixed(1)} MiB budget (marks ${(row.bucket.lowBytes / MIB).toFixed(1)}-${(row.bucket.highBytes / MIB).toFixed(1)} MiB), peak ${(row.peakBytes / MIB).toFixed(1)} MiB (${pct(row.peakBytes / row.bucket.budget)}), least once full ${(row.leastFullBytes / MIB).toFixed(1)} MiB (${pct(row.leastFullBytes / row.bucket.budget)}); gateway CPU ${row.gatewayCpuMsPerRequest.toFixed(2)} ms a request;`,
    `    evictions ${evictions}; ${row.refetches} fetches found a hit chunk evicted since the lookup (${pct(row.lostHitTokens / row.prefixTokens, 2)} of the prefix tokens lost so)`,
  ].join('\n');
}

const reuseByTrace = new WeakMap<Trace, ReuseFacts>();

/** reuseFacts, once per trace (it is printed with the trace, and kept with the results). */
function reuseOf(trace: Trace): ReuseFacts {
  let facts = reuseByTrace.get(trace);
  if (facts === undefined) reuseByTrace.set(trace, (facts = reuseFacts(trace)));
  return facts;
}

function traceFacts(trace: Trace, workingSet: number, measureFrom: number): Record<string, number> {
  return {
    requests: trace.requests.length,
    activeConversations: trace.params.activeConversations,
    chunkTokens: trace.chunkTokens,
    chunkBytes: trace.chunkBytes,
    workingSetBytes: workingSet,
    measuredFrom: measureFrom,
    ...reuseOf(trace),
  };
}

/** What the engines' own caches did, over the measured requests (the same under every bucket policy). */
function tierFacts(trace: Trace, tier: EngineTier, workingSet: number, measureFrom: number): Record<string, number> {
  let prefix = 0;
  let local = 0;
  let coldRequests = 0;
  let coldTokens = 0;
  for (let at = measureFrom; at < trace.requests.length; at++) {
    const chunks = (trace.requests[at] as { keys: readonly string[] }).keys.length;
    prefix += chunks;
    local += tier.local[at] as number;
    if (tier.local[at] === 0) {
      coldRequests++;
      coldTokens += chunks;
    }
  }
  return {
    engines: tier.options.count,
    engineChunks: tier.options.chunks,
    engineShareOfWorkingSet: (tier.options.chunks * trace.chunkBytes) / workingSet,
    engineGiBFullSize: (tier.options.chunks * trace.chunkBytes) / trace.params.scale / GIB,
    restarts: tier.restarts,
    localHitRate: prefix === 0 ? 0 : local / prefix,
    askedShare: prefix === 0 ? 0 : (prefix - local) / prefix,
    coldRequests,
    coldShareOfPrefixTokens: prefix === 0 ? 0 : coldTokens / prefix,
  };
}

function describeTier(trace: Trace, tier: EngineTier, workingSet: number, measureFrom: number): string {
  const f = tierFacts(trace, tier, workingSet, measureFrom);
  const o = tier.options;
  return [
    `Behind engine caches: ${o.count} engines, each an LRU of ${o.chunks} chunks (${pct(f['engineShareOfWorkingSet'] ?? 0)} of the working set, ${(f['engineGiBFullSize'] ?? 0).toFixed(0)} GiB at full size), ${o.routing === 'affinity' ? 'session affinity (a conversation stays on its engine)' : 'random routing'}, one engine restarting empty every ${o.restartEvery || 'never'} requests (${tier.restarts} restarts)`,
    `measured requests: the engines serve ${pct(f['localHitRate'] ?? 0, 2)} of the prefix tokens themselves and ask the bucket for the other ${pct(f['askedShare'] ?? 0, 2)}; ${f['coldRequests']} requests (${pct(f['coldShareOfPrefixTokens'] ?? 0)} of the prefix tokens) found nothing in their engine and look up from chunk 0`,
  ].join('\n');
}

function tierTable(rows: readonly Row[], policies: readonly PolicyName[]): string {
  const out = [
    '| policy | budget | end-to-end hit rate | bucket hit rate (of prompt) | bucket hit rate (of asked) | bucket hit, lookups from chunk 0 | GiB read | GiB written | dead share of budget |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const share of [...new Set(rows.map((r) => r.budgetShare))]) {
    for (const name of policies) {
      const r = rows.find((x) => x.budgetShare === share && x.policy === name);
      if (!r) continue;
      out.push(
        `| ${LABELS[name]} | ${pct(share, 0)} (${(r.budgetBytes / GIB).toFixed(2)} GiB) | ${pct(r.hitRate, 2)} | ${pct(r.bucketHitTokens / r.prefixTokens, 2)} | ${pct(r.bucketHitTokens / r.askedTokens, 2)} | ${pct(r.coldHitTokens / r.coldPrefixTokens, 2)} | ${(r.bytesRead / GIB).toFixed(2)} | ${(r.bytesWritten / GIB).toFixed(2)} | ${pct(r.deadShare)} |`,
      );
    }
  }
  return out.join('\n');
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
  const reuse = reuseOf(trace);
  return [
    `trace: ${trace.requests.length} requests of ${conversations} conversations (${(trace.requests.length / conversations).toFixed(1)} turns each)`,
    `prompt tokens p5 ${at(0.05)}, median ${at(0.5)}, p95 ${at(0.95)}, max ${at(1)}`,
    `${accesses} chunk lookups, ${chunks} distinct chunks; working set ${(workingSet / GIB).toFixed(2)} GiB at scale (${(workingSet / trace.params.scale / 2 ** 40).toFixed(2)} TiB full size)`,
    `reuse: ${pct(reuse.usedOnce)} of the chunks are never read again after they are stored; a chunk's first reuse comes a median ${reuse.firstReuseGapMedian} requests after it (p90 ${reuse.firstReuseGapP90}); ${pct(reuse.thirdUseAfterSecond)} of the chunks used twice are used again`,
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
    out.push(
      `| ${l.label} | ${pct(l.budgetShare, 0)} (${(l.budgetBytes / GIB).toFixed(2)} GiB) | ${pct(l.hitRate, 2)} | ${(l.bytesRead / GIB).toFixed(2)} | ${(l.bytesWritten / GIB).toFixed(2)} | ${l.deadShare === undefined ? 'n/a' : pct(l.deadShare)} |`,
    );
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
    const pairs = budgets
      .map((b) => [b, rate('prefix-aware', b), rate(other, b)] as const)
      .filter((p): p is readonly [number, number, number] => p[1] !== undefined && p[2] !== undefined);
    if (pairs.length === 0) return;
    const met = pairs.every(([, pa, o]) => pa - o > margin);
    checks.push({ target, met, detail: pairs.map(([b, pa, o]) => `${pct(b, 0)}: ${pct(pa, 2)} vs ${pct(o, 2)}, ${((pa - o) * 100).toFixed(2)} points`).join('; ') });
  };
  compare('prefix-aware ahead of plain LRU at every budget', 'lru', 0);
  compare('prefix-aware far ahead (>= 10 points) of write-age expiry at every budget', 'write-age', 0.1 - 1e-12);
  const closing = budgets
    .map((b) => [b, rate('prefix-aware', b), rate('lru', b), rate('belady', b)] as const)
    .filter((p): p is readonly [number, number, number, number] => p[1] !== undefined && p[2] !== undefined && p[3] !== undefined);
  if (closing.length > 0)
    checks.push({
      target: 'prefix-aware closes at least half the gap from plain LRU to the offline reference at every budget',
      met: closing.every(([, p, l, o]) => p - l >= (o - l) / 2),
      detail: closing.map(([b, p, l, o]) => `${pct(b, 0)}: ${((p - l) * 100).toFixed(2)} of ${((o - l) * 100).toFixed(2)} points`).join('; '),
    });
  const pa = rate('prefix-aware', 0.5);
  const opt = rate('belady', 0.5);
  if (pa !== undefined && opt !== undefined)
    checks.push({
      target: "prefix-aware within 10% of the offline reference's hit rate at 50%",
      met: pa >= 0.9 * opt,
      detail: `${pct(pa)} vs ${pct(opt)}: ${pct(pa / opt)} of it`,
    });
  return checks;
}

/**
 * Token hit rate against budget: one line per policy, the no-budget ceiling dashed; with a
 * replay, the smaller trace's simulated ChunkIndex and the gateway's replay of it, dashed. Behind
 * engine caches, a second panel: the end-to-end hit rate (the engines' own hits and the bucket's),
 * the share the engines serve themselves dotted.
 */
function hitRateSvg(
  plain: { rows: readonly Row[]; policies: readonly PolicyName[]; ceiling: number } | undefined,
  tiered: TierReport | undefined,
  policies: readonly PolicyName[],
  params: WorkloadParams,
  replay: ReplayReport | undefined,
): string {
  const width = 800;
  const panelH = 420;
  const panels = (plain ? 1 : 0) + (tiered ? 1 : 0);
  const height = panelH * panels;
  const left = 64;
  const right = 290; // the legend
  const plotW = width - left - right;
  const plotH = panelH - 44 - 56;
  const title = `Token hit rate against budget (${params.requests} requests, seed ${params.seed}${replay ? `; replay ${replay.params.requests}` : ''})`;
  const out = svgHead(width, height, title);
  const colorOf = (name: PolicyName): string => COLORS[POLICY_NAMES.indexOf(name) % COLORS.length] as string;
  const panel = (
    offset: number,
    heading: string,
    rows: readonly Row[],
    names: readonly PolicyName[],
    ceiling: number,
    ceilingLabel: string,
    extra: (series: Series) => void,
    notes: readonly string[],
  ): void => {
    const top = offset + 44;
    const budgets = [...new Set(rows.map((r) => r.budgetShare))].sort((a, b) => a - b);
    const xMax = Math.max(...budgets, 0.1);
    const x = (v: number): number => left + (v / xMax) * plotW;
    const y = (v: number): number => top + (1 - v) * plotH;
    if (offset > 0 || panels > 1) out.push(`<text x="${left}" y="${top - 12}" font-weight="bold">${escapeXml(heading)}</text>`);
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
    out.push(`<text x="${legendX + 24}" y="${top + 10}">${escapeXml(ceilingLabel)} (${pct(ceiling)})</text>`);
    let entries = 0;
    const series: Series = (label, color, dash, points) => {
      const dashAttr = dash ? ` stroke-dasharray="${dash}"` : '';
      const at = [...points].sort((a, b) => a.budgetShare - b.budgetShare).map((p) => [x(p.budgetShare), y(p.hitRate), p.hitRate, p.budgetShare] as const);
      out.push(`<polyline fill="none" stroke="${color}" stroke-width="2"${dashAttr} points="${at.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' ')}"/>`);
      for (const [px, py, rate, b] of at)
        out.push(`<circle cx="${px.toFixed(1)}" cy="${py.toFixed(1)}" r="3" fill="${color}"><title>${escapeXml(`${label}: ${pct(rate)} at ${pct(b, 0)}`)}</title></circle>`);
      const ly = top + 28 + entries++ * 20;
      out.push(`<line x1="${legendX}" x2="${legendX + 18}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color}" stroke-width="2"${dashAttr}/>`);
      out.push(`<text x="${legendX + 24}" y="${ly}">${escapeXml(label)}</text>`);
    };
    for (const name of names)
      series(
        LABELS[name],
        colorOf(name),
        undefined,
        rows.filter((r) => r.policy === name),
      );
    extra(series);
    notes.forEach((note, i) => out.push(`<text x="${legendX}" y="${top + 40 + entries * 20 + i * 16}" fill="#555">${escapeXml(note)}</text>`));
  };
  let offset = 0;
  if (plain) {
    panel(
      offset,
      'No engine caches: every lookup from chunk 0',
      plain.rows,
      plain.policies,
      plain.ceiling,
      'no budget',
      (series) => {
        if (!replay) return;
        const requests = replay.params.requests;
        const simulated = replay.simulated.filter((r) => r.policy === 'prefix-aware');
        if (plain.policies.includes('prefix-aware')) series(`ChunkIndex simulated, ${requests} req.`, colorOf('prefix-aware'), '6 3', simulated);
        series(`through the gateway, ${requests} req.`, COLORS[POLICY_NAMES.length % COLORS.length] as string, '6 3', replay.gateway);
      },
      [`chunk ${params.chunkTokens} tokens; bytes x ${params.scale}`, ...(replay ? [`replay trace: bytes x ${replay.params.scale}`] : [])],
    );
    offset += panelH;
  }
  if (tiered) {
    const o = tiered.options;
    const localRate = tiered.facts['localHitRate'] ?? 0;
    panel(
      offset,
      `Behind ${o.count} engine caches of ${o.chunks} chunks (${o.routing}, a restart every ${o.restartEvery || 'never'} requests): end to end`,
      tiered.rows,
      policies,
      tiered.unbounded.hitRate,
      'no budget',
      (series) => {
        const budgets = [...new Set(tiered.rows.map((r) => r.budgetShare))];
        series(
          `engines' own hits (${pct(localRate)})`,
          '#888',
          '2 3',
          budgets.map((budgetShare) => ({ budgetShare, hitRate: localRate })),
        );
      },
      ['the bucket serves what lies between', "the dotted line and a policy's line"],
    );
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

type Series = (label: string, color: string, dash: string | undefined, points: readonly { budgetShare: number; hitRate: number }[]) => void;

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
