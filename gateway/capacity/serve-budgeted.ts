/**
 * Plain S3 requests on a budgeted bucket: what capacity management (capacity.ts) must know of
 * each, around the backend's own answer (gateway/pipeline/server.ts routes them here).
 */
import { AFTER_META } from '../../schemas/chain.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import { MAX_USER_METADATA_BYTES, MODEL_META, TOKENS_META, tokensProblem, userMetadataBytes } from '../../schemas/kv-tokens.js';
import { objectKeyProblem } from '../../schemas/object-key.js';
import type { Backend } from '../s3/backend.js';
import { headerOf, type RequestContext } from '../s3/context.js';
import { userMetadata } from '../s3/metadata.js';
import { parseCopySource, queryValue } from '../s3/request.js';
import type { Capacity } from './capacity.js';
import { STORED_HEADERS, type StoreHead } from '../stores/capacity-store.js';

/** The object metadata a chunk's tenant is recorded in: set by the gateway only. */
export const TENANT_META = 'x-amz-meta-objectcache-tenant';

/**
 * A plain S3 request on a budgeted bucket, with what capacity management must know: a GET holds
 * its chunk against eviction; a write passes the tenant's quota first and records its tenant
 * with the object; writes and deletes are learnt once the store answered them.
 */
export async function serveBudgeted(ctx: RequestContext, budgeted: Capacity, backend: Backend): Promise<void> {
  const { bucket, key } = ctx.target;
  const op = ctx.operation;
  if (op === 'GetObject') {
    const release = await budgeted.reading(bucket, [key]);
    try {
      await backend.serveS3(ctx);
    } finally {
      // The response is written through by now, or the client is gone.
      release();
    }
    return;
  }
  // Only the gateway names an object's tenant: a client's own value is dropped on every write.
  delete ctx.req.headers[TENANT_META];
  if (op === 'PutObject' || op === 'CopyObject' || op === 'UploadPart' || op === 'UploadPartCopy') {
    const source = copySource(ctx) === undefined ? undefined : await sourceHead(ctx, backend);
    const bytes = writeSize(ctx, source);
    // A part counts against the budget and the quota from the first (until its upload ends).
    const part = op === 'UploadPart' || op === 'UploadPartCopy' ? partOf(ctx) : undefined;
    if (replacesMeta(ctx)) checkWrittenTokens(ctx);
    if (part) budgeted.admitPart(bucket, part.uploadId, part.partNumber, ctx.tenant);
    const finish = await budgeted.admitWrite(bucket, key, ctx.tenant, bytes, part === undefined);
    const replaces = replacesMeta(ctx);
    if (replaces) stampTenant(ctx.req.headers, ctx.tenant);
    // A copy that would take its source's metadata takes it from the gateway instead: the copier
    // as its tenant, and the source's chain only when it is the copier's own.
    else if (op === 'CopyObject' && source) copyMetadata(ctx, source);
    let stored: boolean | { size: number; etag: string; meta: Record<string, string> } = false;
    try {
      await backend.serveS3(ctx);
      const etag = ctx.res.getHeader('etag');
      // A PUT's body was checked against the length it declared (gateway/s3/body/upload-body.ts), so
      // that, and the store's answer, are what it holds; a copy's size is asked of the store.
      // Without an ETag in the answer, a stored object's facts are asked of the store (`true`).
      if (ctx.res.statusCode === 200)
        stored = op === 'PutObject' && typeof etag === 'string' ? { size: bytes, etag, meta: userMetadata(ctx.req.headers) } : op === 'PutObject' || op === 'CopyObject';
      if (ctx.res.statusCode === 200 && part) budgeted.partStored(bucket, key, part.uploadId, part.partNumber, bytes, ctx.tenant);
      // The writer's word on the chunk before it (schemas/chain.ts), taken for its own chunk.
      const after = op === 'PutObject' ? headerOf(ctx.req, `x-amz-meta-${AFTER_META}`) : undefined;
      if (stored !== false && after !== undefined && objectKeyProblem(after) === undefined) budgeted.link(bucket, [after, key], ctx.tenant);
    } finally {
      finish(stored);
    }
    return;
  }
  if (op === 'CreateMultipartUpload') {
    checkWrittenTokens(ctx);
    stampTenant(ctx.req.headers, ctx.tenant);
  }
  await backend.serveS3(ctx);
  const status = ctx.res.statusCode;
  const versioned = ctx.target.query.some(([name]) => name === 'versionId');
  if (op === 'CompleteMultipartUpload' && status === 200) {
    budgeted.written(bucket, key, ctx.tenant);
    budgeted.uploadEnded(bucket, queryValue(ctx.target, 'uploadId') ?? '');
  } else if (op === 'AbortMultipartUpload' && status < 300) budgeted.uploadEnded(bucket, queryValue(ctx.target, 'uploadId') ?? '');
  else if (op === 'DeleteObject' && status < 300) {
    if (versioned) budgeted.verify(bucket, key);
    else budgeted.deleted(bucket, key);
  } else if (op === 'DeleteObjects' && status === 200) for (const deleted of ctx.deleteKeys ?? []) budgeted.verify(bucket, deleted);
}

