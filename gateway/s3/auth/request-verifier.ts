/**
 * Who sent a client request, verified (RequestVerifier): SigV4 in the Authorization header or a
 * presigned query, Signature Version 2 (sigv2.ts, unless --sigv2 off), and the signed policy of a
 * browser-form upload (verifyPostPolicy). The answer is the key's credential and how it signed.
 *
 * The canonical request, string to sign and HMAC chain are computed by @smithy/signature-v4:
 * the verifier rebuilds the request exactly as the client signed it (the headers it listed in
 * SignedHeaders, the canonical path, the query without X-Amz-Signature), asks smithy to sign or
 * presign it with the client's own date, scope and secret, and compares the two signatures in
 * constant time. Rules follow
 * https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-authenticating-requests.html.
 */
import { createHmac } from 'node:crypto';
import { sameSignature } from './same-signature.js';
import type { IncomingHttpHeaders } from 'node:http';
import { SignatureV4 } from '@smithy/signature-v4';
import type { HttpRequest } from '@smithy/types';
import { ObjectCacheError } from '../../../schemas/errors.js';
import { NodeSha256, toQueryBag } from '../../../sigv4/signer.js';
import type { ClientCredential } from '../../common/config.js';
import { isSigV2, verifySigV2 } from './sigv2.js';

/** Requests dated more than 15 minutes from the gateway clock are rejected (as S3 does). */
export const MAX_CLOCK_SKEW_MS = 15 * 60 * 1000;
/** Presigned URLs live at most 7 days. */
export const MAX_PRESIGNED_EXPIRES_S = 604_800;

/**
 * The one x-amz-* header a SigV4 signature need not list: its value is the canonical request's
 * payload-hash line (header auth) or ignored for UNSIGNED-PAYLOAD (presigned), so it is covered
 * either way. AWS S3 accepts it unlisted, and the AWS SigV4 test suite's requests carry it so.
 * Every other x-amz-* header changes what S3 (and MinIO) do — a copy source, metadata, object-lock,
 * tagging, checksums, trailers — and must be signed. @aws-sdk/client-s3 (with or without flexible
 * checksums and trailers), the minio client and botocore (boto3, client/python) sign every x-amz-*
 * header they send: their only unsigned headers are user-agent, expect, transfer-encoding,
 * x-amzn-trace-id and the like, none of them x-amz-*.
 */
const UNLISTED_AMZ_HEADERS: ReadonlySet<string> = new Set(['x-amz-content-sha256']);

/**
 * The x-amz-* headers of a request that its SigV4 signature does not cover, sorted. AWS S3 refuses
 * them ("There were headers present in the request which were not signed"), MinIO does not: a
 * signed PUT replayed with an x-amz-copy-source added would run as a CopyObject.
 */
export function unsignedAmzHeaders(headers: IncomingHttpHeaders, signedHeaders: readonly string[]): string[] {
  return Object.keys(headers)
    .filter((name) => name.startsWith('x-amz-') && !UNLISTED_AMZ_HEADERS.has(name) && !signedHeaders.includes(name))
    .sort();
}

function refuseUnsigned(headers: IncomingHttpHeaders, signedHeaders: readonly string[]): void {
  const unsigned = unsignedAmzHeaders(headers, signedHeaders);
  if (unsigned.length === 0) return;
  const list = unsigned.join(', ');
  throw new ObjectCacheError('OC_ERR_AUTH_HEADERS_NOT_SIGNED', `There were headers present in the request which were not signed: ${list}`, { details: { HeadersNotSigned: list } });
}

const ALGORITHM = 'AWS4-HMAC-SHA256';
export const UNSIGNED_PAYLOAD = 'UNSIGNED-PAYLOAD';
export const STREAMING_SIGNED = 'STREAMING-AWS4-HMAC-SHA256-PAYLOAD';
export const STREAMING_SIGNED_TRAILER = 'STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER';
export const STREAMING_UNSIGNED_TRAILER = 'STREAMING-UNSIGNED-PAYLOAD-TRAILER';
/** The SHA-256 of an empty body (one definition, with the backend signer's). */
export { EMPTY_PAYLOAD_SHA256 as EMPTY_SHA256 } from '../../../sigv4/signer.js';

