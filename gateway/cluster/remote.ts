/**
 * A serving process's view of the shared state the primary holds (gateway/cluster/coordinator.ts):
 * the same interfaces the data path uses in one process (gateway/pipeline/shared.ts), each call a
 * message to the primary. A call given up (its request's signal aborted) is cancelled there; if
 * its grant was already on its way, it is given back on arrival. When the primary is gone every
 * waiting call fails with a retryable OC_ERR_SCHEDULER_CLOSED and this process shuts down
 * (gateway/cluster/serving.ts).
 */
import { ObjectCacheError } from '../../schemas/errors.js';
import type { Release, SignedBy } from '../admission/admission.js';
import type { LoadRequest, Grant } from '../descriptor-get/scheduler/epoch-scheduler.js';
import type { SharedServices } from '../pipeline/shared.js';
import { fromWire, type CallName, type Calls, type Casts, type ToPrimary, type ToServing } from './messages.js';

/** How a serving process reaches the primary. */
export interface PrimaryChannel {
  send(message: ToPrimary): void;
}

interface Pending {
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
  /** What a grant that arrives after the call was given up must give back. */
  readonly giveBack: (() => void) | undefined;
  abandoned: boolean;
}

function goneError(): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_SCHEDULER_CLOSED', "The gateway's primary process is gone: this serving process is shutting down", { retryable: true });
}

/** Gives back once, whatever calls it later. */
function once(give: () => void): Release {
  let given = false;
  return () => {
    if (given) return;
    given = true;
    give();
  };
}

export class RemoteShared implements SharedServices {
  readonly sources = undefined;
  readonly #channel: PrimaryChannel;
  readonly #pending = new Map<number, Pending>();
  #calls = 0;
  #gateTickets = 0;
  #closed = false;

  constructor(channel: PrimaryChannel, scheduled: boolean) {
    this.#channel = channel;
    this.scheduler = scheduled
      ? {
          schedule: (request: LoadRequest, signal?: AbortSignal) => this.#call('schedule', [{ ...request }], signal, () => this.#cast('scheduled', [request.id])) as Promise<Grant>,
          release: (id: string) => this.#cast('scheduled', [id]),
        }
      : undefined;
  }

  readonly slots = {
    request: async (key: string, by: SignedBy): Promise<Release> => {
      const ticket = await this.#call('request', [key, by]);
      return once(() => this.#cast('release', [ticket]));
    },
    descriptorGet: async (key: string): Promise<Release> => {
      const ticket = await this.#call('descriptorGet', [key]);
      return once(() => this.#cast('release', [ticket]));
    },
  };

  readonly budget = {
    acquire: async (units: number, signal?: AbortSignal): Promise<void> => {
      await this.#call('acquire', [units], signal, () => this.#cast('giveBytes', [units]));
    },
    release: (units: number): void => this.#cast('giveBytes', [units]),
  };

  readonly firstLayers = {
    begin: (): Release => {
      const ticket = ++this.#gateTickets;
      this.#cast('gateBegin', [ticket]);
      return once(() => this.#cast('gateEnd', [ticket]));
    },
    whenClear: (go: () => void): void => {
      // Held back at most the gate's longest hold (the primary's timer); never held by a failure.
      this.#call('whenClear', []).then(go, go);
    },
  };

  readonly scheduler: SharedServices['scheduler'];

  /** Calls waiting for the primary (diagnostics and tests). */
  get waiting(): number {
    return this.#pending.size;
  }

  /** A reply from the primary. */
  receive(message: ToServing): void {
    if (message.oc !== 'reply') return;
    const pending = this.#pending.get(message.id);
    if (!pending) return;
    this.#pending.delete(message.id);
    if (pending.abandoned) {
      if (message.ok) pending.giveBack?.();
      return;
    }
    if (message.ok) pending.resolve(message.value);
    else pending.reject(fromWire(message.error));
  }

  /** The primary is gone (or this process is stopping): every waiting call fails, and later ones too. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const pending of this.#pending.values()) if (!pending.abandoned) pending.reject(goneError());
    this.#pending.clear();
  }

  #cast<K extends keyof Casts>(op: K, args: Casts[K]): void {
    if (this.#closed) return;
    try {
      this.#channel.send({ oc: 'cast', op, args: [...args] });
    } catch {
      this.close();
    }
  }

  #call<K extends CallName>(op: K, args: Calls[K]['args'], signal?: AbortSignal, giveBack?: () => void): Promise<Calls[K]['value']> {
    if (this.#closed) return Promise.reject(goneError());
    if (signal?.aborted) return Promise.reject(signal.reason as unknown);
    const id = ++this.#calls;
    return new Promise<Calls[K]['value']>((resolve, reject) => {
      const onAbort = (): void => {
        const pending = this.#pending.get(id);
        if (!pending || pending.abandoned) return;
        pending.abandoned = true;
        reject(signal?.reason as unknown);
        try {
          this.#channel.send({ oc: 'cancel', id });
        } catch {
          this.close();
        }
      };
      this.#pending.set(id, {
        resolve: (value) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(value);
        },
        reject: (error) => {
          signal?.removeEventListener('abort', onAbort);
          reject(error);
        },
        giveBack,
        abandoned: false,
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        this.#channel.send({ oc: 'call', id, op, args: [...args] });
      } catch {
        this.close();
      }
    });
  }
}
