/**
 * What every eviction policy of the capacity benchmark answers (bench/capacity/policies.ts replays
 * a trace against one): a budgeted bucket holding whole chunks of one size.
 */
import type { TraceRequest } from './workload.js';

export interface EvictionPolicy {
  readonly name: string;
  /** Bytes held. */
  readonly bytes: number;
  has(key: string): boolean;
  /** A request begins (its lookup names its keys); `at` is its index in the trace. */
  begin(request: TraceRequest, at: number): void;
  /** A hit chunk is read. */
  read(key: string, at: number): void;
  /** A computed chunk is stored; `pred` is the key before it in the prompt. */
  write(key: string, pred: string | undefined, at: number): void;
  /** Evicts until at most `targetBytes` are held; returns how many chunks went. */
  evict(targetBytes: number): number;
  /** Keys held. */
  keys(): Iterable<string>;
}