/** Whether the write sets the object's metadata from its own headers (a PUT, a copy that replaces it). */
function replacesMeta(ctx: RequestContext): boolean {
  return ctx.operation === 'PutObject' || (ctx.operation === 'CopyObject' && (headerOf(ctx.req, 'x-amz-metadata-directive') ?? '').toUpperCase() === 'REPLACE');
}

/**
 * The token ids a write announces for its chunk (schemas/kv-tokens.ts), checked before anything is
 * stored: well formed, and, where the chunk has an ObjectCache key, the tokens its key hashes.
 */
function checkWrittenTokens(ctx: RequestContext): void {
  const problem = tokensProblem(ctx.target.key, { [TOKENS_META]: headerOf(ctx.req, `x-amz-meta-${TOKENS_META}`), [AFTER_META]: headerOf(ctx.req, `x-amz-meta-${AFTER_META}`) });
  if (problem !== undefined) throw new ObjectCacheError('OC_ERR_KV_TOKENS', problem);
}

/** A part's upload and number, from the request's query (the store refuses a malformed one before anything is counted). */
function partOf(ctx: RequestContext): { uploadId: string; partNumber: number } | undefined {
  const uploadId = queryValue(ctx.target, 'uploadId');
  const partNumber = Number(queryValue(ctx.target, 'partNumber'));
  return uploadId !== undefined && uploadId !== '' && Number.isSafeInteger(partNumber) && partNumber >= 1 && partNumber <= 10_000 ? { uploadId, partNumber } : undefined;
}

function copySource(ctx: RequestContext): { bucket: string; key: string } | undefined {
  const source = headerOf(ctx.req, 'x-amz-copy-source');
  return source === undefined ? undefined : parseCopySource(source);
}

/**
 * A copy's source as the store has it now (undefined: gone, and the copy itself answers
 * NoSuchKey). A store that cannot say fails the copy (503): a copy whose metadata the gateway
 * could not set would take its source's tenant.
 */
async function sourceHead(ctx: RequestContext, backend: Backend): Promise<StoreHead | undefined> {
  const { bucket, key } = copySource(ctx) as { bucket: string; key: string };
  return backend.capacity.head(bucket, key);
}

/**
 * Turns a CopyObject that would copy its source's metadata (directive COPY, the default) into one
 * that sets it (REPLACE) to the source's stored headers and user metadata, but with the copier as
 * the object's tenant, and the source's chain (`objectcache-after`) only when the source is the
 * copier's tenant's own: a copy never charges or links another tenant's name.
 */
function copyMetadata(ctx: RequestContext, source: StoreHead): void {
  const headers = ctx.req.headers;
  headers['x-amz-metadata-directive'] = 'REPLACE';
  for (const name of Object.keys(headers)) if (name.startsWith('x-amz-meta-')) delete headers[name];
  for (const name of STORED_HEADERS) {
    const value = source.headers[name];
    if (value !== undefined) headers[name] = value;
  }
  const own = source.meta['objectcache-tenant'] === ctx.tenant;
  for (const [name, value] of Object.entries(source.meta)) {
    // Another tenant's chain, tokens and model are not the copier's to announce (KV events).
    if (name === 'objectcache-tenant' || (!own && (name === AFTER_META || name === TOKENS_META || name === MODEL_META))) continue;
    headers[`x-amz-meta-${name}`] = value;
  }
  stampTenant(headers, ctx.tenant);
}

/**
 * Records the writer's tenant with the object. The writer fitted its metadata to S3's 2 KB without
 * it: where the tenant takes it past, the chunk's tokens (for KV events only) are left out, so the
 * write is not refused for what the gateway added.
 */
function stampTenant(headers: NodeJS.Dict<string | string[]>, tenant: string): void {
  headers[TENANT_META] = tenant;
  if (headers[`x-amz-meta-${TOKENS_META}`] !== undefined && userMetadataBytes(userMetadata(headers)) > MAX_USER_METADATA_BYTES) delete headers[`x-amz-meta-${TOKENS_META}`];
}

/**
 * The bytes a write will store, for the quota: the decoded length of an aws-chunked body, the
 * Content-Length of any other, a copy's source size (or the range of it a part copies). What is
 * recorded of a whole object afterwards is what the store says it holds, never this; a part's is
 * this (a body checked against its length, or a copy the store took).
 */
function writeSize(ctx: RequestContext, source: StoreHead | undefined): number {
  const whole = (text: string | undefined): number => {
    const n = Number(text ?? 0);
    return Number.isSafeInteger(n) && n > 0 ? n : 0;
  };
  if (copySource(ctx) !== undefined) {
    const size = source?.size ?? 0;
    const range = /^bytes=(\d+)-(\d+)$/.exec(headerOf(ctx.req, 'x-amz-copy-source-range') ?? '');
    return range ? Math.max(0, Math.min(size, Number(range[2]) + 1) - Number(range[1])) : size;
  }
  const chunked = ctx.auth.payloadHash.startsWith('STREAMING-');
  return whole(headerOf(ctx.req, chunked ? 'x-amz-decoded-content-length' : 'content-length'));
}
