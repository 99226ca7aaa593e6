/**
 * S3 XML in and out, through fast-xml-parser. Response shapes follow the S3 API reference
 * (https://docs.aws.amazon.com/AmazonS3/latest/API/); request bodies are validated before they
 * are read so that malformed XML is a MalformedXML error, not a half-parsed object.
 */
import { XMLBuilder, XMLParser, XMLValidator } from 'fast-xml-parser';
import { ObjectCacheError } from '../../schemas/errors.js';

export const S3_XMLNS = 'http://s3.amazonaws.com/doc/2006-03-01/';

/** The largest XML request body read (DeleteObjects of 1000 keys of 1 KiB fits). */
export const MAX_XML_BODY_BYTES = 2 * 1024 * 1024;

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
  return builder.build({ '?xml': { '@_version': '1.0', '@_encoding': 'UTF-8' }, [root]: element }) as string;
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

/** Parses a request body; anything that is not well-formed XML with the expected root is MalformedXML. */
export function parseXmlBody(xml: string, root: string): Record<string, unknown> {
  if (xml.trim() === '') throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', `The request body is empty; expected <${root}>`);
  const valid = XMLValidator.validate(xml);
  if (valid !== true) {
    throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', `The XML body is not well formed: ${valid.err.msg} (line ${valid.err.line})`);
  }
  const document = parser.parse(xml) as Record<string, unknown>;
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
