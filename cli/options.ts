/**
 * Option parsing shared by the client commands: flags through node:util parseArgs, credentials
 * from OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY, and usage errors with a stable code.
 */
import { parseArgs } from 'node:util';
import { ObjectCacheError } from '../schemas/errors.js';

export type OptionSpec = Record<string, { type: 'string' | 'boolean'; default?: string | boolean; short?: string }>;

export function usageError(message: string): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_CLIENT_USAGE', message);
}

export function parseOptions(argv: readonly string[], spec: OptionSpec): Record<string, string | boolean | undefined> {
  try {
    return parseArgs({ args: [...argv], options: spec, strict: true, allowPositionals: false }).values;
  } catch (error) {
    throw usageError((error as Error).message);
  }
}

export function requireString(values: Record<string, string | boolean | undefined>, name: string): string {
  const value = values[name];
  if (typeof value !== 'string' || value === '') throw usageError(`--${name} is required`);
  return value;
}

export function positiveInteger(values: Record<string, string | boolean | undefined>, name: string, fallback?: number): number {
  const value = values[name];
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'string' || !/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw usageError(`--${name} must be a positive integer, got ${JSON.stringify(value ?? '')}`);
  }
  return Number(value);
}

export function clientCredentials(env: NodeJS.ProcessEnv): { accessKeyId: string; secretAccessKey: string } {
  return { accessKeyId: env['OBJECTCACHE_ACCESS_KEY'] || 'objectcache', secretAccessKey: env['OBJECTCACHE_SECRET_KEY'] || 'objectcache-secret' };
}
