/**
 * A real MinIO server for tests and benchmarks: built once per version by
 * scripts/install-minio.sh, started on a free loopback port with a temporary data directory.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { onCpus } from '../../bench/placement.js';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (this file runs from bench/ under vitest and from dist/bench/ when built). */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'scripts', 'install-minio.sh'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('cannot find the repository root (scripts/install-minio.sh)');
    dir = parent;
  }
  return dir;
}

export interface MinioInfo {
  readonly endpoint: string;
  readonly accessKey: string;
  readonly secretKey: string;
  readonly binary: string;
}

export interface MinioServer extends MinioInfo {
  readonly port: number;
  readonly dataDir: string;
  readonly process: ChildProcess;
  /** Stops the server (SIGTERM, then SIGKILL) and keeps the data directory. */
  stop(): Promise<void>;
  /** Stops the server and removes the data directory. */
  destroy(): Promise<void>;
}

/** Builds MinIO if this version is not built yet; returns the binary's path. */
export function installMinio(): string {
  const out = execFileSync('bash', [join(repoRoot(), 'scripts/install-minio.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 25 * 60 * 1000 });
  const binary = out.trim().split('\n').at(-1);
  if (!binary) throw new Error('install-minio.sh printed no binary path');
  return binary;
}

export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolvePort(port));
    });
  });
}

/**
 * Waits until MinIO serves S3: `/minio/health/cluster` answers 200 only once the object layer is
 * initialized (and, distributed, has write quorum). `/minio/health/ready` answers 200 earlier,
 * while S3 requests still get 503 XMinioServerNotInitialized.
 */
async function waitHealthy(endpoint: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`minio exited with code ${child.exitCode} before it was ready`);
    try {
      const res = await fetch(`${endpoint}/minio/health/cluster`, { signal: AbortSignal.timeout(1000) });
      if (res.ok) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`minio at ${endpoint} was not ready within ${timeoutMs} ms`);
}

export interface StartMinioOptions {
  readonly binary: string;
  readonly port?: number;
  readonly dataDir?: string;
  /** Run MinIO on these CPUs (taskset list, see placement.ts); default: any. */
  readonly cpus?: string;
  /** More `minio server` arguments, e.g. ['--send-buf-size', '262144']. */
  readonly extraArgs?: readonly string[];
}

export async function startMinio(options: StartMinioOptions): Promise<MinioServer> {
  const port = options.port ?? (await freePort());
  const consolePort = await freePort();
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'objectcache-minio-'));
  const accessKey = 'minio-test-admin';
  const secretKey = 'minio-test-secret-key';
  const [command, args] = onCpus(options.cpus, options.binary, [
    'server',
    dataDir,
    '--address',
    `127.0.0.1:${port}`,
    '--console-address',
    `127.0.0.1:${consolePort}`,
    '--quiet',
    ...(options.extraArgs ?? []),
  ]);
  const child = spawn(command, args, {
    env: { ...process.env, MINIO_ROOT_USER: accessKey, MINIO_ROOT_PASSWORD: secretKey, MINIO_BROWSER: 'off', MINIO_UPDATE: 'off', CI: 'true' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const endpoint = `http://127.0.0.1:${port}`;
  try {
    await waitHealthy(endpoint, child, 60_000);
  } catch (error) {
    child.kill('SIGKILL');
    throw new Error(`${(error as Error).message}\n${stderr}`);
  }
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  return {
    endpoint,
    port,
    dataDir,
    accessKey,
    secretKey,
    binary: options.binary,
    process: child,
    stop,
    destroy: async () => {
      await stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** One server process of a distributed MinIO. */
export interface MinioNode {
  readonly endpoint: string;
  readonly port: number;
  readonly process: ChildProcess;
  /** SIGKILL: the node is gone at once, as a crashed machine. */
  kill(): Promise<void>;
  /** Starts the node again with its drives as they were. */
  restart(): Promise<void>;
}

export interface DistributedMinio extends MinioInfo {
  readonly nodes: MinioNode[];
  readonly dataDir: string;
  destroy(): Promise<void>;
}

export interface StartDistributedOptions {
  readonly binary: string;
  /** Server processes (default 4), each on its own loopback port. */
  readonly nodes?: number;
  /** Drives per node (default 2): one erasure set of nodes x drives, MinIO's default parity. */
  readonly drivesPerNode?: number;
}

/**
 * A distributed, erasure-coded MinIO on loopback: `nodes` processes of the pinned build, each
 * listing every drive of every node (`http://127.0.0.1:<port>/<dir>/d<i>`, one pool, one erasure
 * set), as `minio server` runs across machines. Resolves once the cluster has write quorum.
 */
export async function startDistributedMinio(options: StartDistributedOptions): Promise<DistributedMinio> {
  const count = options.nodes ?? 4;
  const drives = options.drivesPerNode ?? 2;
  const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-minio-dist-'));
  const ports: number[] = [];
  for (let i = 0; i < count; i++) ports.push(await freePort());
  const accessKey = 'minio-test-admin';
  const secretKey = 'minio-test-secret-key';
  const endpoints = ports.flatMap((port, n) => Array.from({ length: drives }, (_, d) => `http://127.0.0.1:${port}${join(dataDir, `n${n + 1}`, `d${d + 1}`)}`));
  const env = { ...process.env, MINIO_ROOT_USER: accessKey, MINIO_ROOT_PASSWORD: secretKey, MINIO_BROWSER: 'off', MINIO_UPDATE: 'off', CI: 'true' };
  const launch = async (n: number): Promise<ChildProcess> => {
    const consolePort = await freePort();
    // Where MinIO thinks it runs in a container (/.dockerenv, as on these machines) it waits for
    // loopback peers to resolve elsewhere; _MINIO_SERVER_LOCAL names the process's own endpoint.
    return spawn(options.binary, ['server', '--address', `127.0.0.1:${ports[n]}`, '--console-address', `127.0.0.1:${consolePort}`, '--quiet', ...endpoints], {
      env: { ...env, _MINIO_SERVER_LOCAL: `127.0.0.1:${ports[n]}` },
      stdio: ['ignore', 'ignore', 'ignore'],
    });
  };
  const nodes: MinioNode[] = [];
  for (let n = 0; n < count; n++) {
    let child = await launch(n);
    const endpoint = `http://127.0.0.1:${ports[n]}`;
    const node: MinioNode = {
      endpoint,
      port: ports[n] as number,
      get process() {
        return child;
      },
      async kill() {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise<void>((r) => child.once('exit', () => r()));
        child.kill('SIGKILL');
        await exited;
      },
      async restart() {
        await node.kill();
        child = await launch(n);
        await waitHealthy(endpoint, child, 60_000);
      },
    };
    nodes.push(node);
  }
  const destroy = async (): Promise<void> => {
    await Promise.all(nodes.map((node) => node.kill()));
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    // Every node serving, its erasure set at write quorum.
    for (const node of nodes) await waitHealthy(node.endpoint, node.process, 90_000);
  } catch (error) {
    await destroy();
    throw error;
  }
  return { endpoint: nodes[0]?.endpoint as string, accessKey, secretKey, binary: options.binary, nodes, dataDir, destroy };
}
