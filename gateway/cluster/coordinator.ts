/**
 * The primary's side of the shared state: it answers each serving process's calls on the one
 * `LocalShared` (gateway/pipeline/shared.ts) and keeps a ledger of what each process holds, so
 * that a process that dies gives back everything it held (slots, budget bytes, first-layer
 * tickets, scheduled rates) and its waiting calls leave their queues: the other processes'
 * requests go on as if its requests had ended.
 */
import type { Release } from '../admission/admission.js';
import type { LocalShared } from '../pipeline/shared.js';
import { toWire, type CallName, type Casts, type ToPrimary, type ToServing } from './messages.js';

/** One serving process as the coordinator sees it: how to reach it. */
export interface ServingChannel {
  /** Sends a message; does nothing (or throws) when the process is gone, whose exit then gives back what it held. */
  send(message: ToServing): void;
}

/** What one serving process holds. */
class Ledger {
  readonly tickets = new Map<number, Release>();
  /** The tickets that are descriptor GETs' slots. */
  readonly descriptorGets = new Set<number>();
  readonly gate = new Map<number, Release>();
  readonly scheduled = new Set<string>();
  /** Calls waiting (budget bytes, a schedule, the gate), by call id. */
  readonly waiting = new Map<number, AbortController>();
  bytes = 0;
  /** The process left: a grant that comes after is given straight back. */
  gone = false;
  constructor(readonly channel: ServingChannel) {}
}

export class Coordinator {
  readonly #shared: LocalShared;
  readonly #processes = new Map<number, Ledger>();
  #tickets = 0;

  constructor(shared: LocalShared) {
    this.#shared = shared;
  }

  /** A serving process joined (before its first message). */
  join(id: number, channel: ServingChannel): void {
    this.#processes.set(id, new Ledger(channel));
  }

  /** What the process `id` holds: budget bytes, request and layerwise slots, first-layer tickets, scheduled loads, waiting calls. */
  held(id: number): { bytes: number; requests: number; descriptorGets: number; gate: number; scheduled: number; waiting: number } | undefined {
    const l = this.#processes.get(id);
    return (
      l && {
        bytes: l.bytes,
        requests: l.tickets.size - l.descriptorGets.size,
        descriptorGets: l.descriptorGets.size,
        gate: l.gate.size,
        scheduled: l.scheduled.size,
        waiting: l.waiting.size,
      }
    );
  }

  /** The serving process `id` is gone: everything it held goes back, its waiting calls leave their queues. */
  leave(id: number): void {
    const l = this.#processes.get(id);
    if (!l) return;
    this.#processes.delete(id);
    l.gone = true;
    for (const controller of l.waiting.values()) controller.abort(new Error('the serving process is gone'));
    for (const release of l.tickets.values()) release();
    for (const end of l.gate.values()) end();
    for (const scheduled of l.scheduled) this.#shared.scheduler?.release(scheduled);
    if (l.bytes > 0) this.#shared.budget.release(l.bytes);
  }

  /** A message from the serving process `id`. */
  receive(id: number, message: ToPrimary): void {
    const l = this.#processes.get(id);
    if (!l) return;
    switch (message.oc) {
      case 'call':
        this.#call(id, l, message.id, message.op, message.args);
        return;
      case 'cancel':
        l.waiting.get(message.id)?.abort(new Error('cancelled'));
        return;
      case 'cast':
        this.#cast(id, l, message.op, message.args);
        return;
      default:
        return; // answers to asks are the primary's (gateway/cluster/primary.ts)
    }
  }

