/**
 * Runs `objectcache serve` as its own process for a benchmark (as it runs in production, so the
 * load generator and the gateway do not share an event loop), in front of a MinIO.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { freePort, repoRoot } from '../test/helpers/minio.js';
import { onCpus } from './placement.js';
import { processTree, processUsage } from './process-usage.js';

/** How often `event` happened at the gateway whose admin endpoint is `adminUrl` (objectcache_segment_events_total). */
export async function segmentEvents(adminUrl: string, event: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return Number(new RegExp(`^objectcache_segment_events_total\\{event="${event}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
}

export const BENCH_CLIENT = { accessKeyId: 'bench-client', secretAccessKey: 'bench-client-secret' } as const;

export interface GatewayProcess {
  readonly child: ChildProcess;
  readonly url: string;
  readonly adminUrl: string;
  /**
   * The process's resident memory once it listened (idle) and its peak since it started (VmHWM),
   * in MiB: every benchmark reports them. Read before stop().
   */
  memory(): { idleRssMiB: number; peakRssMiB: number };
  /** The gateway's processes: the one, or the primary, its serving processes and any store process (process-usage.ts processTree). */
  pids(): number[];
  stop(): Promise<void>;
}

export interface GatewayProcessOptions {
  /** The S3 backend; absent: the gateway serves its embedded store in `dataDir`. */
  readonly minio?: { readonly endpoint: string; readonly accessKey: string; readonly secretKey: string };
  readonly dataDir?: string;
  /** `objectcache serve` settings; without `--processes` in them, this build runs `--processes 1` (one process, as every benchmark before ran). */
  readonly args?: readonly string[];
  /** Node.js flags (--cpu-prof ...). */
  readonly nodeArgs?: readonly string[];
  /** Another build's `dist/cli/main.js` (or `dist/gateway/cli.js` before it moved), to compare builds in one run (default: this one). */
  readonly cli?: string | undefined;
  /** Run the gateway on these CPUs (taskset list, see placement.ts); default: any. */
  readonly cpus?: string | undefined;
}

export async function startGatewayProcess(options: GatewayProcessOptions): Promise<GatewayProcess> {
  const port = await freePort();
  const metricsPort = await freePort();
  const [command, args] = onCpus(options.cpus, process.execPath, [
    ...(options.nodeArgs ?? []),
    options.cli ?? join(repoRoot(), 'dist/cli/main.js'),
    'serve',
    '--port',
    String(port),
    '--metrics-port',
    String(metricsPort),
    ...(options.minio ? ['--s3-endpoint', options.minio.endpoint] : ['--data-dir', options.dataDir ?? 'data']),
    '--log-level',
    'warn',
    // Another build (options.cli) may predate --processes: it is one process anyway.
    ...(options.args?.includes('--processes') || options.cli !== undefined ? [] : ['--processes', '1']),
    ...(options.args ?? []),
  ]);
  const child = spawn(command, args, {
    env: {
      ...process.env,
      OBJECTCACHE_ACCESS_KEY: BENCH_CLIENT.accessKeyId,
      OBJECTCACHE_SECRET_KEY: BENCH_CLIENT.secretAccessKey,
      ...(options.minio ? { OBJECTCACHE_BACKEND_ACCESS_KEY: options.minio.accessKey, OBJECTCACHE_BACKEND_SECRET_KEY: options.minio.secretKey } : {}),
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const adminUrl = `http://127.0.0.1:${metricsPort}`;
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  };
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(`${adminUrl}/healthz`)).ok) {
        const pids = (): number[] => processTree(child.pid as number);
        const sum = (field: 'rssBytes' | 'peakRssBytes'): number => pids().reduce((n, pid) => n + processUsage(pid)[field], 0);
        const idle = sum('rssBytes');
        // Several processes: their peaks summed (at least the peak of their sum).
        const memory = (): { idleRssMiB: number; peakRssMiB: number } => ({ idleRssMiB: idle / 1024 ** 2, peakRssMiB: sum('peakRssBytes') / 1024 ** 2 });
        return { child, url, adminUrl, memory, pids, stop };
      }
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await stop();
  throw new Error('the gateway did not start');
}
