/**
 * What both SigV4 users (the verifier of client requests and the backend signer) hand to
 * @smithy/signature-v4: SHA-256 backed by node:crypto (smithy's default is pure JS), and query
 * pairs as smithy's parameter bag (repeated names become arrays).
 */
import { Hash } from '@smithy/hash-node';
import type { QueryParameterBag, SourceData } from '@smithy/types';

export class NodeSha256 extends Hash {
  constructor(secret?: SourceData) {
    super('sha256', secret);
  }
}

export function toQueryBag(pairs: readonly (readonly [string, string])[], skip: (name: string) => boolean = () => false): QueryParameterBag {
  const bag: Record<string, string | string[]> = {};
  for (const [name, value] of pairs) {
    if (skip(name)) continue;
    const existing = bag[name];
    if (existing === undefined) bag[name] = value;
    else if (Array.isArray(existing)) existing.push(value);
    else bag[name] = [existing, value];
  }
  return bag;
}
