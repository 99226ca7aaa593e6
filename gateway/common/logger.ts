/**
 * Structured logs with pino: one JSON object per line, written asynchronously (the event loop
 * never waits on stdout). The gateway writes one `request` line per request from a child logger
 * that carries the request's id; everything else is start-up, shutdown and failures worth an
 * operator's attention. Errors go under `error` with their name, message, code and cause.
 */
import { pino, type DestinationStream, type Logger as PinoLogger } from 'pino';
import type { LogLevel } from './config.js';

export type Logger = PinoLogger;

export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: null,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      serializers: { error: pino.stdSerializers.err },
    },
    // Asynchronous, and bounded: if stdout stops taking lines, at most 16 MiB wait and later
    // lines are dropped rather than growing the heap without limit.
    destination ?? pino.destination({ dest: 1, sync: false, maxLength: 16 * 1024 * 1024 }),
  );
}
