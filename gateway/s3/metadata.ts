/**
 * The limits on what an object stores besides its bytes, as S3 and MinIO apply them to every
 * write that sets metadata (PutObject, CreateMultipartUpload, CopyObject with REPLACE, POST
 * Object): user metadata (x-amz-meta-*) of at most 2 KB, and names and values that can be sent
 * back as HTTP headers. Without them one upload could store metadata that no GET can answer, or a
 * footer the embedded store cannot read back (gateway/stores/embedded/object-file.ts).
 * https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingMetadata.html
 */
import type { IncomingHttpHeaders } from 'node:http';
import { ObjectCacheError } from '../../schemas/errors.js';
import { MAX_USER_METADATA_BYTES } from '../../schemas/kv-tokens.js';

/** The user metadata in a request's or an answer's headers: lowercase names without `x-amz-meta-`. */
export function userMetadata(headers: IncomingHttpHeaders): Record<string, string> {
  const meta: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (name.startsWith('x-amz-meta-') && typeof value === 'string') meta[name.slice('x-amz-meta-'.length)] = value;
  return meta;
}

// MAX_USER_METADATA_BYTES (schemas/kv-tokens.ts), S3's limit on user metadata: the bytes of the
// names (without `x-amz-meta-`) and the values. MinIO applies the same 2 KB but counts the prefix
// too, so it refuses a little earlier.

/**
 * The limit on the stored headers and user metadata together: MinIO's limit on a request's
 * headers (8 KB, generic-handlers.go maxHeaderSize), so nothing stored is larger than what MinIO
 * accepts in one request.
 */
export const MAX_STORED_HEADER_BYTES = 8 * 1024;

/** An HTTP field name (RFC 9110 section 5.6.2 `token`). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * Characters a stored value may not hold: anything but tab and printable ASCII. Controls (CR and
 * LF among them) would split the response's headers; bytes over 0x7f the gateway refuses in every
 * header it reads or forwards (gateway/pipeline/server.ts), since Node reads them as latin1 and the store
 * as UTF-8, so a value that arrived by another way (a form field) must not be stored with them
 * either. Values are counted in bytes: ASCII, one a character.
 */
const INVALID_VALUE = /[^\t\x20-\x7e]/;

/** The field named in an error: quoted and escaped (a bad name may hold control characters), and short. */
function invalid(field: string, problem: string): ObjectCacheError {
  const shown = JSON.stringify(field.length > 256 ? `${field.slice(0, 256)}...` : field);
  return new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `${shown} ${problem}`, { details: { ArgumentName: shown } });
}

/**
 * Checks what a write would store besides the bytes. `headers`: the representation headers kept
 * with the object (cache-control, content-disposition, ...; add content-type to have it checked
 * too). `userMeta`: the user metadata, names without the `x-amz-meta-` prefix.
 *
 * Throws OC_ERR_REQUEST_INVALID_ARGUMENT, naming the field, for a metadata name that is not an
 * HTTP token or a value with anything but tab and printable ASCII (RFC 2047 encodes the rest); OC_ERR_REQUEST_METADATA_TOO_LARGE
 * (400 MetadataTooLarge, as MinIO answers) for user metadata over 2 KB or headers and metadata
 * together over 8 KB. Pure.
 */
export function checkStoredMetadata(headers: Readonly<Record<string, string>>, userMeta: Readonly<Record<string, string>>): void {
  let userBytes = 0;
  let totalBytes = 0;
  for (const [name, value] of Object.entries(userMeta)) {
    const field = `x-amz-meta-${name}`;
    if (!TOKEN.test(field)) throw invalid(field, 'is not a valid metadata name: an HTTP header name has no spaces, control characters or separators');
    if (INVALID_VALUE.test(value))
      throw invalid(field, 'has a value outside printable ASCII (a control character, CR and LF included, or a byte over 0x7f; encode non-ASCII metadata with RFC 2047)');
    userBytes += name.length + value.length;
    totalBytes += field.length + value.length;
  }
  if (userBytes > MAX_USER_METADATA_BYTES) {
    throw new ObjectCacheError(
      'OC_ERR_REQUEST_METADATA_TOO_LARGE',
      `Your metadata headers exceed the maximum allowed metadata size: the user metadata takes ${userBytes} bytes, over the limit of ${MAX_USER_METADATA_BYTES}`,
    );
  }
  for (const [name, value] of Object.entries(headers)) {
    if (!TOKEN.test(name)) throw invalid(name, 'is not a valid header name');
    if (INVALID_VALUE.test(value))
      throw invalid(name, 'has a value outside printable ASCII (a control character, CR and LF included, or a byte over 0x7f; encode non-ASCII metadata with RFC 2047)');
    totalBytes += name.length + value.length;
  }
  if (totalBytes > MAX_STORED_HEADER_BYTES) {
    throw new ObjectCacheError(
      'OC_ERR_REQUEST_METADATA_TOO_LARGE',
      `Your metadata headers exceed the maximum allowed metadata size: the stored headers and user metadata take ${totalBytes} bytes, over the limit of ${MAX_STORED_HEADER_BYTES}`,
    );
  }
}
