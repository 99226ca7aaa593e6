#!/usr/bin/env node
/**
 * `objectcache`: the command line. Reads argv and the environment here, at the edge, and hands
 * validated configuration to the commands.
 */
import { ConfigError, loadServeConfig, serveHelp } from './config.js';
import { createLogger } from './logger.js';
import { startGateway } from './server.js';

const USAGE = `Usage: objectcache <command> [options]

Commands:
  serve     Run the S3-compatible gateway (embedded store, or --s3-endpoint URL)

Run "objectcache <command> --help" for the options of a command.`;

async function serve(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${serveHelp()}\n`);
    return 0;
  }
  const config = loadServeConfig(argv, process.env);
  const logger = createLogger(config.logLevel);
  if (config.clientCredentials.some((c) => c.accessKeyId === 'objectcache' && c.secretAccessKey === 'objectcache-secret')) {
    logger.warn('serving with the default client credentials; set OBJECTCACHE_ACCESS_KEY and OBJECTCACHE_SECRET_KEY for anything but a local trial');
  }
  const gateway = await startGateway(config, { logger });
  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      logger.info('shutting down', { signal });
      gateway.close().then(resolve, resolve);
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'serve':
      return serve(rest);
    case undefined:
    case '--help':
    case '-h':
    case 'help':
      process.stdout.write(`${USAGE}\n`);
      return command === undefined ? 2 : 0;
    default:
      process.stderr.write(`objectcache: unknown command ${JSON.stringify(command)}\n\n${USAGE}\n`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof ConfigError) {
      process.stderr.write(`objectcache: invalid setting: ${error.message}\n`);
      process.exitCode = 2;
      return;
    }
    const code = (error as { code?: string }).code;
    process.stderr.write(`objectcache: ${(error as Error).message}${code ? ` (${code})` : ''}\n`);
    process.exitCode = 1;
  },
);
