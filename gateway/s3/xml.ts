/**
 * S3 XML in and out, through fast-xml-parser. Response shapes follow the S3 API reference
 * (https://docs.aws.amazon.com/AmazonS3/latest/API/); request bodies are validated before they
 * are read so that malformed XML is a MalformedXML error, not a half-parsed object.
 *
 * A request body is first bounded by a linear scan (scanXmlBody) to what an S3 body can hold:
 * the parser runs on the main thread and spends 0.2-0.4 s per MB of empty elements, so a
 * hostile body must be refused before it is parsed. Document types and entity declarations are
 * refused outright (S3 bodies never need them; they are where XXE and expansion attacks live),
 * and every failure of the validator or the parser is MalformedXML, never an internal error.
 */
import { XMLBuilder, XMLParser, XMLValidator } from 'fast-xml-parser';
import { ObjectCacheError } from '../../schemas/errors.js';

export const S3_XMLNS = 'http://s3.amazonaws.com/doc/2006-03-01/';

/** The largest XML request body read (DeleteObjects of 1000 keys of 1 KiB fits). */
export const MAX_XML_BODY_BYTES = 2 * 1024 * 1024;

/**
 * The most elements a body with each root may hold, from the S3 API reference (comments and
 * CDATA sections count as elements; clients send none).
 */
export const MAX_XML_ELEMENTS: Readonly<Record<string, number>> = {
  // <Delete>, <Quiet>, 1000 <Object> of <Key>, <VersionId>, <ETag>, <LastModifiedTime>, <Size>.
  Delete: 2 + 1000 * 6,
  // <CompleteMultipartUpload>, 10,000 <Part> of <PartNumber>, <ETag> and five <Checksum*>.
  CompleteMultipartUpload: 1 + 10_000 * 8,
  // <LocationConstraint>, <Location> and <Bucket> of two each, up to 50 <Tags><Tag><Key><Value>.
  CreateBucketConfiguration: 256,
};
/** The element limit of a root not listed in {@link MAX_XML_ELEMENTS}. */
const DEFAULT_MAX_ELEMENTS = 1000;
/** Deepest nesting accepted; S3 request bodies nest at most 6 deep (a lifecycle rule's filter tag). */
export const MAX_XML_DEPTH = 16;
/** Attributes in the whole body; S3 bodies carry an xmlns or two (xsi:type in ACL grants). */
export const MAX_XML_ATTRIBUTES = 256;
/**
 * The longest run of text, or tag with its attribute values, in characters. The parser spends
 * 3-5 times longer per byte on one long run than on many short ones; the longest S3 text is an
 * object key (1024 bytes, at most 10 characters each as a character reference).
 */
export const MAX_XML_RUN = 65_536;

const builder = new XMLBuilder({ ignoreAttributes: false, suppressEmptyNode: false, suppressBooleanAttributes: false });

const parser = new XMLParser({
  ignoreAttributes: true,
  parseTagValue: false,
  trimValues: false,
  processEntities: true,
  // Numeric character references (&#13;, &#x74;) are decoded, as Go's encoding/xml does at MinIO.
  htmlEntities: true,
  isArray: (name) => name === 'Part' || name === 'Object',
});

/** Serialises `{ Root: {...} }` with the XML declaration; `xmlns` is added to the root element. */
export function buildXml(root: string, body: Record<string, unknown>, withNamespace = true): string {
  const element = withNamespace ? { '@_xmlns': S3_XMLNS, ...body } : body;
  return builder.build({ '?xml': { '@_version': '1.0', '@_encoding': 'UTF-8' }, [root]: element });
}

export interface ErrorXmlFields {
  readonly code: string;
  readonly message: string;
  readonly resource: string;
  readonly requestId: string;
  readonly details?: Readonly<Record<string, string | number>>;
}

/** The S3 error document: Code, Message, the operation's details, Resource, RequestId. */
export function errorXml(fields: ErrorXmlFields): string {
  const body: Record<string, unknown> = { Code: fields.code, Message: fields.message };
  for (const [key, value] of Object.entries(fields.details ?? {})) body[key] = value;
  body['Resource'] = fields.resource;
  body['RequestId'] = fields.requestId;
  return buildXml('Error', body, false);
}

function malformed(message: string, cause?: unknown): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', message, cause === undefined ? {} : { cause });
}

const LT = 0x3c;
const GT = 0x3e;
const BANG = 0x21;
const QUESTION = 0x3f;
const SLASH = 0x2f;
const EQUALS = 0x3d;
const DOUBLE_QUOTE = 0x22;
const SINGLE_QUOTE = 0x27;

/**
 * Refuses, as MalformedXML, a body that no S3 request of this root can be: more elements than
 * {@link MAX_XML_ELEMENTS}, deeper than {@link MAX_XML_DEPTH}, more attributes than
 * {@link MAX_XML_ATTRIBUTES}, text or a tag longer than {@link MAX_XML_RUN}, more than one
 * processing instruction (the XML declaration), or any `<!DOCTYPE`, `<!ENTITY` or other markup
 * declaration. One pass: text is skipped with indexOf,
 * only markup is looked at, and the scan stops at the first limit crossed. It bounds the work of
 * the validator and parser; well-formedness is theirs to judge.
 */