export interface SignedRequestInfo {
  readonly method: string;
  readonly headers: IncomingHttpHeaders;
  readonly canonicalPath: string;
  readonly query: readonly (readonly [string, string])[];
  /** The path exactly as sent (percent-encoded, no query): SigV2 signs it as it is. */
  readonly rawPath?: string;
}

export interface AuthResult {
  readonly credential: ClientCredential;
  readonly mode: 'header' | 'presigned';
  /** The request signature: the seed of aws-chunked chunk signatures. */
  readonly signature: string;
  readonly signingDate: Date;
  /** `YYYYMMDD/region/s3/aws4_request`. */
  readonly scope: string;
  readonly region: string;
  readonly service: string;
  /** The declared payload hash: hex SHA-256, UNSIGNED-PAYLOAD, or a STREAMING-* value. */
  readonly payloadHash: string;
  /** Lowercase names of the headers the signature covers. */
  readonly signedHeaders: readonly string[];
  /** Signs strings with the client's key for this scope (chunk and trailer signatures). */
  readonly signString: (stringToSign: string) => Promise<string>;
}

export interface VerifierOptions {
  readonly credentials: readonly ClientCredential[];
  readonly region: string;
  /** The credential scope's service (always s3 for the gateway; the AWS test suite uses "service"). */
  readonly service?: string;
  /** Injected clock (ms since the epoch) so tests control time. */
  readonly now?: () => number;
  /** Accept Signature Version 2 (header and presigned query) as MinIO does; default true. */
  readonly sigV2?: boolean;
  /**
   * The longest a SigV2 presigned URL may still be valid, counted from the time of the request:
   * SigV2's `Expires` is an absolute time with no signing date, so without a cap a URL could be
   * made valid for ever. Default 604800 (7 days, SigV4's cap); 0 means no cap.
   */
  readonly sigV2MaxExpiresSeconds?: number;
}

function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(',') : value;
}

/** Parses `YYYYMMDDTHHMMSSZ`. */
function parseAmzDate(text: string | undefined, what: string): Date {
  const m = text === undefined ? null : /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(text);
  if (!m) throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', `${what} must be an ISO 8601 basic date such as 20260101T000000Z`);
  const [, y, mo, d, h, mi, s] = m.map(Number) as [number, number, number, number, number, number, number];
  const date = new Date(Date.UTC(y, mo - 1, d, h, mi, s));
  if (Number.isNaN(date.getTime()) || date.getUTCDate() !== d || date.getUTCMonth() !== mo - 1) {
    throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', `${what} is not a calendar date`);
  }
  return date;
}

interface ParsedCredential {
  readonly accessKeyId: string;
  readonly date: string;
  readonly region: string;
  readonly service: string;
}

function parseCredential(text: string | undefined): ParsedCredential {
  const parts = text?.split('/') ?? [];
  if (parts.length !== 5 || parts[4] !== 'aws4_request' || parts.some((p) => p === '')) {
    throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'Credential must be <access-key>/<YYYYMMDD>/<region>/s3/aws4_request');
  }
  const [accessKeyId, date, region, service] = parts as [string, string, string, string, string];
  return { accessKeyId, date, region, service };
}

function parseSignedHeaders(text: string | undefined): string[] {
  if (text === undefined || text === '') throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'SignedHeaders is missing');
  const names = text.split(';');
  if (names.some((n) => n === '' || n !== n.toLowerCase())) throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'SignedHeaders must be lowercase names separated by ;');
  if (!names.includes('host')) throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'SignedHeaders must include host');
  return names;
}

/** `AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...` */
function parseAuthorization(header: string): { credential: string; signedHeaders: string; signature: string } {
  const space = header.indexOf(' ');
  const algorithm = space === -1 ? header : header.slice(0, space);
  if (algorithm !== ALGORITHM) throw new ObjectCacheError('OC_ERR_AUTH_ALGORITHM', `Unsupported authorization algorithm ${JSON.stringify(algorithm)}; use ${ALGORITHM}`);
  const fields = new Map<string, string>();
  for (const part of header.slice(space + 1).split(',')) {
    const eq = part.indexOf('=');
    if (eq === -1) throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'The Authorization header is malformed');
    fields.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  const credential = fields.get('Credential');
  const signedHeaders = fields.get('SignedHeaders');
  const signature = fields.get('Signature');
  if (credential === undefined || signedHeaders === undefined || signature === undefined) {
    throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'The Authorization header needs Credential, SignedHeaders and Signature');
  }
  return { credential, signedHeaders, signature };
}

