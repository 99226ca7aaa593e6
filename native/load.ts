/**
 * Loads one of the optional Node-API modules that scripts/build-native.mjs builds from native/*.c
 * into dist/native/. A module that was not built (no C compiler) or does not load here (another
 * platform) is null, and its caller falls back (see each .c file's header).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const loaded = new Map<string, unknown>();

function modulePath(name: string): string {
  const file = fileURLToPath(import.meta.url);
  // Compiled, this file is in dist/native/ beside the modules; run from its TypeScript source
  // (the tests), it is in native/ and the modules are in dist/native/.
  return file.endsWith('.ts') ? join(dirname(dirname(file)), 'dist', 'native', `${name}.node`) : join(dirname(file), `${name}.node`);
}

export function loadNative<T>(name: string): T | null {
  if (!loaded.has(name)) {
    const path = modulePath(name);
    let module: unknown = null;
    try {
      module = existsSync(path) ? createRequire(import.meta.url)(path) : null;
    } catch {
      module = null;
    }
    loaded.set(name, module);
  }
  return loaded.get(name) as T | null;
}
