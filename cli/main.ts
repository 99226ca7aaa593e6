#!/usr/bin/env node
/**
 * `objectcache`: the command line and the composition root. Reads argv and the environment here,
 * at the edge, and hands validated configuration to the commands; each command's module is
 * loaded only when it runs (`serve` never loads the benchmark harness or the client).
 */
import { ConfigError } from '../gateway/common/config.js';
import { ObjectCacheError } from '../schemas/errors.js';

/** The Node.js major release ObjectCache runs on (package.json engines; scripts/use-node.sh installs it). */
const NODE_MAJOR = 24;

// The AWS SDK warns on every run that its releases after January 2027 will need Node 22; that
// says nothing about this command, and the SDK has a switch for it.
process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';

const USAGE = `Usage: objectcache <command> [options]

Commands:
  serve     Run the S3-compatible gateway (embedded store, or --s3-endpoint URL)
  seed      Write synthetic KV chunks of a model preset and print their descriptor
  fetch     Fetch a descriptor's KV layer by layer and print the ready timeline
  plan      Show the bandwidth the scheduler would grant a list of requests
  capacity  Show budgeted buckets' usage, quotas and the chunks eviction takes next
  kv-events Print a gateway's KV events (serve --kv-events) as JSON lines
  bench     Run the TTFT benchmark against a MinIO it starts (--quick: a few minutes)

Run "objectcache <command> --help" for the options of a command.`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const running = Number(process.versions.node.split('.')[0]);
  if (running < NODE_MAJOR) {
    process.stderr.write(
      `objectcache: needs Node.js ${NODE_MAJOR} LTS or newer, and this is ${process.version} (out of support); \`. scripts/use-node.sh\` in a checkout puts Node.js ${NODE_MAJOR} on PATH\n`,
    );
    return 2;
  }
  switch (command) {
    case 'serve':
      return (await import('./serve.js')).runServe(rest);
    case 'seed':
      return (await import('./seed.js')).runSeed(rest, process.env, process.stdout, process.stderr);
    case 'fetch':
      return (await import('./fetch.js')).runFetch(rest, process.env, process.stdin, process.stdout);
    case 'plan':
      return (await import('./plan.js')).runPlan(rest, process.stdin, process.stdout);
    case 'capacity':
      return (await import('./capacity.js')).runCapacity(rest, process.stdout);
    case 'kv-events':
      return (await import('./kv-events.js')).runKvEvents(rest, process.stdout);
    case 'bench': {
      const bench = await import('../bench/ttft-matrix.js');
      if (rest.includes('--help') || rest.includes('-h')) {
        process.stdout.write(`${bench.BENCH_HELP}\n`);
        return 0;
      }
      return bench.runTtftBench(bench.parseBenchArgs(rest), process.stdout, process.stderr);
    }
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
    if (error instanceof ObjectCacheError && error.code === 'OC_ERR_CLIENT_USAGE') {
      process.stderr.write(`objectcache: ${error.message} (see --help)\n`);
      process.exitCode = 2;
      return;
    }
    const code = (error as { code?: string }).code;
    process.stderr.write(`objectcache: ${(error as Error).message}${code ? ` (${code})` : ''}\n`);
    process.exitCode = 1;
  },
);