function isPayloadHash(value: string): boolean {
  return /^[0-9a-f]{64}$/.test(value) || value === UNSIGNED_PAYLOAD || value === STREAMING_SIGNED || value === STREAMING_SIGNED_TRAILER || value === STREAMING_UNSIGNED_TRAILER;
}

export class RequestVerifier {
  readonly #credentials: Map<string, ClientCredential>;
  readonly #signers = new Map<string, SignatureV4>();
  readonly #region: string;
  readonly #service: string;
  readonly #now: () => number;
  readonly #sigV2: boolean;
  readonly #sigV2MaxExpiresS: number;

  constructor(options: VerifierOptions) {
    this.#sigV2 = options.sigV2 ?? true;
    const cap = options.sigV2MaxExpiresSeconds ?? MAX_PRESIGNED_EXPIRES_S;
    if (!Number.isSafeInteger(cap) || cap < 0) {
      throw new ObjectCacheError('OC_ERR_CONFIG_INVALID', `sigV2MaxExpiresSeconds must be a whole number of seconds, 0 or more (0: no cap), got ${cap}`);
    }
    this.#sigV2MaxExpiresS = cap;
    this.#credentials = new Map(options.credentials.map((c) => [c.accessKeyId, c]));
    this.#region = options.region;
    this.#service = options.service ?? 's3';
    this.#now = options.now ?? Date.now;
  }

  /**
   * Verifies a request's signature (SigV4 in the Authorization header or presigned in the query;
   * SigV2 as S3 still accepts it) and returns the signing key's credential and what the signature
   * covers; throws the S3 error a store would answer (a bad signature, an unknown key, an expired
   * or skewed date). The body is not read here: its hash is checked as it is read.
   */
  async verify(info: SignedRequestInfo): Promise<AuthResult> {
    if (isSigV2(info.headers, info.query)) return this.#verifyV2(info);
    const authorization = first(info.headers.authorization);
    const presigned = info.query.some(([k]) => k === 'X-Amz-Signature' || k === 'X-Amz-Credential' || k === 'X-Amz-Algorithm');
    if (authorization !== undefined && presigned) {
      throw new ObjectCacheError('OC_ERR_AUTH_MULTIPLE', 'Only one authentication mechanism is allowed: the Authorization header or the X-Amz-* query parameters');
    }
    if (authorization !== undefined) return this.#verifyHeader(info, authorization);
    if (presigned) return this.#verifyPresigned(info);
    throw new ObjectCacheError('OC_ERR_AUTH_MISSING', 'Anonymous requests are not allowed; sign the request with SigV4');
  }

  #verifyV2(info: SignedRequestInfo): AuthResult {
    if (!this.#sigV2) throw new ObjectCacheError('OC_ERR_AUTH_SIGV2_DISABLED', 'Signature Version 2 is turned off on this gateway; sign the request with SigV4');
    if (info.query.some(([k]) => k.startsWith('X-Amz-'))) {
      if (first(info.headers.authorization) !== undefined || info.query.some(([k]) => k === 'X-Amz-Signature')) {
        throw new ObjectCacheError('OC_ERR_AUTH_MULTIPLE', 'Only one authentication mechanism is allowed');
      }
    }
    const result = verifySigV2(
      { method: info.method, headers: info.headers, rawPath: info.rawPath ?? info.canonicalPath, query: info.query },
      this.#credentials,
      this.#now(),
      MAX_CLOCK_SKEW_MS,
      this.#sigV2MaxExpiresS,
    );
    // A SigV2 signature covers x-amz-* headers but not x-amz-* query parameters, which a
    // presigned URL's holder could then add (the gateway would take them as headers).
    const unsignedParameter = result.mode === 'presigned' ? info.query.find(([k]) => k.toLowerCase().startsWith('x-amz-')) : undefined;
    if (unsignedParameter !== undefined) {
      throw new ObjectCacheError(
        'OC_ERR_AUTH_HEADERS_NOT_SIGNED',
        `The query parameter ${unsignedParameter[0]} is not covered by a Signature Version 2 presigned URL; send it as a header, or presign with SigV4`,
      );
    }
    return {
      credential: result.credential,
      mode: result.mode,
      signature: result.signature,
      signingDate: result.date,
      scope: '',
      region: this.#region,
      service: this.#service,
      // SigV2 signs no body: its bytes are checked only against Content-MD5 when one is sent.
      payloadHash: UNSIGNED_PAYLOAD,
      signedHeaders: result.signedHeaders,
      signString: () => Promise.reject(new ObjectCacheError('OC_ERR_AUTH_ALGORITHM', 'aws-chunked bodies need SigV4')),
    };
  }

