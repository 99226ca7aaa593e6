/**
 * What a request handler gets: the parsed target, the verified identity, and the gateway's
 * settings. Built once per request by the server.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AuthResult } from './auth/request-verifier.js';
import type { GatewayConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { S3Target } from './request.js';

export interface RequestContext {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly requestId: string;
  readonly target: S3Target;
  readonly auth: AuthResult;
  readonly config: GatewayConfig;
  readonly logger: Logger;
  /** Aborted when the client goes away before the response is complete. */
  readonly signal: AbortSignal;
  /** performance.now() when the request arrived. */
  readonly startedAt: number;
  /** What the request is (gateway/pipeline/routes.ts classify: GetObject, PutObject, DescriptorGet, ...), decided once. */
  readonly operation: string;
  /** A descriptor GET's delivery mode, once chosen (its metrics label: gateway/pipeline/routes.ts operationLabel). */
  mode?: 'layerwise' | 'chunkwise';
  /**
   * The tenant the request is scheduled and counted as: the key's, or the one a layerwise GET's
   * descriptor names once its policy allows it (gateway/s3/auth/access.ts tenantFor).
   */
  tenant: string;
  /** A DeleteObjects request's keys, once read and authorized (gateway/s3/delete-objects.ts): capacity management forgets them. */
  deleteKeys?: readonly string[];
}

/** A header as one string (repeated headers joined with commas), or undefined. */
export function headerOf(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}
