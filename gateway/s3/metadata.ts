/**
 * The limits on what an object stores besides its bytes, as S3 and MinIO apply them to every
 * write that sets metadata (PutObject, CreateMultipartUpload, CopyObject with REPLACE, POST
 * Object): user metadata (x-amz-meta-*) of at most 2 KB, and names and values that can be sent
 * back as HTTP headers. Without them one upload could store metadata that no GET can answer, or a
 * footer the embedded store cannot read back (backends/embedded/object-file.ts).
 * https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingMetadata.html
 */
import { ObjectCacheError } from '../../schemas/errors.js';

/**
 * S3's limit on user metadata: the bytes of the names (without `x-amz-meta-`) and the values.
 * MinIO applies the same 2 KB but counts the prefix too, so it refuses a little earlier.
 */
export const MAX_USER_METADATA_BYTES = 2 * 1024;

/**
 * The limit on the stored headers and user metadata together: MinIO's limit on a request's
 * headers (8 KB, generic-handlers.go maxHeaderSize), so nothing stored is larger than what MinIO
 * accepts in one request.
 */
export const MAX_STORED_HEADER_BYTES = 8 * 1024;

/** An HTTP field name (RFC 9110 section 5.6.2 `token`). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * Characters a field value may not hold: controls other than tab (CR and LF among them, which
 * would split the response's headers), DEL, and anything above U+00FF, which Node cannot send in
 * a header (it throws ERR_INVALID_CHAR) because a header is one byte per character.
 */
const INVALID_VALUE = /[^\t\x20-\x7e\x80-\xff]/;

/**
 * Bytes as the value travels in a header. Node hands a received header value over one character
 * per byte (so raw UTF-8 counts its bytes), and INVALID_VALUE refuses anything wider.
 */
function headerBytes(text: string): number {
  return text.length;
}

/** The field named in an error: quoted and escaped (a bad name may hold control characters), and short. */
function invalid(field: string, problem: string): ObjectCacheError {
  const shown = JSON.stringify(field.length > 256 ? `${field.slice(0, 256)}...` : field);
  return new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `${shown} ${problem}`, { details: { ArgumentName: shown } });
}

/**
 * Checks what a write would store besides the bytes. `headers`: the representation headers kept
 * with the object (cache-control, content-disposition, ...; add content-type to have it checked
 * too). `userMeta`: the user metadata, names without the `x-amz-meta-` prefix. Strings are as Node
 * gives a received header, one character per byte; a caller holding UTF-8 decoded text (a form
 * field) converts it with `Buffer.from(value, 'utf8').toString('latin1')` first, which is also
 * what a GET must send back to return the client's bytes.
 *
 * Throws OC_ERR_REQUEST_INVALID_ARGUMENT, naming the field, for a metadata name that is not an
 * HTTP token or a value with a control character other than tab; OC_ERR_REQUEST_METADATA_TOO_LARGE
 * (400 MetadataTooLarge, as MinIO answers) for user metadata over 2 KB or headers and metadata
 * together over 8 KB. Pure.
 */
export function checkStoredMetadata(headers: Readonly<Record<string, string>>, userMeta: Readonly<Record<string, string>>): void {
  let userBytes = 0;
  let totalBytes = 0;
  for (const [name, value] of Object.entries(userMeta)) {
    const field = `x-amz-meta-${name}`;
    if (!TOKEN.test(field)) throw invalid(field, 'is not a valid metadata name: an HTTP header name has no spaces, control characters or separators');
    if (INVALID_VALUE.test(value)) throw invalid(field, 'has a value with a character a header cannot carry (a control character other than tab, CR and LF included)');
    userBytes += headerBytes(name) + headerBytes(value);
    totalBytes += headerBytes(field) + headerBytes(value);
  }
  if (userBytes > MAX_USER_METADATA_BYTES) {
    throw new ObjectCacheError('OC_ERR_REQUEST_METADATA_TOO_LARGE', `Your metadata headers exceed the maximum allowed metadata size: the user metadata takes ${userBytes} bytes, over the limit of ${MAX_USER_METADATA_BYTES}`);
  }
  for (const [name, value] of Object.entries(headers)) {
    if (!TOKEN.test(name)) throw invalid(name, 'is not a valid header name');
    if (INVALID_VALUE.test(value)) throw invalid(name, 'has a value with a character a header cannot carry (a control character other than tab, CR and LF included)');
    totalBytes += headerBytes(name) + headerBytes(value);
  }
  if (totalBytes > MAX_STORED_HEADER_BYTES) {
    throw new ObjectCacheError('OC_ERR_REQUEST_METADATA_TOO_LARGE', `Your metadata headers exceed the maximum allowed metadata size: the stored headers and user metadata take ${totalBytes} bytes, over the limit of ${MAX_STORED_HEADER_BYTES}`);
  }
}
