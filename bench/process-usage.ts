/**
 * What a benchmark reads about another process (the gateway, MinIO) from /proc on Linux.
 */
import { readFileSync } from 'node:fs';

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
