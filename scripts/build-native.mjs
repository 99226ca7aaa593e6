// Builds the Node-API modules in native/ into dist/native/ with the system C compiler (`CC`, else
// cc). Both are optional: without a compiler the gateway still runs, with grouped range reads for
// every layerwise GET instead of streamed ones (socket-buffer.c; docs/layerwise-get.md, Streamed reads) and
// @node-rs/crc32's slower CRC-32C (crc32c.c).
import { execFileSync } from 'node:child_process';
import { mkdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const include = dirname(createRequire(import.meta.url).resolve('node-api-headers/package.json'));
const modules = {
  'socket-buffer': 'streamed chunk reads are off, grouped range reads serve every layerwise GET',
  crc32c: 'CRC-32C falls back to @node-rs/crc32',
  crc64nvme: 'CRC-64/NVME falls back to @aws-sdk/crc64-nvme (about a quarter of the speed)',
};

/** Whether `output` is newer than its source and the header the modules share. */
function fresh(source, output) {
  try {
    const built = statSync(output).mtimeMs;
    return [source, join(root, 'native', 'napi-bytes.h')].every((input) => built >= statSync(input).mtimeMs);
  } catch {
    return false;
  }
}

const cc = process.env.CC || 'cc';
for (const [name, without] of Object.entries(modules)) {
  const source = join(root, 'native', `${name}.c`);
  const output = join(root, 'dist', 'native', `${name}.node`);
  if (fresh(source, output)) continue;
  mkdirSync(dirname(output), { recursive: true });
  try {
    execFileSync(cc, ['-O2', '-shared', '-fPIC', '-Wall', '-Werror', '-I', join(include, 'include'), source, '-o', output], { stdio: 'inherit' });
  } catch (error) {
    console.warn(`objectcache: could not build ${output} with ${cc} (${error.message}); ${without}`);
  }
}
