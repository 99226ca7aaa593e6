/**
 * `objectcache serve`: validated settings in, a running gateway out, stopped on SIGINT/SIGTERM.
 * One process with --processes 1; else the primary (gateway/cluster/primary.ts), which runs this
 * same command again as each serving process and, on the embedded store, as the store process.
 */
import cluster from 'node:cluster';
import { startPrimary } from '../gateway/cluster/primary.js';
import { runServing, SERVING_ENV } from '../gateway/cluster/serving.js';
import { runStoreProcess, STORE_ENV, STORE_URL_ENV, storeBackend } from '../gateway/cluster/store-process.js';
import { loadServeConfig, serveHelp, TRIAL_SECRET } from '../gateway/common/config.js';
import { createLogger } from '../gateway/common/logger.js';
import { loadStateKey } from '../gateway/common/state-key.js';
import { startGateway } from '../gateway/pipeline/server.js';

export async function runServe(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${serveHelp()}\n`);
    return 0;
  }
  const config = loadServeConfig([...argv], process.env);
  const logger = createLogger(config.logLevel);
  if (process.env[STORE_ENV] !== undefined && process.send) {
    await runStoreProcess(config, logger.child({ process: 'store' }));
    return 0;
  }
  const serving = process.env[SERVING_ENV];
  if (cluster.isWorker && serving !== undefined) {
    const storeUrl = process.env[STORE_URL_ENV];
    // On the embedded store the store process owns the data directory: reached as S3, signed with
    // the state key of the directory, while the read workers read its object files directly
    // (gateway/cluster/store-process.ts).
    const dataDir = config.backend.kind === 'local' ? config.backend.dataDir : undefined;
    await runServing({
      config: storeUrl ? { ...config, backend: storeBackend(config, storeUrl) } : config,
      logger: logger.child({ process: Number(serving) }),
      ...(storeUrl && dataDir !== undefined ? { stateKey: loadStateKey(config.stateKey, config.backend), workerBackend: { kind: 'local', dataDir, quotedEtags: true } } : {}),
    });
    await new Promise<void>((resolve) => logger.flush(() => resolve()));
    return 0;
  }
  if (config.clientCredentials.some((c) => c.secretAccessKey === TRIAL_SECRET)) {
    logger.warn('serving with the published trial secret (allowed on loopback only); set OBJECTCACHE_ACCESS_KEY and OBJECTCACHE_SECRET_KEY for anything but a local trial');
  }
  const keys = config.clientCredentials;
  logger.info(
    { keys: keys.length, administrator: keys.filter((c) => c.access.unrestricted).length, withPolicy: keys.filter((c) => !c.access.unrestricted && !c.access.empty).length },
    'access policies loaded',
  );
  const powerless = keys.filter((c) => c.access.empty).map((c) => c.accessKeyId);
  if (powerless.length > 0) {
    logger.warn({ keys: powerless }, 'these keys have no access policy and may do nothing; attach one with "policy" in --credentials or in --access-policies');
  }
  // Names no key but the administrator's may use: the store's own APIs and the gateways' own state.
  logger.info({ reserved: [...config.reservedBuckets].sort() }, 'reserved bucket names (refused to every key but the administrator)');
  const gateway = config.processes > 1 ? await startPrimary(config, logger) : await startGateway(config, { logger });
  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      logger.info({ signal }, 'shutting down');
      ('stop' in gateway ? gateway.stop() : gateway.close()).then(resolve, resolve);
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  await new Promise<void>((resolve) => logger.flush(() => resolve()));
  return 0;
}
