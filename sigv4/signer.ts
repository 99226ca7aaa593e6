/**
 * SigV4 for the requests this project sends (the gateway's range reads and passthrough to the
 * backend, the client, the benchmarks), on the hot path: one range GET per read, thousands per
 * second. The signing key is derived once per day and region (the general signer in
 * @smithy/signature-v4 stays the reference: test/request-signer.test.ts checks that both produce
 * identical signatures), and the canonical request is built from the headers actually sent, so a
 * signature costs one SHA-256 and one HMAC. What the verifier of incoming requests hands to
 * @smithy/signature-v4 (node:crypto SHA-256, query bags) lives here too.
 */
import { createHash, createHmac } from 'node:crypto';
import { Hash } from '@smithy/hash-node';
import type { QueryParameterBag, SourceData } from '@smithy/types';
import { escapeUri } from '@smithy/util-uri-escape';

export const EMPTY_PAYLOAD_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

export interface SignerOptions {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly region: string;
  readonly service?: string;
}

export interface SignInput {
  readonly method: string;
  /** Already S3-encoded path, `/bucket/key` (used as the canonical URI as it is). */
  readonly path: string;
  readonly query?: readonly (readonly [string, string])[];
  /** `host` included; names in lower case. Every header given is signed. */
  readonly headers: Readonly<Record<string, string>>;
  /** Hex SHA-256 of the body, or UNSIGNED-PAYLOAD; defaults to the empty body's hash. */
  readonly payloadHash?: string;
  /** Signing time (ms since the epoch); defaults to now. */
  readonly now?: number;
}

/** `20261122T054959Z` */
function amzDate(ms: number): string {
  return new Date(ms)
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
}

function canonicalQuery(pairs: readonly (readonly [string, string])[]): string {
  if (pairs.length === 0) return '';
  return pairs
    .map(([k, v]) => [escapeUri(k), escapeUri(v)] as const)
    .sort(([ka, va], [kb, vb]) => (ka < kb ? -1 : ka > kb ? 1 : va < vb ? -1 : va > vb ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
}

export class RequestSigner {
  readonly #accessKeyId: string;
  readonly #secretAccessKey: string;
  readonly #region: string;
  readonly #service: string;
  /** The day (YYYYMMDD) the cached key is for, and the key. */
  #keyDate = '';
  #key: Buffer = Buffer.alloc(0);
  /** The last second signed, and its x-amz-date, so the date is formatted once a second. */
  #second = -1;
  #amzDate = '';

  constructor(options: SignerOptions) {
    this.#accessKeyId = options.accessKeyId;
    this.#secretAccessKey = options.secretAccessKey;
    this.#region = options.region;
    this.#service = options.service ?? 's3';
  }

  #signingKey(date: string): Buffer {
    if (date !== this.#keyDate) {
      const kDate = createHmac('sha256', `AWS4${this.#secretAccessKey}`).update(date).digest();
      const kRegion = createHmac('sha256', kDate).update(this.#region).digest();
      const kService = createHmac('sha256', kRegion).update(this.#service).digest();
      this.#key = createHmac('sha256', kService).update('aws4_request').digest();
      this.#keyDate = date;
    }
    return this.#key;
  }

  /** The headers to send: the given ones plus x-amz-date, x-amz-content-sha256 and authorization. */
  sign(input: SignInput): Record<string, string> {
    const ms = input.now ?? Date.now();
    const second = Math.floor(ms / 1000);
    if (second !== this.#second) {
      this.#second = second;
      this.#amzDate = amzDate(second * 1000);
    }
    const dateTime = this.#amzDate;
    const date = dateTime.slice(0, 8);
    const payloadHash = input.payloadHash ?? EMPTY_PAYLOAD_SHA256;
    const headers: Record<string, string> = { ...input.headers, 'x-amz-content-sha256': payloadHash, 'x-amz-date': dateTime };
    const names = Object.keys(headers).sort();
    let canonicalHeaders = '';
    for (const name of names) canonicalHeaders += `${name}:${String(headers[name]).trim().replace(/\s+/g, ' ')}\n`;
    const signedHeaders = names.join(';');
    const canonicalRequest = `${input.method}\n${input.path}\n${canonicalQuery(input.query ?? [])}\n${canonicalHeaders}\n${signedHeaders}\n${payloadHash}`;
    const scope = `${date}/${this.#region}/${this.#service}/aws4_request`;
    const stringToSign = `AWS4-HMAC-SHA256\n${dateTime}\n${scope}\n${createHash('sha256').update(canonicalRequest).digest('hex')}`;
    const signature = createHmac('sha256', this.#signingKey(date)).update(stringToSign).digest('hex');
    headers['authorization'] = `AWS4-HMAC-SHA256 Credential=${this.#accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
    return headers;
  }
}

/** SHA-256 backed by node:crypto, for @smithy/signature-v4 (its default is pure JS). */
export class NodeSha256 extends Hash {
  constructor(secret?: SourceData) {
    super('sha256', secret);
  }
}

/** Query pairs as smithy's parameter bag (repeated names become arrays). */
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
