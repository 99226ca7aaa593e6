// Builds native/socket-buffer.c into dist/native/socket-buffer.node (Node-API; see that file) with
// the system C compiler (`CC`, else cc). Without a compiler the gateway still runs: streamed chunk
// reads are then off and grouped range reads serve every layerwise GET (README, Streamed reads).
import { execFileSync } from 'node:child_process';
import { mkdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const source = join(root, 'native', 'socket-buffer.c');
const output = join(root, 'dist', 'native', 'socket-buffer.node');
const include = dirname(createRequire(import.meta.url).resolve('node-api-headers/package.json'));

function fresh() {
  try {
    return statSync(output).mtimeMs >= statSync(source).mtimeMs;
  } catch {
    return false;
  }
}

if (!fresh()) {
  mkdirSync(dirname(output), { recursive: true });
  const cc = process.env.CC || 'cc';
  try {
    execFileSync(cc, ['-O2', '-shared', '-fPIC', '-Wall', '-Werror', '-I', join(include, 'include'), source, '-o', output], { stdio: 'inherit' });
  } catch (error) {
    console.warn(`objectcache: could not build ${output} with ${cc} (${error.message}); streamed chunk reads are off, grouped range reads serve every layerwise GET`);
  }
}
