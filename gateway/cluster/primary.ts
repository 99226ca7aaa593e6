/**
 * `objectcache serve --processes N` (N > 1): the primary process. It serves no S3 request itself.
 * It holds what the serving processes share (gateway/pipeline/shared.ts, answered by
 * gateway/cluster/coordinator.ts), forks the N serving processes on the one S3 port (node:cluster
 * hands each new connection to the next process in turn), serves the admin port with one view of
 * them all (metrics summed by prom-client's AggregatorRegistry), and replaces a serving process
 * that dies. On the embedded store it first starts the store process
 * (gateway/cluster/store-process.ts). Why processes, and what a crash does: docs/architecture.md,
 * section 1.
 */
import cluster, { type Worker } from 'node:cluster';
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { AggregatorRegistry, collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import { isLoopback, type GatewayConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import { registerSharedGauges } from '../common/metrics.js';
import { startAdminServer, type AdminServer } from '../pipeline/admin.js';
import { createShared } from '../pipeline/shared.js';
import { Coordinator } from './coordinator.js';
import { fromWire, isOurs, type AskName, type Asks, type ToPrimary, type ToServing } from './messages.js';
import { SERVING_ENV } from './serving.js';
import { STORE_ENV, STORE_URL_ENV } from './store-process.js';

/** How long the primary waits for a serving process's answer (metrics, capacity, readiness). */
const ASK_TIMEOUT_MS = 5_000;
/** How long stopping waits for the serving processes to finish their requests before killing them. */
const STOP_GRACE_MS = 10_000;
/** A process that dies sooner than this after it started is replaced after a pause (no tight crash loop). */
const QUICK_EXIT_MS = 10_000;
const RESTART_PAUSE_MS = 1_000;
/** How long the serving processes have to listen at start-up. */
const START_TIMEOUT_MS = 120_000;

export interface Primary {
  /** `http://host:port` of the S3 port the serving processes share. */
  readonly url: string;
  readonly adminUrl: string;
  stop(): Promise<void>;
}

interface Serving {
  readonly index: number;
  readonly worker: Worker;
  readonly started: number;
  listening: boolean;
}

function urlOf(address: { address: string; port: number; addressType?: number | string }): string {
  const host = address.address.includes(':') ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

/** Starts the store process (embedded store) and resolves with its URL, or rejects if it exits first. */
async function startStore(): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(process.argv[1] as string, process.argv.slice(2), { env: { ...process.env, [STORE_ENV]: '1' }, execArgv: process.execArgv, stdio: 'inherit' });
  const url = await new Promise<string>((resolve, reject) => {
    child.on('message', (message: unknown) => {
      if (isOurs(message) && message.oc === 'store') resolve((message as unknown as { url: string }).url);
    });
    child.once('exit', (code, signal) => reject(new Error(`the store process exited before it listened (code ${code}, signal ${signal})`)));
  });
  return { child, url };
}

export async function startPrimary(config: GatewayConfig, logger: Logger): Promise<Primary> {
  const n = config.processes;
  const store = config.backend.kind === 'local' ? await startStore() : undefined;
  const shared = createShared(config);
  const coordinator = new Coordinator(shared);
  const own = new Registry();
  collectDefaultMetrics({ register: own, prefix: 'objectcache_process_' });
  registerSharedGauges(own, shared.sources);
  const restarts = new Counter({ name: 'objectcache_serving_process_restarts_total', help: 'Serving processes that died and were replaced.', registers: [own] });
  const servingProcesses: Serving[] = [];
  new Gauge({
    name: 'objectcache_serving_process_layerwise_requests',
    help: 'Layerwise and chunkwise GETs each serving process is serving, by its number (how connections spread).',
    labelNames: ['process'] as const,
    registers: [own],
    collect() {
      this.reset();
      for (const s of servingProcesses) if (s.listening) this.set({ process: String(s.index) }, coordinator.held(s.worker.id)?.descriptorGets ?? 0);
    },
  });
  new Gauge({
    name: 'objectcache_serving_processes',
    help: 'Serving processes listening on the S3 port (--processes).',
    registers: [own],
    collect() {
      this.set(servingProcesses.filter((s) => s.listening).length);
    },
  });

  /**
   * Each process's last metrics, and the counters and histograms of the processes that are gone
   * (their last answer, folded into one): summed with the live ones, so that a counter never
   * goes back when a process is replaced.
   */
  const lastMetrics = new Map<number, unknown[]>();
  let retired: object[] = [];
  /** Folds in order (two processes that go together both count), never failing a scrape. */
  let retiring = Promise.resolve();
  function retire(workerId: number): void {
    const last = lastMetrics.get(workerId);
    lastMetrics.delete(workerId);
    if (!last) return;
    const kept = last.filter((m) => ['counter', 'histogram'].includes(String((m as { type?: unknown }).type)));
    retiring = retiring
      .then(async () => {
        retired = [await AggregatorRegistry.aggregate([...retired, kept]).getMetricsAsJSON()];
      })
      .catch((error: unknown) => logger.warn({ error }, "a gone serving process's counters could not be kept"));
  }

  // Answers to the primary's asks, by id.
  let asks = 0;
  const answers = new Map<number, { resolve: (value: unknown) => void; reject: (error: unknown) => void }>();
  function ask<K extends AskName>(serving: Serving, op: K, args: Asks[K]['args']): Promise<Asks[K]['value']> {
    const id = ++asks;
    return new Promise<Asks[K]['value']>((resolve, reject) => {
      const timer = setTimeout(() => {
        answers.delete(id);
        reject(new Error(`serving process ${serving.index} did not answer ${op} within ${ASK_TIMEOUT_MS} ms`));
      }, ASK_TIMEOUT_MS);
      answers.set(id, {
        resolve: (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      // false from send() is back-pressure (a connection being handed over first), not a closed channel.
      if (!serving.worker.isConnected()) {
        answers.delete(id);
        clearTimeout(timer);
        reject(new Error(`serving process ${serving.index} is gone`));
        return;
      }
      serving.worker.send({ oc: 'ask', id, op, args: [...args] } satisfies ToServing);
    });
  }

  let stopping = false;
  let started = false;
  let startFailure: ((error: Error) => void) | undefined;
  let allListening: (() => void) | undefined;
  let address = '';

  cluster.setupPrimary({ serialization: 'advanced' });

  function spawn(index: number): Serving {
    const worker = cluster.fork({ [SERVING_ENV]: String(index), ...(store ? { [STORE_URL_ENV]: store.url } : {}) });
    const serving: Serving = { index, worker, started: Date.now(), listening: false };
    servingProcesses[index - 1] = serving;
    coordinator.join(worker.id, { send: (message) => void (worker.isConnected() && worker.send(message)) });
    worker.on('message', (message: unknown) => {
      if (!isOurs(message)) return;
      const m = message as ToPrimary;
      if (m.oc === 'answer') {
        const waiting = answers.get(m.id);
        answers.delete(m.id);
        if (m.ok) waiting?.resolve(m.value);
        else waiting?.reject(fromWire(m.error));
        return;
      }
      coordinator.receive(worker.id, m);
    });
    worker.on('listening', (at) => {
      serving.listening = true;
      address = urlOf({ address: at.address ?? config.host, port: at.port });
      if (servingProcesses.filter((s) => s.listening).length === n) allListening?.();
    });
    worker.on('exit', (code, signal) => {
      serving.listening = false;
      coordinator.leave(worker.id);
      retire(worker.id);
      if (stopping) return;
      if (!started) {
        startFailure?.(new Error(`serving process ${index} exited before it listened (code ${code}, signal ${signal})`));
        return;
      }
      restarts.inc();
      const pause = Date.now() - serving.started < QUICK_EXIT_MS ? RESTART_PAUSE_MS : 0;
      logger.error({ process: index, pid: worker.process.pid, code, signal, restartInMs: pause }, 'serving process exited; its requests failed and a new one takes its place');
      setTimeout(() => {
        if (!stopping) spawn(index);
      }, pause).unref();
    });
    return serving;
  }

  store?.child.once('exit', (code, signal) => {
    if (stopping) return;
    logger.fatal({ code, signal }, 'the store process exited: the gateway stops');
    void stop().finally(() => process.exit(1));
  });

  let admin: AdminServer | undefined;
  async function stop(): Promise<void> {
    stopping = true;
    shared.close();
    const exits = servingProcesses.filter((s) => !s.worker.isDead()).map((s) => once(s.worker, 'exit'));
    for (const s of servingProcesses) if (!s.worker.isDead()) s.worker.process.kill('SIGTERM');
    const killer = setTimeout(() => {
      for (const s of servingProcesses) if (!s.worker.isDead()) s.worker.process.kill('SIGKILL');
    }, STOP_GRACE_MS);
    await Promise.all(exits);
    clearTimeout(killer);
    if (store && store.child.exitCode === null && store.child.signalCode === null) {
      const exited = once(store.child, 'exit');
      store.child.kill('SIGTERM');
      await exited;
    }
    await admin?.close();
  }

  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the serving processes did not all listen within ${START_TIMEOUT_MS / 1000} s`)), START_TIMEOUT_MS);
      allListening = () => {
        clearTimeout(timer);
        resolve();
      };
      startFailure = (error) => {
        clearTimeout(timer);
        reject(error);
      };
      for (let i = 1; i <= n; i++) spawn(i);
    });
    started = true;
    const live = (): Serving[] => servingProcesses.filter((s) => s.listening && s.worker.isConnected());
    admin = await startAdminServer({
      host: config.metricsHost,
      port: config.metricsPort,
      registry: {
        contentType: own.contentType,
        async metrics() {
          // A process that does not answer in time counts with its last answer.
          const each = await Promise.all(
            live().map((s) =>
              ask(s, 'metrics', []).then(
                (json) => (lastMetrics.set(s.worker.id, json), json),
                () => lastMetrics.get(s.worker.id) ?? [],
              ),
            ),
          );
          await retiring;
          const all: object[] = [await own.getMetricsAsJSON(), ...each, ...retired];
          return AggregatorRegistry.aggregate(all).metrics();
        },
      },
      // Ready while any process serves (one being replaced leaves the port to the others).
      ready: async () => {
        const serving = live()[0];
        return serving !== undefined && ask(serving, 'ready', []);
      },
      ...(config.capacity
        ? {
            // Each process's view of the same store: the lease holder's, whose trims they follow.
            capacity: async (top: number) => {
              const reports = (await Promise.all(live().map((s) => ask(s, 'capacity', [top]).catch(() => null)))).filter((r) => r !== null);
              if (reports.length === 0) throw new Error('no serving process answered');
              return reports.find((r) => (r as { leader?: boolean }).leader === true) ?? reports[0];
            },
          }
        : {}),
      token: config.adminToken,
      loopback: isLoopback(config.metricsHost),
    });
  } catch (error) {
    await stop();
    throw error;
  }
  logger.info({ url: address, admin: admin.url, processes: n, backend: store ? `embedded store (store process ${store.url})` : config.backend.kind }, 'gateway listening');
  return { url: address, adminUrl: admin.url, stop };
}
