/**
 * Structured logs: one JSON object per line. The gateway writes one `request` line per request
 * with its id; everything else is start-up, shutdown and failures worth an operator's attention.
 */
import type { Writable } from 'node:stream';
import type { LogLevel } from './config.js';

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

function serialiseError(value: unknown): unknown {
  if (!(value instanceof Error)) return value;
  const out: Record<string, unknown> = { name: value.name, message: value.message };
  const code = (value as { code?: unknown }).code;
  if (code !== undefined) out['code'] = code;
  if (value.cause !== undefined) out['cause'] = serialiseError(value.cause);
  return out;
}

export function createLogger(level: LogLevel, sink: Writable = process.stdout): Logger {
  const threshold = RANK[level];
  const write = (lvl: Exclude<LogLevel, 'silent'>, msg: string, fields?: Record<string, unknown>): void => {
    if (RANK[lvl] < threshold) return;
    const record: Record<string, unknown> = { time: new Date().toISOString(), level: lvl, msg };
    if (fields) for (const [key, value] of Object.entries(fields)) record[key] = serialiseError(value);
    sink.write(`${JSON.stringify(record)}\n`);
  };
  return {
    debug: (msg, fields) => write('debug', msg, fields),
    info: (msg, fields) => write('info', msg, fields),
    warn: (msg, fields) => write('warn', msg, fields),
    error: (msg, fields) => write('error', msg, fields),
  };
}
