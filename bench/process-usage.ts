/**
 * What a benchmark reads about another process (the gateway, MinIO) from /proc on Linux.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';

/** CPU seconds (user + system), resident and peak resident bytes of a process, from /proc (Linux). */
export function processUsage(pid: number): { cpuSeconds: number; rssBytes: number; peakRssBytes: number } {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kB = (name: string): number => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN) * 1024;
    // USER_HZ is 100 on Linux.
    return { cpuSeconds: (Number(fields[11]) + Number(fields[12])) / 100, rssBytes: kB('VmRSS'), peakRssBytes: kB('VmHWM') };
  } catch {
    return { cpuSeconds: NaN, rssBytes: NaN, peakRssBytes: NaN };
  }
}

/**
 * A process and every process below it (a gateway of several serving processes: its primary, the
 * serving processes and the store process), from the parent ids in /proc (Linux).
 */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const parent = Number(readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]?.split(' ')[1]);
      children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const visit = (p: number): void => {
    out.push(p);
    for (const child of children.get(p) ?? []) visit(child);
  };
  visit(pid);
  return out;
}

/** CPU-seconds per GiB of every process of a benchmark (the load generator is `client`). */
export type CpuPerGiB = Record<string, number>;

/**
 * Measures the CPU every process spends on one measured interval: start it, run the work, then
 * call the returned function with the bytes delivered. The load generator's own CPU (this
 * process, every thread) is `client`; the others come from /proc.
 */
export function cpuMeter(pids: Readonly<Record<string, number | readonly number[]>>): (bytes: number) => CpuPerGiB {
  // A name may stand for several processes (the servers of a distributed MinIO): their sum.
  const cpuOf = (pid: number | readonly number[]): number => (typeof pid === 'number' ? processUsage(pid).cpuSeconds : pid.reduce((sum, p) => sum + processUsage(p).cpuSeconds, 0));
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuOf(pid)]));
  const self = process.cpuUsage();
  return (bytes) => {
    const gib = bytes / 1024 ** 3;
    const used = process.cpuUsage(self);
    const out: CpuPerGiB = { client: (used.user + used.system) / 1e6 / gib };
    for (const [name, pid] of Object.entries(pids)) out[name] = (cpuOf(pid) - (before[name] ?? 0)) / gib;
    return out;
  };
}

