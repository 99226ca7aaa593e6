/**
 * The messages between the primary and its serving processes (docs/architecture.md, section 1),
 * over the cluster's IPC channel. A serving process calls the shared state (`call`, answered by
 * `reply`; `cancel` gives up a call still waiting) or tells it what it gave back (`cast`); the
 * primary asks a serving process for what only it has (`ask`, answered by `answer`). Nothing is
 * thrown across: a failure travels as its code and message.
 */
import { ObjectCacheError, type ErrorCode } from '../../schemas/errors.js';

/** What a serving process asks of the shared state, and what each call resolves to. */
export interface Calls {
  /** A request's place in its key's share: the ticket that gives it back. */
  request: { args: [key: string, by: 'signed' | 'presigned' | 'form']; value: number };
  /** A descriptor GET's slot: the ticket that gives it back. */
  descriptorGet: { args: [key: string]; value: number };
  /** Bytes of the buffered-byte budget, granted in FIFO order. */
  acquire: { args: [units: number]; value: null };
  /** Resolves once no GET waits for its first layer group (or the gate's longest hold passed). */
  whenClear: { args: []; value: null };
  /** The scheduler's grant for a layerwise GET. */
  schedule: { args: [request: { id: string; tenant: string; bytesPerLayer: number; computeMsPerLayer?: number | undefined }]; value: unknown };
}

/** What a serving process tells the shared state, unanswered. */
export interface Casts {
  /** A ticket of `request` or `descriptorGet` given back. */
  release: [ticket: number];
  /** Budget bytes given back. */
  giveBytes: [units: number];
  /** A GET began reading its first layer group (its ticket, chosen by the serving process). */
  gateBegin: [ticket: number];
  gateEnd: [ticket: number];
  /** A scheduled load finished. */
  scheduled: [id: string];
}

/** What the primary asks of one serving process. */
export interface Asks {
  /** Its registry as prom-client's JSON (Registry.getMetricsAsJSON). */
  metrics: { args: []; value: unknown[] };
  /** Its capacity report (`?top=n`), or null without a budget. */
  capacity: { args: [top: number]; value: unknown };
  /** Whether its store answers. */
  ready: { args: []; value: boolean };
}

export type CallName = keyof Calls;
export type AskName = keyof Asks;

/** A failure as it travels. */
export interface WireError {
  readonly code?: string;
  readonly message: string;
  readonly details?: Readonly<Record<string, string | number>>;
  readonly retryable?: boolean;
}

export type ToPrimary =
  | { readonly oc: 'call'; readonly id: number; readonly op: CallName; readonly args: unknown[] }
  | { readonly oc: 'cancel'; readonly id: number }
  | { readonly oc: 'cast'; readonly op: keyof Casts; readonly args: unknown[] }
  | { readonly oc: 'answer'; readonly id: number; readonly ok: boolean; readonly value?: unknown; readonly error?: WireError };

export type ToServing =
  | { readonly oc: 'reply'; readonly id: number; readonly ok: boolean; readonly value?: unknown; readonly error?: WireError }
  | { readonly oc: 'ask'; readonly id: number; readonly op: AskName; readonly args: unknown[] };

/** Whether `message` is one of ours (the channel also carries Node's own cluster messages). */
export function isOurs(message: unknown): message is { oc: string } {
  return typeof message === 'object' && message !== null && typeof (message as { oc?: unknown }).oc === 'string';
}

export function toWire(error: unknown): WireError {
  if (error instanceof ObjectCacheError) return { code: error.code, message: error.message, details: error.details, retryable: error.retryable };
  return { message: error instanceof Error ? error.message : String(error) };
}

export function fromWire(error: WireError | undefined): Error {
  if (error?.code !== undefined) {
    return new ObjectCacheError(error.code as ErrorCode, error.message, {
      ...(error.details ? { details: error.details } : {}),
      ...(error.retryable === undefined ? {} : { retryable: error.retryable }),
    });
  }
  return new Error(error?.message ?? 'the primary process failed the call');
}
