/**
 * `objectcache plan`: what the scheduler would grant a set of layerwise requests, offline, so an
 * operator can see an allocation before deploying it.
 */
import { readFileSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { requireString, usageError } from './options.js';
import { allocate, type AllocationRequest } from '../gateway/descriptor-get/scheduler/allocate.js';
import { parseSchedulingPolicy, POLICIES } from '../gateway/common/config.js';
import { formatGbps, parseMargin, parseRate } from '../gateway/common/rate.js';

export const PLAN_HELP = `Usage: objectcache plan --cap RATE [--policy NAME] [--margin RATE|N%] FILE|-

Reads a JSON array of {"id", "bytesPerLayer", "computeMsPerLayer"} (computeMsPerLayer may be
omitted for a bandwidth-hungry request) and prints, in input order,
[{"id", "rateBytesPerSec", "rateGbps", "predictedStallMsPerLayer"}].

  --cap RATE       bandwidth shared by the requests, e.g. 80Gbps, 10GB/s, 1200MiB/s  (required)
  --policy NAME    ${POLICIES.join(', ')} (default cal-stall-opt)
  --margin RATE    Calibrated Stall-opt margin added to each zero-stall rate, as a rate
                   or a percentage of --cap (default 5%)
RATE units: Gbps, Mbps, GB/s, MB/s, GiB/s, MiB/s (decimal G = 1e9); a bare number is bytes/s.`;

function rateOption(text: string, name: string, cap?: number): number {
  const rate = cap === undefined ? parseRate(text) : parseMargin(text, cap);
  if (typeof rate === 'string') throw usageError(`--${name}: ${rate}`);
  return rate;
}

function readRequests(text: string): AllocationRequest[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw usageError(`the requests are not JSON: ${(error as Error).message}`);
  }
  if (!Array.isArray(parsed)) throw usageError('the requests must be a JSON array');
  return parsed.map((item: unknown, i) => {
    const r = item as Record<string, unknown> | null;
    const id = r?.['id'];
    const bytes = r?.['bytesPerLayer'];
    const compute = r?.['computeMsPerLayer'];
    if (typeof id !== 'string' && typeof id !== 'number') throw usageError(`request ${i}: "id" must be a string or number`);
    if (typeof bytes !== 'number' || !(bytes > 0) || !Number.isFinite(bytes)) throw usageError(`request ${i}: "bytesPerLayer" must be a positive number`);
    if (compute !== undefined && compute !== null && (typeof compute !== 'number' || !(compute > 0) || !Number.isFinite(compute))) {
      throw usageError(`request ${i}: "computeMsPerLayer" must be a positive number or absent`);
    }
    return { id: String(id), bytesPerLayer: bytes, computeMsPerLayer: typeof compute === 'number' ? compute : undefined };
  });
}

export async function runPlan(argv: readonly string[], stdin: Readable, stdout: Writable): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  let positional: string[];
  try {
    const parsed = parseArgs({
      args: [...argv],
      options: { cap: { type: 'string' }, policy: { type: 'string' }, margin: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: true,
    });
    values = parsed.values;
    positional = parsed.positionals;
  } catch (error) {
    throw usageError((error as Error).message);
  }
  if (values['help']) {
    stdout.write(`${PLAN_HELP}\n`);
    return 0;
  }
  const cap = rateOption(requireString(values, 'cap'), 'cap');
  if (!(cap > 0)) throw usageError('--cap must be positive');
  const named = parseSchedulingPolicy((values['policy'] as string | undefined) ?? 'cal-stall-opt');
  if ('problem' in named) throw usageError(`--policy ${named.problem}`);
  const policy = named.policy;
  const margin = rateOption((values['margin'] as string | undefined) ?? '5%', 'margin', cap);
  if (positional.length !== 1) throw usageError('give exactly one requests FILE, or - for standard input');
  const source = positional[0] as string;
  let text: string;
  if (source === '-') {
    const parts: Buffer[] = [];
    for await (const chunk of stdin) parts.push(chunk as Buffer);
    text = Buffer.concat(parts).toString('utf8');
  } else {
    try {
      text = readFileSync(source, 'utf8');
    } catch (error) {
      throw usageError(`cannot read ${source}: ${(error as Error).message}`);
    }
  }
  const allocations = allocate(readRequests(text), { capBytesPerSec: cap, policy, marginBytesPerSec: margin });
  const out = allocations.map((a) => ({
    id: a.id,
    rateBytesPerSec: Math.round(a.rateBytesPerSec),
    rateGbps: formatGbps(a.rateBytesPerSec),
    predictedStallMsPerLayer: Math.round(a.predictedStallMsPerLayer * 1000) / 1000,
  }));
  stdout.write(`${JSON.stringify(out, null, 2)}\n`);
  return 0;
}