/** CPU-seconds (user, system) of each thread of a process, by thread id, with its name (Linux). */
function threadUsage(pid: number): Map<number, { name: string; user: number; system: number }> {
  const out = new Map<number, { name: string; user: number; system: number }>();
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
      out.set(Number(tid), { name, user: Number(fields[11]) / 100, system: Number(fields[12]) / 100 });
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/** Where a gateway process spent its CPU, per GiB: its main thread (user, system) and its other threads by name. */
export interface ThreadCpuPerGiB {
  readonly main: { readonly user: number; readonly system: number };
  /** Other threads by name (Node's worker threads, libuv's pool, V8's helpers), user + system. */
  readonly others: Readonly<Record<string, number>>;
}

/**
 * Measures the CPU of each thread of `pid` over one interval, as cpuMeter does for processes:
 * the main thread (the one that serves every request, so the part one core bounds) apart from the
 * others. Threads that ended during the interval are not counted.
 */
export function threadCpuMeter(pids: number | readonly number[]): (bytes: number) => ThreadCpuPerGiB {
  // Several processes (a gateway's serving processes): their main threads summed, and their others by name.
  const all = typeof pids === 'number' ? [pids] : pids;
  const before = all.map((pid) => threadUsage(pid));
  return (bytes) => {
    const gib = bytes / 1024 ** 3;
    const main = { user: 0, system: 0 };
    const others: Record<string, number> = {};
    all.forEach((pid, i) => {
      for (const [tid, now] of threadUsage(pid)) {
        const was = before[i]?.get(tid) ?? { user: 0, system: 0 };
        const user = (now.user - was.user) / gib;
        const system = (now.system - was.system) / gib;
        if (tid === pid) {
          main.user += user;
          main.system += system;
        } else others[now.name] = (others[now.name] ?? 0) + user + system;
      }
    });
    return { main, others };
  };
}

/** `main 0.52 (user 0.20, system 0.32); node 0.61, libuv-worker 0.01` */
export function formatThreads(t: ThreadCpuPerGiB): string {
  const others = Object.entries(t.others)
    .filter(([, v]) => v >= 0.005)
    .sort((a, b) => b[1] - a[1])
    .map(([name, v]) => `${name} ${v.toFixed(2)}`)
    .join(', ');
  return `main thread ${(t.main.user + t.main.system).toFixed(2)} (user ${t.main.user.toFixed(2)}, system ${t.main.system.toFixed(2)}); other threads ${others || 'none'}`;
}

/**
 * The CPU-sum model: on a machine of `cores` cores shared by every process of the path, GB/s is
 * about cores / (the sum of their CPU-seconds per GiB), converted to GB/s.
 */
export function predictedGBps(cpu: CpuPerGiB, cores: number): number {
  const sum = Object.values(cpu).reduce((a, b) => a + (Number.isFinite(b) ? b : 0), 0);
  return sum > 0 ? (cores / sum) * (1024 ** 3 / 1e9) : NaN;
}

/** `client 0.41, gateway 0.93, minio 1.20 (sum 2.54) -> 0.85 GB/s predicted` */
export function formatCpu(cpu: CpuPerGiB, cores: number): string {
  const sum = Object.values(cpu).reduce((a, b) => a + b, 0);
  return `CPU s/GiB ${Object.entries(cpu)
    .map(([name, v]) => `${name} ${v.toFixed(2)}`)
    .join(', ')} (sum ${sum.toFixed(2)}) -> ${predictedGBps(cpu, cores).toFixed(2)} GB/s predicted`;
}

/** Kernel memory of TCP socket buffers, machine-wide, from /proc/net/sockstat (pages of 4 KiB). */
export function tcpSocketBytes(): number {
  try {
    const line =
      readFileSync('/proc/net/sockstat', 'utf8')
        .split('\n')
        .find((l) => l.startsWith('TCP:')) ?? '';
    return Number(/ mem (\d+)/.exec(line)?.[1] ?? NaN) * 4096;
  } catch {
    return NaN;
  }
}

/**
 * Samples a process's resident memory and the kernel's TCP socket memory every `intervalMs`
 * while work runs: `stop()` gives the resident bytes when it started, the highest resident bytes
 * (the kernel's VmHWM, reset at the start through /proc/PID/clear_refs where allowed, so it also
 * catches peaks between samples) and the highest TCP socket memory.
 */
export function memoryWatch(
  pids: number | readonly number[],
  intervalMs = 50,
): { stop(): { idleRssBytes: number; peakRssBytes: number; peakTcpBytes: number; idleTcpBytes: number } } {
  // Several processes (a gateway's serving processes): resident bytes summed; the kernel's peak of
  // each (VmHWM) summed is at least the peak of the sum, so it counts only with one process.
  const all = typeof pids === 'number' ? [pids] : pids;
  let resetPeak = all.length === 1;
  try {
    if (resetPeak) writeFileSync(`/proc/${all[0]}/clear_refs`, '5');
  } catch {
    resetPeak = false; // not permitted here: sampled maxima only
  }
  const usage = (): { rssBytes: number; peakRssBytes: number } =>
    all
      .map((pid) => processUsage(pid))
      .reduce((sum, u) => ({ rssBytes: sum.rssBytes + u.rssBytes, peakRssBytes: sum.peakRssBytes + u.peakRssBytes }), { rssBytes: 0, peakRssBytes: 0 });
  const idle = usage();
  const idleTcpBytes = tcpSocketBytes();
  let peakRss = idle.rssBytes;
  let peakTcp = idleTcpBytes;
  const timer = setInterval(() => {
    peakRss = Math.max(peakRss, usage().rssBytes);
    peakTcp = Math.max(peakTcp, tcpSocketBytes());
  }, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      const now = usage();
      const peakRssBytes = Math.max(peakRss, now.rssBytes, resetPeak ? now.peakRssBytes : 0);
      return { idleRssBytes: idle.rssBytes, peakRssBytes, peakTcpBytes: Math.max(peakTcp, tcpSocketBytes()), idleTcpBytes };
    },
  };
}