  /**
   * The signature of a browser-form POST upload: SigV4 (`x-amz-credential`, `x-amz-date`,
   * `x-amz-signature` = HMAC with the derived key of the base64 policy) or SigV2 (`AWSAccessKeyId`,
   * `signature` = base64 HMAC-SHA1 of the policy). Returns the client's credential.
   */
  async verifyPostPolicy(field: (name: string) => string | undefined, policy: string): Promise<ClientCredential> {
    const v2Key = field('awsaccesskeyid');
    if (v2Key !== undefined) {
      if (!this.#sigV2) throw new ObjectCacheError('OC_ERR_AUTH_SIGV2_DISABLED', 'Signature Version 2 is turned off on this gateway; sign the policy with SigV4');
      const credential = this.#credentials.get(v2Key);
      if (!credential) throw new ObjectCacheError('OC_ERR_AUTH_UNKNOWN_KEY', 'The access key id you provided does not exist in our records');
      const expected = createHmac('sha1', credential.secretAccessKey).update(policy, 'utf8').digest('base64');
      if (!sameSignature(expected, field('signature') ?? ''))
        throw new ObjectCacheError('OC_ERR_AUTH_SIGNATURE', 'The request signature we calculated does not match the signature you provided. Check your key and signing method.');
      return credential;
    }
    if (field('x-amz-algorithm') !== ALGORITHM) throw new ObjectCacheError('OC_ERR_AUTH_ALGORITHM', `x-amz-algorithm must be ${ALGORITHM}`);
    const parsed = parseCredential(field('x-amz-credential'));
    const signingDate = parseAmzDate(field('x-amz-date'), 'x-amz-date');
    const credential = this.#lookup(parsed, signingDate);
    const expected = await this.#signer(credential).sign(policy, { signingDate, signingRegion: parsed.region, signingService: parsed.service });
    if (!sameSignature(expected, field('x-amz-signature') ?? '')) {
      throw new ObjectCacheError('OC_ERR_AUTH_SIGNATURE', 'The request signature we calculated does not match the signature you provided. Check your key and signing method.');
    }
    return credential;
  }

  #signer(credential: ClientCredential): SignatureV4 {
    let signer = this.#signers.get(credential.accessKeyId);
    if (!signer) {
      signer = new SignatureV4({
        credentials: { accessKeyId: credential.accessKeyId, secretAccessKey: credential.secretAccessKey },
        region: this.#region,
        service: this.#service,
        sha256: NodeSha256,
        uriEscapePath: false,
        applyChecksum: false,
      });
      this.#signers.set(credential.accessKeyId, signer);
    }
    return signer;
  }

