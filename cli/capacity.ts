/**
 * `objectcache capacity`: a budgeted gateway's usage against its budgets and quotas, and the
 * chunks eviction would take next (the coldest prefixes' tails), from its admin endpoint's
 * /capacity document.
 */
import type { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { usageError } from './options.js';

export const CAPACITY_HELP = `Usage: objectcache capacity [--admin URL] [--top N] [--json]

Prints each budgeted bucket's bytes against its budget and watermarks, each tenant's bytes
against its quota, and the next N chunks eviction would take from each bucket (the tails of the
coldest prefixes, with their depth in the prefix and how long they have been idle).

  --admin URL   the gateway's admin endpoint (default http://127.0.0.1:9081)
  --top N       chunks to show per bucket (default 10)
  --json        print the document as JSON

The admin token, when the gateway has one (its /capacity on an address other than loopback),
is read from OBJECTCACHE_ADMIN_TOKEN.`;

interface Report {
  readonly leader: boolean;
  readonly gateway: string;
  readonly buckets: readonly {
    bucket: string;
    budget: number;
    bytes: number;
    chunks: number;
    pinnedBytes: number;
    highBytes: number;
    lowBytes: number;
    coldest: readonly { tail: string; depth: number; bytes: number; idleSeconds: number; reason: string }[];
  }[];
  readonly tenants: readonly { tenant: string; bytes: number; quota: number | null }[];
}

const GiB = 1024 ** 3;
const size = (bytes: number): string => (bytes >= GiB ? `${(bytes / GiB).toFixed(2)} GiB` : `${(bytes / 1024 ** 2).toFixed(1)} MiB`);
const idle = (s: number): string => (s >= 86_400 ? `${(s / 86_400).toFixed(1)}d` : s >= 3600 ? `${(s / 3600).toFixed(1)}h` : s >= 60 ? `${Math.round(s / 60)}m` : `${s}s`);

export function formatCapacity(report: Report): string {
  const lines = [`gateway ${report.gateway}${report.leader ? ' (holds the eviction lease)' : ''}`];
  for (const b of report.buckets) {
    const percent = b.budget > 0 ? ((100 * b.bytes) / b.budget).toFixed(1) : '0';
    lines.push(
      '',
      `bucket ${b.bucket}: ${size(b.bytes)} of ${size(b.budget)} (${percent}%), ${b.chunks} chunks, ${size(b.pinnedBytes)} pinned; trims from ${size(b.highBytes)} to ${size(b.lowBytes)}`,
    );
    if (b.coldest.length > 0) {
      lines.push('  next to evict (tail of its prefix; depth = chunks before it):');
      for (const c of b.coldest)
        lines.push(`    ${c.tail}  depth ${c.depth}  ${size(c.bytes)}  idle ${idle(c.idleSeconds)}${c.reason === 'dead' ? '  (dead: a chunk before it is gone)' : ''}`);
    }
  }
  if (report.tenants.length > 0) {
    lines.push('', 'tenants:');
    for (const t of report.tenants) lines.push(`  ${t.tenant || '(unknown)'}: ${size(t.bytes)}${t.quota === null ? '' : ` of ${size(t.quota)} quota`}`);
  }
  return lines.join('\n');
}

export async function runCapacity(argv: readonly string[], stdout: Writable, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let values: { admin?: string; top?: string; json?: boolean; help?: boolean };
  try {
    values = parseArgs({
      args: [...argv],
      options: { admin: { type: 'string' }, top: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
    }).values;
  } catch (error) {
    throw usageError((error as Error).message);
  }
  if (values.help) {
    stdout.write(`${CAPACITY_HELP}\n`);
    return 0;
  }
  const top = Number(values.top ?? '10');
  if (!Number.isSafeInteger(top) || top < 0) throw usageError('--top must be a whole number');
  const admin = (values.admin ?? 'http://127.0.0.1:9081').replace(/\/+$/, '');
  let res: Response;
  try {
    const token = env['OBJECTCACHE_ADMIN_TOKEN'];
    res = await fetch(`${admin}/capacity?top=${top}`, token ? { headers: { authorization: `Bearer ${token}` } } : {});
  } catch (error) {
    throw usageError(`cannot reach the admin endpoint ${admin}: ${(error as Error).message}`);
  }
  const body = await res.text();
  if (res.status === 404) throw usageError(`${admin} has no budgeted bucket (start the gateway with --budget bucket=size)`);
  if (res.status === 401 || res.status === 403)
    throw usageError(`${admin}/capacity answered ${res.status}: set OBJECTCACHE_ADMIN_TOKEN to the gateway's admin token (${body.slice(0, 200)})`);
  if (!res.ok) throw usageError(`${admin}/capacity answered ${res.status}: ${body.slice(0, 200)}`);
  stdout.write(values.json ? `${body}\n` : `${formatCapacity(JSON.parse(body) as Report)}\n`);
  return 0;
}
