/**
 * What every serving process of one gateway must see as one (docs/architecture.md, section 1):
 * the admission slots and keys' shares, the buffered-byte budget, the first-layer gate and the
 * bandwidth scheduler. One process makes them here (`createShared`); with several, the primary
 * makes them here and the serving processes reach them through gateway/cluster/remote.ts.
 */
import { KeyLimits, SharedSlots, type AdmissionSlots } from '../admission/admission.js';
import type { GatewayConfig } from '../common/config.js';
import { FifoBudget, type ByteBudget } from '../common/fifo-budget.js';
import type { SharedSources } from '../common/metrics.js';
import { FirstLayerGate, type FirstLayers } from '../descriptor-get/first-layer-gate.js';
import { EpochScheduler, type Scheduling } from '../descriptor-get/scheduler/epoch-scheduler.js';

export interface SharedServices {
  readonly slots: AdmissionSlots;
  readonly budget: ByteBudget;
  readonly firstLayers: FirstLayers;
  /** Undefined when --cap is unlimited. */
  readonly scheduler: Scheduling | undefined;
  /** What the shared gauges read, where the state lives in this process; undefined where it is the primary's. */
  readonly sources: SharedSources | undefined;
  /** Refuses the GETs still waiting for the scheduler (shutting down). */
  close(): void;
}

/** The shared state itself, as the one process (or the primary) holds it. */
export interface LocalShared extends SharedServices {
  readonly slots: SharedSlots;
  readonly budget: FifoBudget;
  readonly firstLayers: FirstLayerGate;
  readonly scheduler: EpochScheduler | undefined;
  readonly sources: SharedSources;
}

export function createShared(config: GatewayConfig): LocalShared {
  const lw = config.descriptorGet;
  const budget = new FifoBudget(lw.maxBufferedBytes);
  // Per-key shares of requests and layerwise slots (backend connections are each process's own).
  const slots = new SharedSlots(new KeyLimits(config.limits), lw.maxDescriptorGets, budget);
  const scheduler = config.scheduler ? new EpochScheduler(config.scheduler) : undefined;
  return {
    slots,
    budget,
    firstLayers: new FirstLayerGate(),
    scheduler,
    sources: { bufferedBytes: () => budget.used, scheduler: () => scheduler?.snapshot(), activeLayerwise: () => slots.descriptorGets },
    close: () => scheduler?.close(),
  };
}