  #reply(l: Ledger, id: number, outcome: { ok: true; value: unknown } | { ok: false; error: unknown }): void {
    const message: ToServing = outcome.ok ? { oc: 'reply', id, ok: true, value: outcome.value } : { oc: 'reply', id, ok: false, error: toWire(outcome.error) };
    try {
      l.channel.send(message);
    } catch {
      // The process is going; its exit gives back what it holds.
    }
  }

  #call(process: number, l: Ledger, id: number, op: CallName, args: unknown[]): void {
    const s = this.#shared;
    try {
      switch (op) {
        case 'request':
        case 'descriptorGet': {
          const release = op === 'request' ? s.slots.request(args[0] as string, args[1] as 'signed') : s.slots.descriptorGet(args[0] as string);
          const ticket = ++this.#tickets;
          l.tickets.set(ticket, release);
          if (op === 'descriptorGet') l.descriptorGets.add(ticket);
          return this.#reply(l, id, { ok: true, value: ticket });
        }
        case 'acquire': {
          const units = args[0] as number;
          if (!(Number.isSafeInteger(units) && units > 0)) throw new RangeError('budget units must be a positive integer');
          return this.#wait(
            l,
            id,
            (signal) => s.budget.acquire(units, signal),
            () => (l.bytes += units),
            () => s.budget.release(units),
          );
        }
        case 'schedule': {
          const scheduler = s.scheduler;
          if (!scheduler) throw new Error('no bandwidth cap is set');
          const request = args[0] as { id: string; tenant: string; bytesPerLayer: number; computeMsPerLayer?: number };
          // Request ids are each process's own: the ledger's key names the process too.
          const scoped = `${process}:${request.id}`;
          return this.#wait(
            l,
            id,
            (signal) => scheduler.schedule({ ...request, id: scoped }, signal),
            () => l.scheduled.add(scoped),
            () => scheduler.release(scoped),
          );
        }
        case 'whenClear':
          return this.#wait(
            l,
            id,
            () => new Promise<null>((resolve) => s.firstLayers.whenClear(() => resolve(null))),
            () => {},
            () => {},
          );
        default:
          throw new Error(`unknown call ${String(op)}`);
      }
    } catch (error) {
      this.#reply(l, id, { ok: false, error });
    }
  }

  /**
   * A call that may wait: answered when `start` settles. What it grants is entered in the ledger
   * (`held`), or given straight back (`undo`) when the process left meanwhile. A process that gave
   * the call up after the grant was sent gives it back itself (gateway/cluster/remote.ts).
   */
  #wait<T>(l: Ledger, id: number, start: (signal: AbortSignal) => Promise<T>, held: () => void, undo: () => void): void {
    const controller = new AbortController();
    l.waiting.set(id, controller);
    start(controller.signal).then(
      (value) => {
        l.waiting.delete(id);
        if (l.gone) return undo();
        held();
        this.#reply(l, id, { ok: true, value: value ?? null });
      },
      (error: unknown) => {
        l.waiting.delete(id);
        this.#reply(l, id, { ok: false, error });
      },
    );
  }

  #cast(process: number, l: Ledger, op: keyof Casts, args: unknown[]): void {
    switch (op) {
      case 'release': {
        const ticket = args[0] as number;
        l.tickets.get(ticket)?.();
        l.tickets.delete(ticket);
        l.descriptorGets.delete(ticket);
        return;
      }
      case 'giveBytes': {
        // Never more than the process holds: a confused or hostile process cannot free others' bytes.
        const units = Math.min(Math.max(0, Number(args[0]) || 0), l.bytes);
        l.bytes -= units;
        this.#shared.budget.release(units);
        return;
      }
      case 'gateBegin': {
        const ticket = args[0] as number;
        if (!l.gate.has(ticket)) l.gate.set(ticket, this.#shared.firstLayers.begin());
        return;
      }
      case 'gateEnd': {
        const ticket = args[0] as number;
        l.gate.get(ticket)?.();
        l.gate.delete(ticket);
        return;
      }
      case 'scheduled': {
        const scoped = `${process}:${String(args[0])}`;
        if (l.scheduled.delete(scoped)) this.#shared.scheduler?.release(scoped);
        return;
      }
      default:
        return;
    }
  }
}
