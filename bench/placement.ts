/**
 * Where a benchmark's processes run. On a real deployment the inference node (the load
 * generator here), the gateway and the object store are different machines; on one machine they
 * compete for the same cores, and the benchmark measures that contention more than the product.
 * `pinned` gives the gateway the last core to itself and puts MinIO and the load generator on the
 * others (`taskset`, inherited by every thread the processes start later); `store-apart` gives
 * MinIO the last core to itself and puts the gateway and the load generator on the others (the
 * store's cost per byte without the gateway's contention, as a store on machines of its own
 * would see); `shared` lets every process use every core. Pinning needs Linux's `taskset` and at
 * least two cores; without them the placement falls back to `shared` and says so.
 */
import { execFileSync } from 'node:child_process';
import { cpus } from 'node:os';

export type PlacementMode = 'pinned' | 'store-apart' | 'shared';

export const PLACEMENT_MODES: readonly PlacementMode[] = ['pinned', 'store-apart', 'shared'];

export interface Placement {
  readonly mode: PlacementMode;
  /** CPU list for the gateway process (taskset syntax), when pinned. */
  readonly gatewayCpus?: string;
  /** CPU list for the load generator (this process), when pinned. */
  readonly othersCpus?: string;
  /** CPU list for MinIO, when pinned. */
  readonly storeCpus?: string;
  /** One line for the report. */
  readonly description: string;
}

function hasTaskset(): boolean {
  try {
    execFileSync('taskset', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export function choosePlacement(requested: PlacementMode): Placement {
  const count = cpus().length;
  if (requested === 'shared') return { mode: 'shared', description: `shared: every process on all ${count} cores` };
  if (count < 2 || process.platform !== 'linux' || !hasTaskset()) {
    return { mode: 'shared', description: `shared (pinning asked for, but it needs Linux taskset and 2 cores; this machine: ${process.platform}, ${count} cores)` };
  }
  const last = String(count - 1);
  const rest = count === 2 ? '0' : `0-${count - 2}`;
  if (requested === 'store-apart')
    return {
      mode: 'store-apart',
      storeCpus: last,
      gatewayCpus: rest,
      othersCpus: rest,
      description: `store apart: MinIO on CPU ${last}; the gateway and the load generator on CPU ${rest}`,
    };
  return { mode: 'pinned', gatewayCpus: last, othersCpus: rest, storeCpus: rest, description: `pinned: gateway on CPU ${last}; MinIO and the load generator on CPU ${rest}` };
}

/** `command args` run on `cpuList` (through taskset), or as they are without a list. */
export function onCpus(cpuList: string | undefined, command: string, args: readonly string[]): [string, string[]] {
  return cpuList === undefined ? [command, [...args]] : ['taskset', ['-c', cpuList, command, ...args]];
}

/** Moves this process, every thread of it, onto `cpuList`. */
export function pinThisProcess(cpuList: string): void {
  execFileSync('taskset', ['-a', '-p', '-c', cpuList, String(process.pid)], { stdio: 'ignore' });
}
