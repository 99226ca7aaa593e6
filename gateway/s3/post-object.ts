/**
 * Browser-form POST uploads (`POST /{bucket}` with `multipart/form-data`), what boto3's
 * generate_presigned_post and the SDK's createPresignedPost produce: the form's fields carry a
 * signed policy instead of an Authorization header. The fields (which S3 requires before the
 * file) are collected, the policy's signature and conditions checked (post-policy.ts), `${filename}`
 * in the key replaced, and the file part streamed into the store, never held in memory whole,
 * its size checked against content-length-range before anything is committed. Parsing is
 * busboy's (the streaming multipart parser fastify and multer use).
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { escapeUriPath } from '@smithy/util-uri-escape';
import busboy from 'busboy';
import type { LocalStore } from '../stores/embedded/local-store.js';
import type { S3Backend } from '../stores/s3-backend.js';
import { UNSIGNED_PAYLOAD } from './auth/request-verifier.js';
import { authorize, authorizeUnclassified, UNSAFE_HEADERS } from './auth/access.js';
import { s3Arn } from '../common/access-policy.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import { objectKeyProblem } from '../../schemas/object-key.js';
import type { RequestVerifier } from './auth/request-verifier.js';
import type { S3Target } from './request.js';
import { checkPostPolicy } from './post-policy.js';
import { checkStoredMetadata } from './metadata.js';
import type { ClientCredential } from '../common/config.js';
import { sendEmpty, sendXml } from './respond.js';
import { buildXml } from './xml.js';

/** What a stored object gets from the form: Content-Type, representation headers, user metadata. */
export interface PostAttributes {
  readonly contentType: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly userMeta: Readonly<Record<string, string>>;
}

/** Where the file goes: the embedded store, or the S3 backend. Resolves with the unquoted ETag. */
export type PostSink = (bucket: string, key: string, body: Readable, attributes: PostAttributes) => Promise<string>;

const STORED_FIELDS = ['cache-control', 'content-disposition', 'content-encoding', 'content-language', 'expires'] as const;

/**
 * The file's bytes, counted: fails past `max`, and at the end below `min`, before the store
 * commits. Pull-based, so the failure reaches whoever reads the stream (the store's writer, which
 * then discards what it staged) and never fires while nobody listens.
 */
async function* limitSize(source: AsyncIterable<Buffer>, min: number, max: number): AsyncGenerator<Buffer> {
  let bytes = 0;
  for await (const chunk of source) {
    bytes += chunk.byteLength;
    if (bytes > max) throw new ObjectCacheError('OC_ERR_REQUEST_TOO_LARGE', `Your proposed upload exceeds the maximum allowed size of ${max} bytes`);
    yield chunk;
  }
  if (bytes < min) throw new ObjectCacheError('OC_ERR_POST_TOO_SMALL', `Your proposed upload is smaller than the minimum allowed size of ${min} bytes`);
}

/** The largest single form field accepted (S3 allows a 20 KB policy; MinIO takes fields to 1 MB in all). */
const MAX_FIELD_BYTES = 64 * 1024;

/** A form field sent as a file part, read whole; refused past `max` bytes. */
async function readField(stream: Readable, max: number): Promise<string> {
  const parts: Buffer[] = [];
  let bytes = 0;
  for await (const part of stream as AsyncIterable<Buffer>) {
    bytes += part.length;
    if (bytes > max) {
      stream.resume();
      throw new ObjectCacheError('OC_ERR_POST_FORM', `A form field is larger than ${max} bytes`);
    }
    parts.push(part);
  }
  return Buffer.concat(parts).toString('utf8');
}

/** Streams whose failure is reported elsewhere (to the awaiting upload) must not also end the process. */
function ignoreErrors(stream: Readable): void {
  stream.on('error', () => {});
}

export interface PostObjectDeps {
  readonly verifier: RequestVerifier;
  readonly sink: PostSink;
  readonly maxObjectBytes: number;
  /** Bytes of all fields together, names and values (--max-form-fields-bytes): they are read before anyone is authenticated. */
  readonly maxFieldsBytes: number;
  /** Time from the request's headers to its file part, the unauthenticated part of a form (--header-timeout-ms). */
  readonly fieldsTimeoutMs: number;
  /** Counts the request against the key that signed the form (gateway/admission/admission.ts KeyLimits); rejects past its share. */
  readonly admit: (credential: ClientCredential) => Promise<void>;
  readonly now: () => number;
  /**
   * Called once the form is authorized, before the store is written (capacity management: it may
   * set metadata and refuse the write); what it returns is called with whether the store took it.
   */
  readonly storing?: (credential: ClientCredential, key: string, userMeta: Record<string, string>) => Promise<(stored: boolean) => void>;
}

