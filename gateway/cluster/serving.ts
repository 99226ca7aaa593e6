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
import type { WorkerBackend } from '../threads/protocol.js';
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
  /** How its read workers reach the chunks, where not through the backend (the store process's files). */
  readonly workerBackend?: WorkerBackend;
}

/**
 * Serves until SIGTERM or the primary's disconnect; resolves once closed. A start that fails ends
 * the process (the primary sees it exit), and so does a primary that goes while it starts.
 */
export async function runServing(options: ServingOptions): Promise<void> {
  // false from process.send() is back-pressure (the message is queued and delivered), not a
  // closed channel: only a channel that is closed (or a throw) is the primary gone.
  const send = (message: ToPrimary): void => {
    if (!process.connected) throw new Error('the primary process is gone');
    process.send?.(message);
  };
  const remote = new RemoteShared({ send }, options.config.scheduler !== undefined);
  // Asks that come before the gateway listens are answered as by a process with nothing yet.
  const started: { gateway?: Gateway } = {};
  const asks: Record<AskName, (args: unknown[]) => Promise<unknown>> = {
    metrics: async () => (started.gateway ? await started.gateway.metrics.registry.getMetricsAsJSON() : []),
    capacity: async (args) => (started.gateway?.capacity ? await started.gateway.capacity.report(args[0] as number) : null),
    ready: async () => (started.gateway ? await started.gateway.ready() : false),
  };
  const answer = (message: ToPrimary): void => {
    if (process.connected) process.send?.(message);
  };
  process.on('message', (message: unknown) => {
    if (!isOurs(message)) return;
    const m = message as ToServing;
    if (m.oc === 'reply') return remote.receive(m);
    if (m.oc !== 'ask') return;
    const ask = asks[m.op];
    (ask ? ask(m.args) : Promise.reject(new Error(`unknown ask ${String(m.op)}`))).then(
      (value) => answer({ oc: 'answer', id: m.id, ok: true, value }),
      (error: unknown) => answer({ oc: 'answer', id: m.id, ok: false, error: toWire(error) }),
    );
  });
  // The primary gone while this process starts: nothing to finish, so nothing to wait for.
  const goneWhileStarting = (): void => process.exit(1);
  process.once('disconnect', goneWhileStarting);
  let running: Gateway;
  try {
    running = await startGateway(options.config, {
      logger: options.logger,
      shared: remote,
      admin: false,
      role: 'serving process',
      exclusive: false,
      // One process binds the KV events socket; it learns the others' writes from their journals.
      kvEvents: process.env[SERVING_ENV] === '1',
      ...(options.stateKey ? { stateKey: options.stateKey } : {}),
      ...(options.workerBackend ? { workerBackend: options.workerBackend } : {}),
    });
  } catch (error) {
    // The channel would keep this process alive: the primary must see it exit.
    process.off('disconnect', goneWhileStarting);
    if (process.connected) process.disconnect();
    throw error;
  }
  process.off('disconnect', goneWhileStarting);
  started.gateway = running;
  await new Promise<void>((resolve) => {
    const stop = (why: string): void => {
      options.logger.info({ why }, 'serving process stopping');
      running.close().then(resolve, resolve);
    };
    // SIGTERM (the primary stopping): its requests finish, still admitted and budgeted by the primary.
    process.once('SIGTERM', () => stop('SIGTERM'));
    // SIGINT from a terminal reaches the whole group: the primary stops its processes in order.
    process.on('SIGINT', () => {});
    process.once('disconnect', () => {
      // Nothing the primary held can be asked for any more: waiting calls fail, retryably.
      remote.close();
      stop('the primary process is gone');
    });
    if (!process.connected) {
      remote.close();
      stop('the primary process is gone');
    }
  });
  if (process.connected) process.disconnect();
}