  #lookup(parsed: ParsedCredential, signingDate: Date): ClientCredential {
    const credential = this.#credentials.get(parsed.accessKeyId);
    if (!credential) throw new ObjectCacheError('OC_ERR_AUTH_UNKNOWN_KEY', 'The access key id you provided does not exist in our records');
    const shortDate = signingDate.toISOString().slice(0, 10).replace(/-/g, '');
    if (parsed.date !== shortDate) throw new ObjectCacheError('OC_ERR_AUTH_SCOPE', `The credential scope date ${parsed.date} does not match the request date ${shortDate}`);
    if (parsed.service !== this.#service) throw new ObjectCacheError('OC_ERR_AUTH_SCOPE', `The credential scope service must be ${this.#service}, got ${parsed.service}`);
    if (parsed.region !== this.#region) {
      throw new ObjectCacheError('OC_ERR_AUTH_SCOPE', `The credential scope region ${parsed.region} is wrong; expecting ${this.#region}`, { details: { Region: this.#region } });
    }
    return credential;
  }

  /**
   * The request as the client signed it: only the headers it listed, the canonical path, the
   * query (without X-Amz-Signature for presigned URLs), and x-amz-content-sha256 for smithy's
   * payload hash, kept out of the canonical headers when the client did not sign it.
   */
  #rebuild(info: SignedRequestInfo, signed: readonly string[], payloadHash: string, presigned: boolean): { request: HttpRequest; unsignable: Set<string> } {
    const headers: Record<string, string> = {};
    for (const name of signed) {
      const value = first(info.headers[name]);
      if (value === undefined) throw new ObjectCacheError('OC_ERR_AUTH_SIGNATURE', `The signed header ${name} is missing from the request`);
      headers[name] = value;
    }
    const unsignable = new Set<string>();
    if (!signed.includes('x-amz-content-sha256')) {
      headers['x-amz-content-sha256'] = payloadHash;
      unsignable.add('x-amz-content-sha256');
    }
    const request: HttpRequest = {
      method: info.method,
      protocol: 'http:',
      hostname: headers['host'] ?? '',
      path: info.canonicalPath,
      query: toQueryBag(info.query, (name) => presigned && name === 'X-Amz-Signature'),
      headers,
    };
    return { request, unsignable };
  }

  #result(
    credential: ClientCredential,
    mode: AuthResult['mode'],
    signature: string,
    signingDate: Date,
    parsed: ParsedCredential,
    payloadHash: string,
    signedHeaders: readonly string[],
  ): AuthResult {
    const signer = this.#signer(credential);
    const scope = `${parsed.date}/${parsed.region}/${parsed.service}/aws4_request`;
    return {
      credential,
      mode,
      signature,
      signingDate,
      scope,
      region: parsed.region,
      service: parsed.service,
      payloadHash,
      signedHeaders,
      signString: (stringToSign) => signer.sign(stringToSign, { signingDate, signingRegion: parsed.region, signingService: parsed.service }),
    };
  }

  async #verifyHeader(info: SignedRequestInfo, authorization: string): Promise<AuthResult> {
    const fields = parseAuthorization(authorization);
    const parsed = parseCredential(fields.credential);
    const signedHeaders = parseSignedHeaders(fields.signedHeaders);
    const signingDate = parseAmzDate(first(info.headers['x-amz-date']), 'The x-amz-date header');
    if (Math.abs(this.#now() - signingDate.getTime()) > MAX_CLOCK_SKEW_MS) {
      throw new ObjectCacheError('OC_ERR_AUTH_CLOCK_SKEW', 'The difference between the request time and the server time is too large');
    }
    const credential = this.#lookup(parsed, signingDate);
    const payloadHash = first(info.headers['x-amz-content-sha256']);
    if (payloadHash === undefined) throw new ObjectCacheError('OC_ERR_REQUEST_MISSING_CONTENT_SHA256', 'Missing required header for this request: x-amz-content-sha256');
    if (!isPayloadHash(payloadHash))
      throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'x-amz-content-sha256 must be a hex SHA-256, UNSIGNED-PAYLOAD or a supported STREAMING-* value');

    const { request, unsignable } = this.#rebuild(info, signedHeaders, payloadHash, false);
    const signed = await this.#signer(credential).sign(request, {
      signingDate,
      signableHeaders: new Set(signedHeaders),
      unsignableHeaders: unsignable,
      signingRegion: parsed.region,
      signingService: parsed.service,
    });
    const expected = /Signature=([0-9a-f]+)/.exec(String(signed.headers['authorization']))?.[1] ?? '';
    if (!sameSignature(expected, fields.signature)) {
      throw new ObjectCacheError('OC_ERR_AUTH_SIGNATURE', 'The request signature we calculated does not match the signature you provided. Check your key and signing method.');
    }
    // After the signature, so that only the key's holder learns which headers it left out.
    refuseUnsigned(info.headers, signedHeaders);
    return this.#result(credential, 'header', fields.signature, signingDate, parsed, payloadHash, signedHeaders);
  }

  async #verifyPresigned(info: SignedRequestInfo): Promise<AuthResult> {
    const q = (name: string): string | undefined => info.query.find(([k]) => k === name)?.[1];
    const algorithm = q('X-Amz-Algorithm');
    if (algorithm !== ALGORITHM) throw new ObjectCacheError('OC_ERR_AUTH_ALGORITHM', `X-Amz-Algorithm must be ${ALGORITHM}`);
    const signature = q('X-Amz-Signature');
    if (signature === undefined) throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'X-Amz-Signature is missing');
    const parsed = parseCredential(q('X-Amz-Credential'));
    const signedHeaders = parseSignedHeaders(q('X-Amz-SignedHeaders'));
    const signingDate = parseAmzDate(q('X-Amz-Date'), 'X-Amz-Date');
    // As MinIO (and S3) answer: not a number, negative or over a week is a malformed query (400);
    // 0 is a URL that expired as it was made (403 AccessDenied, "Request has expired").
    const expiresText = q('X-Amz-Expires') ?? '';
    if (!/^-?\d+$/.test(expiresText)) throw new ObjectCacheError('OC_ERR_AUTH_EXPIRES_RANGE', 'X-Amz-Expires should be a number');
    const expires = Number(expiresText);
    if (expires < 0) throw new ObjectCacheError('OC_ERR_AUTH_EXPIRES_RANGE', 'X-Amz-Expires must be non-negative');
    if (expires > MAX_PRESIGNED_EXPIRES_S)
      throw new ObjectCacheError(
        'OC_ERR_AUTH_EXPIRES_RANGE',
        `X-Amz-Expires must be less than a week (in seconds); that is, the given X-Amz-Expires must be less than ${MAX_PRESIGNED_EXPIRES_S} seconds`,
      );
    const now = this.#now();
    if (expires === 0) throw new ObjectCacheError('OC_ERR_AUTH_EXPIRED', 'Request has expired');
    if (signingDate.getTime() - now > MAX_CLOCK_SKEW_MS) throw new ObjectCacheError('OC_ERR_AUTH_NOT_YET_VALID', 'Request is not valid yet');
    if (now > signingDate.getTime() + expires * 1000) throw new ObjectCacheError('OC_ERR_AUTH_EXPIRED', 'Request has expired');
    const credential = this.#lookup(parsed, signingDate);

    // Presigned requests sign UNSIGNED-PAYLOAD as the payload hash (unless the client signed the header).
    const { request, unsignable } = this.#rebuild(info, signedHeaders, UNSIGNED_PAYLOAD, true);
    const presigned = await this.#signer(credential).presign(request, {
      signingDate,
      expiresIn: expires,
      signableHeaders: new Set(signedHeaders),
      unsignableHeaders: unsignable,
      unhoistableHeaders: new Set(Object.keys(request.headers)),
      signingRegion: parsed.region,
      signingService: parsed.service,
    });
    const expected = String(presigned.query?.['X-Amz-Signature'] ?? '');
    if (!sameSignature(expected, signature)) {
      throw new ObjectCacheError('OC_ERR_AUTH_SIGNATURE', 'The request signature we calculated does not match the signature you provided. Check your key and signing method.');
    }
    // As S3 and MinIO: whoever holds a presigned URL may not add x-amz-* headers its signer did not
    // sign (metadata, a copy source, object-lock settings would act with the signer's rights).
    // A presigner hoists the x-amz-* headers it signs into the URL or lists them in
    // X-Amz-SignedHeaders (SSE-C keys), so a URL's legitimate user sends no others.
    refuseUnsigned(info.headers, signedHeaders);
    return this.#result(credential, 'presigned', signature, signingDate, parsed, request.headers['x-amz-content-sha256'] ?? UNSIGNED_PAYLOAD, signedHeaders);
  }
}