export async function servePostObject(req: IncomingMessage, res: ServerResponse, target: S3Target, deps: PostObjectDeps): Promise<void> {
  const fields = new Map<string, string>();
  let fieldBytes = 0;
  const maxField = Math.min(MAX_FIELD_BYTES, deps.maxFieldsBytes);
  let parser: busboy.Busboy;
  try {
    // Every part with a filename reaches busboy's 'file' event, the field named "file" and the
    // ordinary fields a client such as Python's requests sends with a filename alike: S3 and
    // MinIO take the latter as fields, so they are read (up to a field's size) as fields here.
    parser = busboy({ headers: req.headers, limits: { files: 201, fields: 200, fieldSize: maxField, fieldNameSize: 256, parts: 202 } });
  } catch (error) {
    throw new ObjectCacheError('OC_ERR_POST_FORM', `The body is not multipart/form-data: ${(error as Error).message}`);
  }
  /** Fields sent as file parts, still being read: the upload waits for them. */
  const pendingFields: Promise<void>[] = [];
  /** Settled once: the stream of parts ends in a stored object or in one error. */
  let fail: (error: unknown) => void = () => {};
  let fieldsTimer: NodeJS.Timeout | undefined;
  /** The file part, once it began: ended with the error when the form fails, so the store's writer lets go. */
  let fileStream: Readable | undefined;
  const done = new Promise<{ key: string; etag: string }>((resolve, reject) => {
    fail = reject;
    let file = false;
    /** A field's bytes count against the form's budget; past it the form is refused at once. */
    const addField = (name: string, value: string): void => {
      fieldBytes += Buffer.byteLength(name) + Buffer.byteLength(value);
      if (fieldBytes > deps.maxFieldsBytes) {
        reject(new ObjectCacheError('OC_ERR_POST_FORM', `The form's fields exceed ${deps.maxFieldsBytes} bytes together (--max-form-fields-bytes)`));
        return;
      }
      const lower = name.toLowerCase();
      if (!fields.has(lower)) fields.set(lower, value);
    };
    // The fields come before the file, unauthenticated: they must all arrive in time.
    fieldsTimer = setTimeout(
      () => reject(new ObjectCacheError('OC_ERR_REQUEST_TIMEOUT', `The form's fields did not arrive within ${deps.fieldsTimeoutMs} ms`)),
      deps.fieldsTimeoutMs,
    );
    parser.on('field', (name, value, info) => {
      // S3 reads the form up to the field named "file"; what follows is ignored.
      if (file) return;
      if (info.valueTruncated || info.nameTruncated) {
        reject(new ObjectCacheError('OC_ERR_POST_FORM', `The form field ${JSON.stringify(name.slice(0, 64))} is larger than ${maxField} bytes`));
        return;
      }
      addField(name, value);
    });
    for (const limit of ['partsLimit', 'filesLimit', 'fieldsLimit'] as const) {
      parser.on(limit, () => reject(new ObjectCacheError('OC_ERR_POST_FORM', 'The form has more than 200 fields')));
    }
    parser.on('file', (name, stream, info) => {
      ignoreErrors(stream);
      const lower = name.toLowerCase();
      if (file) {
        stream.resume(); // S3 reads the form up to the field named "file"; the rest is ignored
        return;
      }
      if (lower !== 'file') {
        pendingFields.push(readField(stream, maxField).then((value) => addField(name, value), reject));
        return;
      }
      file = true;
      fileStream = stream;
      clearTimeout(fieldsTimer);
      upload(stream, info.filename ?? '').then(resolve, (error: unknown) => {
        stream.resume();
        reject(error);
      });
    });
    parser.on('error', (error: Error) => reject(new ObjectCacheError('OC_ERR_POST_FORM', `The form cannot be parsed: ${error.message}`)));
    parser.on('close', () => {
      if (!file) reject(new ObjectCacheError('OC_ERR_POST_FORM', 'POST requires exactly one file upload per request, in a field named "file" after the other fields'));
    });
  });
  // A client that goes away mid-form ends the wait (busboy sees no end of a request cut short).
  const onClose = (): void => fail(new ObjectCacheError('OC_ERR_POST_FORM', 'The client closed the connection before the form ended'));
  res.once('close', onClose);

  async function upload(stream: Readable, filename: string): Promise<{ key: string; etag: string }> {
    await Promise.all(pendingFields);
    const policy = fields.get('policy');
    if (policy === undefined) throw new ObjectCacheError('OC_ERR_POST_FORM', 'The form needs a policy field (anonymous uploads are not allowed)');
    const credential = await deps.verifier.verifyPostPolicy((name) => fields.get(name), policy);
    await deps.admit(credential);
    const template = fields.get('key');
    if (template === undefined || template === '') throw new ObjectCacheError('OC_ERR_POST_FORM', 'The form needs a key field');
    const key = template.replaceAll('${filename}', filename);
    const problem = objectKeyProblem(key);
    if (problem !== undefined) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_KEY', `The key ${problem}`);
    // The key that signed the form must be allowed to write the object it names.
    authorize(credential, [{ action: 's3:PutObject', resource: s3Arn(target.bucket, key) }]);
    const unsafe = [...fields.keys()].find((name) => UNSAFE_HEADERS.some((pattern) => pattern.test(name)));
    if (unsafe !== undefined) authorizeUnclassified(credential, `a form with the field ${unsafe}`);
    const checked = new Map(fields);
    checked.set('key', key);
    checked.set('bucket', target.bucket);
    const limits = checkPostPolicy(policy, checked, deps.now());
    const headers: Record<string, string> = {};
    for (const name of STORED_FIELDS) {
      const value = fields.get(name);
      if (value !== undefined && value !== '') headers[name] = value;
    }
    const userMeta: Record<string, string> = {};
    for (const [name, value] of fields) if (name.startsWith('x-amz-meta-')) userMeta[name.slice('x-amz-meta-'.length)] = value;
    const contentType = fields.get('content-type') ?? 'binary/octet-stream';
    const finish = (await deps.storing?.(credential, key, userMeta)) ?? (() => {});
    const limited = Readable.from(limitSize(stream as AsyncIterable<Buffer>, limits.minBytes, Math.min(limits.maxBytes, deps.maxObjectBytes)), { objectMode: false });
    ignoreErrors(limited);
    let etag: string;
    try {
      // What S3 refuses at the upload (metadata over 2 KB, CR/LF in a value, a name that is no
      // header token) is refused here too, before a byte is stored; stored fields go back out as
      // headers, so they are ASCII like every header the gateway takes.
      checkStoredMetadata({ 'content-type': contentType, ...headers }, userMeta);
      etag = await deps.sink(target.bucket, key, limited, { contentType, headers, userMeta });
    } catch (error) {
      finish(false);
      throw error;
    }
    finish(true);
    return { key, etag };
  }

  req.pipe(parser);
  let result: { key: string; etag: string };
  try {
    result = await done;
  } catch (error) {
    req.unpipe(parser);
    if (fileStream !== undefined && !fileStream.destroyed) fileStream.destroy(error instanceof Error ? error : new Error(String(error)));
    throw error;
  } finally {
    clearTimeout(fieldsTimer);
    res.off('close', onClose);
  }
  const { key, etag } = result;
  // The fields as they were when the file began: one sent after it cannot redirect the answer.
  const redirect = fields.get('success_action_redirect') ?? fields.get('redirect');
  // A URL that cannot be read is ignored, as S3 ignores it: the object is stored either way.
  const location = redirect !== undefined && /^https?:\/\//i.test(redirect) && URL.canParse(redirect) ? new URL(redirect) : undefined;
  if (location !== undefined) {
    location.searchParams.set('bucket', target.bucket);
    location.searchParams.set('key', key);
    location.searchParams.set('etag', `"${etag}"`);
    sendEmpty(res, 303, { location: location.toString(), etag: `"${etag}"` });
    return;
  }
  const status = fields.get('success_action_status');
  if (status === '201') {
    sendXml(res, 201, buildXml('PostResponse', { Location: `/${target.bucket}/${encodeURI(key)}`, Bucket: target.bucket, Key: key, ETag: `"${etag}"` }, false), {
      etag: `"${etag}"`,
    });
    return;
  }
  sendEmpty(res, status === '200' ? 200 : 204, { etag: `"${etag}"`, location: `/${target.bucket}/${encodeURI(key)}` });
}

