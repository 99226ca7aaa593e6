/**
 * SHA-256 for @smithy/signature-v4, backed by node:crypto (smithy's default is pure JS).
 */
import { Hash } from '@smithy/hash-node';
import type { SourceData } from '@smithy/types';

export class NodeSha256 extends Hash {
  constructor(secret?: SourceData) {
    super('sha256', secret);
  }
}
