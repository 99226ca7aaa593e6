/**
 * One serving process of several (gateway/cluster/primary.ts forks them): a whole gateway on the
 * shared S3 port, whose admission slots, byte budget, first-layer gate and scheduler are the
 * primary's (gateway/cluster/remote.ts), and whose admin port is the primary's. It answers the
 * primary's asks (its metrics, capacity report, readiness), stops on SIGTERM, and stops when the
 * primary is gone.
 */
import type { GatewayConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { StateKey } from '../common/state-key.js';
import { startGateway, type Gateway } from '../pipeline/server.js';
import { isOurs, toWire, type AskName, type ToPrimary, type ToServing } from './messages.js';
import { RemoteShared } from './remote.js';

/** Environment the primary gives each serving process: its number (from 1). */
export const SERVING_ENV = 'OBJECTCACHE_SERVING_PROCESS';

export interface ServingOptions {
  readonly config: GatewayConfig;
  readonly logger: Logger;
  /** The state key, where the store this process reads is the primary's store process (gateway/cluster/store-process.ts). */
  readonly stateKey?: StateKey;
}

/** Serves until SIGTERM or the primary's disconnect; resolves once closed. */
export async function runServing(options: ServingOptions): Promise<void> {
  const send = (message: ToPrimary): void => {
    if (!process.send?.(message)) throw new Error('the primary process is gone');
  };
  const remote = new RemoteShared({ send }, options.config.scheduler !== undefined);
  // Asks that come before the gateway listens are answered as by a process with nothing yet.
  const started: { gateway?: Gateway } = {};
  const asks: Record<AskName, (args: unknown[]) => Promise<unknown>> = {
    metrics: async () => (started.gateway ? await started.gateway.metrics.registry.getMetricsAsJSON() : []),
    capacity: async (args) => (started.gateway?.capacity ? await started.gateway.capacity.report(args[0] as number) : null),
    ready: async () => (started.gateway ? await started.gateway.ready() : false),
  };
  process.on('message', (message: unknown) => {
    if (!isOurs(message)) return;
    const m = message as ToServing;
    if (m.oc === 'reply') return remote.receive(m);
    if (m.oc !== 'ask') return;
    const ask = asks[m.op];
    (ask ? ask(m.args) : Promise.reject(new Error(`unknown ask ${String(m.op)}`))).then(
      (value) => process.send?.({ oc: 'answer', id: m.id, ok: true, value } satisfies ToPrimary),
      (error: unknown) => process.send?.({ oc: 'answer', id: m.id, ok: false, error: toWire(error) } satisfies ToPrimary),
    );
  });
  const running = await startGateway(options.config, {
    logger: options.logger,
    shared: remote,
    admin: false,
    role: 'serving process',
    exclusive: false,
    ...(options.stateKey ? { stateKey: options.stateKey } : {}),
  });
  started.gateway = running;
  await new Promise<void>((resolve) => {
    const stop = (why: string): void => {
      options.logger.info({ why }, 'serving process stopping');
      remote.close();
      running.close().then(resolve, resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    // SIGINT from a terminal reaches the whole group: the primary stops its processes in order.
    process.on('SIGINT', () => {});
    process.once('disconnect', () => stop('the primary process is gone'));
  });
  // The channel to the primary would keep this process alive.
  if (process.connected) process.disconnect();
}
