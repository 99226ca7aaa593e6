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
    destination ?? pino.destination({ dest: 1, sync: false }),
  );
}