/** The embedded store as the destination of form uploads. */
export function localPostSink(store: LocalStore): PostSink {
  return async (bucket, key, body, attributes) => {
    if (!store.hasBucket(bucket)) {
      body.resume();
      throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
    }
    return (await store.putObject(bucket, key, body, attributes)).etag;
  };
}

/**
 * The S3 backend as the destination: the file is staged on local disk (a PUT needs its length
 * before its body, and a form part's length is known only at its end), then PUT with the form's
 * Content-Type, headers and metadata. The staged copy is removed whatever happens.
 */
export function backendPostSink(backend: S3Backend): PostSink {
  return async (bucket, key, body, attributes) => {
    const dir = await mkdtemp(join(tmpdir(), 'objectcache-post-'));
    try {
      const path = join(dir, 'file');
      await pipeline(body, createWriteStream(path));
      const { size } = await stat(path);
      const headers: Record<string, string> = { 'content-type': attributes.contentType, 'content-length': String(size), ...attributes.headers };
      for (const [name, value] of Object.entries(attributes.userMeta)) headers[`x-amz-meta-${name}`] = value;
      const response = await backend.request({ method: 'PUT', path: escapeUriPath(`/${bucket}/${key}`), headers, body: createReadStream(path), payloadHash: UNSIGNED_PAYLOAD });
      const text = await response.body.text();
      if (response.statusCode !== 200) {
        const code = /<Code>([^<]*)<\/Code>/.exec(text)?.[1];
        if (code === 'NoSuchBucket') throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
        throw new ObjectCacheError(
          response.statusCode >= 500 ? 'OC_ERR_BACKEND_UNAVAILABLE' : 'OC_ERR_BACKEND_PROTOCOL',
          `The object store answered ${response.statusCode} ${code ?? ''} to the upload`,
        );
      }
      return String(response.headers['etag'] ?? '').replace(/"/g, '');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
}
