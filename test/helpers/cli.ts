/**
 * The `objectcache` command as a user runs it (the compiled dist/ build, which the global setup
 * builds first): run it to completion, or start `serve` and wait until it listens.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const CLI = resolve(fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url)));

export interface CliRun {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliOptions {
  /** Environment on top of PATH (nothing else of the test's environment leaks in). */
  readonly env?: NodeJS.ProcessEnv;
  readonly input?: string;
}

export function runCli(args: readonly string[], options: CliOptions = {}): CliRun {
  const result = spawnSync(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'], ...options.env }, input: options.input ?? '', encoding: 'utf8', timeout: 60_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** The same without blocking the test's event loop (for commands that talk to an in-process gateway). */
export function runCliAsync(args: readonly string[], options: CliOptions = {}): Promise<CliRun> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'], ...options.env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (status) => done({ status, stdout, stderr }));
    child.stdin.end(options.input ?? '');
  });
}

export interface ServeProcess {
  readonly child: ChildProcessWithoutNullStreams;
  readonly url: string;
  readonly adminUrl: string;
  /** Every JSON log line so far. */
  readonly lines: Record<string, unknown>[];
  /** SIGTERM, and the exit code once it stopped. */
  stop(): Promise<number | null>;
}

/** Starts `objectcache serve --port 0 --metrics-port 0 ...args` and resolves once it listens. */
export async function startServe(args: readonly string[], env: NodeJS.ProcessEnv): Promise<ServeProcess> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--metrics-port', '0', ...args], { env: { PATH: process.env['PATH'], ...env } });
  const lines: Record<string, unknown>[] = [];
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const listening = await new Promise<Record<string, unknown>>((resolveLine, reject) => {
    let buffered = '';
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
    child.stdout.on('data', (d: Buffer) => {
      buffered += d.toString();
      for (let at = buffered.indexOf('\n'); at !== -1; at = buffered.indexOf('\n')) {
        const line = buffered.slice(0, at);
        buffered = buffered.slice(at + 1);
        let record: Record<string, unknown>;
        try {
          record = JSON.parse(line) as Record<string, unknown>;
        } catch {
          continue;
        }
        lines.push(record);
        if (record['msg'] === 'gateway listening') resolveLine(record);
      }
    });
    void exited.then((code) => reject(new Error(`serve exited with ${code} before listening: ${stderr}`)));
  });
  const stop = async (): Promise<number | null> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    return exited;
  };
  return { child, url: String(listening['url']), adminUrl: String(listening['admin']), lines, stop };
}