export function scanXmlBody(xml: string, root: string): void {
  const maxElements = MAX_XML_ELEMENTS[root] ?? DEFAULT_MAX_ELEMENTS;
  const length = xml.length;
  let elements = 0;
  let attributes = 0;
  let instructions = 0;
  let depth = 0;
  let i = 0;
  for (;;) {
    const lt = xml.indexOf('<', i);
    if ((lt === -1 ? length : lt) - i > MAX_XML_RUN) throw tooLong();
    if (lt === -1) return;
    const next = xml.charCodeAt(lt + 1);
    if (next === BANG) {
      let end: number;
      if (xml.startsWith('!--', lt + 1)) end = xml.indexOf('-->', lt + 4) + 3;
      else if (xml.startsWith('![CDATA[', lt + 1)) end = xml.indexOf(']]>', lt + 9) + 3;
      else throw malformed('The XML body contains a document type or markup declaration (<!DOCTYPE, <!ENTITY, ...); S3 request bodies never need one');
      if (end === 2) throw malformed('The XML body has an unterminated comment or CDATA section');
      if (++elements > maxElements) throw tooMany(root, maxElements);
      i = end;
    } else if (next === QUESTION) {
      if (++instructions > 1) throw malformed('The XML body has more than one processing instruction; an S3 request body has at most the XML declaration');
      const end = xml.indexOf('?>', lt + 2);
      if (end === -1) throw malformed('The XML body has an unterminated processing instruction');
      i = end + 2;
    } else if (next === SLASH) {
      depth--;
      i = lt + 2;
    } else {
      if (++elements > maxElements) throw tooMany(root, maxElements);
      // To the tag's end (a quoted attribute value may hold '>', never '<'), at most MAX_XML_RUN on.
      const stop = Math.min(length, lt + MAX_XML_RUN);
      let j = lt + 1;
      for (; j < stop; j++) {
        const c = xml.charCodeAt(j);
        if (c === GT) break;
        if (c === EQUALS) {
          if (++attributes > MAX_XML_ATTRIBUTES)
            throw malformed(`The XML body has more than ${MAX_XML_ATTRIBUTES} attributes; S3 request bodies carry a namespace declaration or two`);
        } else if (c === DOUBLE_QUOTE || c === SINGLE_QUOTE) {
          j = xml.indexOf(c === DOUBLE_QUOTE ? '"' : "'", j + 1);
          if (j === -1) throw malformed('The XML body has an unterminated attribute value');
        } else if (c === LT) {
          throw malformed('The XML body has an unterminated tag');
        }
      }
      if (j >= stop) throw stop < length ? tooLong() : malformed('The XML body has an unterminated tag');
      if (xml.charCodeAt(j - 1) !== SLASH && ++depth > MAX_XML_DEPTH) {
        throw malformed(`The XML body nests elements more than ${MAX_XML_DEPTH} deep; S3 request bodies nest a few levels`);
      }
      i = j + 1;
    }
  }
}

function tooLong(): ObjectCacheError {
  return malformed(`The XML body has a run of text or a tag over ${MAX_XML_RUN} characters; the longest S3 text is an object key of 1024 bytes`);
}

function tooMany(root: string, max: number): ObjectCacheError {
  return malformed(`The XML body has more than ${max} elements, more than a <${root}> request can hold`);
}

/** Parses a request body; anything that is not well-formed XML with the expected root is MalformedXML. */
export function parseXmlBody(xml: string, root: string): Record<string, unknown> {
  if (xml.trim() === '') throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', `The request body is empty; expected <${root}>`);
  scanXmlBody(xml, root);
  // The validator reports what it finds; the parser throws (its own limits, names it refuses
  // such as __proto__): either way the body is what is wrong, never the gateway.
  let valid: ReturnType<typeof XMLValidator.validate>;
  try {
    valid = XMLValidator.validate(xml);
  } catch (error) {
    throw malformed(`The XML body is not well formed: ${error instanceof Error ? error.message : String(error)}`, error);
  }
  if (valid !== true) {
    throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', `The XML body is not well formed: ${valid.err.msg} (line ${valid.err.line})`);
  }
  let document: Record<string, unknown>;
  try {
    document = parser.parse(xml) as Record<string, unknown>;
  } catch (error) {
    throw malformed(`The XML body cannot be read: ${error instanceof Error ? error.message : String(error)}`, error);
  }
  const element = document[root];
  if (element === undefined) throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', `The XML body must have the root element <${root}>`);
  if (element === '' || typeof element === 'string') return {};
  return element as Record<string, unknown>;
}

/** Reads an optional text child of a parsed element. */
export function xmlText(element: Record<string, unknown>, name: string): string | undefined {
  const value = element[name];
  if (value === undefined) return undefined;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', `<${name}> must hold text`);
}

/** Reads the repeated children of a parsed element (always an array, see `isArray`). */
export function xmlList(element: Record<string, unknown>, name: string): Record<string, unknown>[] {
  const value = element[name];
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', `<${name}> is malformed`);
  return value.map((item) => (typeof item === 'object' && item !== null ? (item as Record<string, unknown>) : {}));
}
