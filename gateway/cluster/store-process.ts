/**
 * The embedded store under several serving processes. One process owns a data directory (its
 * lock and in-memory key index, gateway/stores/embedded/local-store.ts), so with --processes
 * above 1 the primary starts one store process that owns it and serves it as S3 on a loopback
 * port, signed with the administrator's key; the serving processes reach it as they would reach
 * MinIO (docs/architecture.md, section 1).
 */
import type { BackendConfig, ClientCredential, GatewayConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import { startGateway } from '../pipeline/server.js';

/** Environment of the store process. */
export const STORE_ENV = 'OBJECTCACHE_STORE_PROCESS';
/** Environment of the serving processes: the store process's URL. */
export const STORE_URL_ENV = 'OBJECTCACHE_STORE_PROCESS_URL';

/** The key the serving processes sign with: the administrator's (OBJECTCACHE_ACCESS_KEY), which may do anything. */
export function administrator(config: GatewayConfig): ClientCredential {
  const admin = config.clientCredentials.find((c) => c.access.unrestricted);
  if (!admin) throw new Error('no administrator key (OBJECTCACHE_ACCESS_KEY) to reach the store process with');
  return admin;
}

/** The store as the serving processes reach it. */
export function storeBackend(config: GatewayConfig, url: string): BackendConfig {
  const admin = administrator(config);
  return { kind: 's3', endpoint: new URL(url), region: config.region, accessKeyId: admin.accessKeyId, secretAccessKey: admin.secretAccessKey, connections: 64, timeoutMs: 30_000 };
}

/** Runs the store process: the embedded store on a loopback port, for the administrator only; resolves once stopped. */
export async function runStoreProcess(config: GatewayConfig, logger: Logger): Promise<void> {
  // The primary gone while this process starts: it would hold the data directory's lock, orphaned.
  const goneWhileStarting = (): void => process.exit(1);
  process.once('disconnect', goneWhileStarting);
  const store = await startGateway(
    {
      ...config,
      host: '127.0.0.1',
      port: 0,
      processes: 1,
      clientCredentials: [administrator(config)],
      scheduler: undefined,
      capacity: undefined,
      segments: undefined,
      // Every serving process's requests come as the one key: the clients' shares were taken there.
      limits: { ...config.limits, maxConnections: 8192, maxRequestsPerKey: 1_000_000, maxRequestsPerConnection: 0 },
    },
    { logger, admin: false, role: 'store process' },
  ).catch((error: unknown) => {
    process.off('disconnect', goneWhileStarting);
    if (process.connected) process.disconnect();
    throw error;
  });
  process.off('disconnect', goneWhileStarting);
  process.send?.({ oc: 'store', url: store.url });
  await new Promise<void>((resolve) => {
    const stop = (): void => void store.close().then(resolve, resolve);
    process.once('SIGTERM', stop);
    process.on('SIGINT', () => {});
    process.once('disconnect', stop);
    if (!process.connected) stop();
  });
  // The channel to the primary would keep this process alive.
  if (process.connected) process.disconnect();
}
