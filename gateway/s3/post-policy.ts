/**
 * The policy of a browser-form POST upload (S3 "POST policy"), evaluated as S3 and MinIO do:
 * the base64 JSON `{"expiration", "conditions"}` must not have expired; every condition must
 * hold (`{"field": "value"}` and `["eq", "$field", "value"]` exact, `["starts-with", "$field",
 * "prefix"]`, `["content-length-range", min, max]` on the file's size); and every form field must
 * be named by a condition, except the signature fields, `policy`, `file` and `x-ignore-*`.
 * https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-HTTPPOSTConstructPolicy.html
 */
import { ObjectCacheError } from '../../schemas/errors.js';

/** Form fields no condition has to name. */
const EXEMPT = new Set(['x-amz-signature', 'signature', 'awsaccesskeyid', 'policy', 'file']);

export interface PolicyLimits {
  /** The file's allowed size, from content-length-range (inclusive). */
  readonly minBytes: number;
  readonly maxBytes: number;
}

function denied(message: string): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_POST_POLICY', `Invalid according to Policy: ${message}`);
}

function malformed(message: string): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_POST_FORM', message);
}

/**
 * Checks the decoded policy against the form fields (lowercase names; `bucket` is the request's
 * bucket) at time `now`; returns the size limits for the file.
 */
export function checkPostPolicy(policyBase64: string, fields: ReadonlyMap<string, string>, now: number): PolicyLimits {
  let policy: { expiration?: unknown; conditions?: unknown };
  try {
    policy = JSON.parse(Buffer.from(policyBase64, 'base64').toString('utf8')) as typeof policy;
  } catch {
    throw malformed('The policy is not base64-encoded JSON');
  }
  const expiration = typeof policy?.expiration === 'string' ? Date.parse(policy.expiration) : NaN;
  if (Number.isNaN(expiration)) throw malformed('The policy needs an ISO 8601 "expiration"');
  if (now > expiration) throw denied('Policy expired.');
  if (!Array.isArray(policy.conditions)) throw malformed('The policy needs a "conditions" array');
  let limits: PolicyLimits = { minBytes: 0, maxBytes: Number.MAX_SAFE_INTEGER };
  const named = new Set<string>();
  const value = (name: string): string => fields.get(name) ?? '';
  for (const condition of policy.conditions as unknown[]) {
    if (Array.isArray(condition)) {
      const [op, a, b] = condition as [unknown, unknown, unknown];
      const operator = String(op).toLowerCase();
      if (operator === 'content-length-range') {
        const min = Number(a);
        const max = Number(b);
        if (!Number.isSafeInteger(min) || !Number.isSafeInteger(max) || min < 0 || max < min) throw malformed('content-length-range needs two integers, min <= max');
        limits = { minBytes: min, maxBytes: max };
        continue;
      }
      if (typeof a !== 'string' || !a.startsWith('$') || typeof b !== 'string')
        throw malformed(`The condition ${JSON.stringify(condition)} is not of the form [op, "$field", "value"]`);
      const name = a.slice(1).toLowerCase();
      named.add(name);
      const actual = value(name);
      if (operator === 'eq') {
        if (actual !== b) throw denied(`Policy Condition failed: ["eq", "$${name}", ${JSON.stringify(b)}]`);
      } else if (operator === 'starts-with') {
        // Content-Type may list several values: each must start with the prefix.
        const values = name === 'content-type' ? actual.split(',').map((v) => v.trim()) : [actual];
        if (!values.every((v) => v.startsWith(b))) throw denied(`Policy Condition failed: ["starts-with", "$${name}", ${JSON.stringify(b)}]`);
      } else {
        throw malformed(`Unknown policy condition ${JSON.stringify(op)}`);
      }
    } else if (condition !== null && typeof condition === 'object') {
      for (const [field, expected] of Object.entries(condition as Record<string, unknown>)) {
        const name = field.toLowerCase();
        named.add(name);
        if (value(name) !== String(expected)) throw denied(`Policy Condition failed: ["eq", "$${name}", ${JSON.stringify(expected)}]`);
      }
    } else {
      throw malformed(`The condition ${JSON.stringify(condition)} is neither an object nor an array`);
    }
  }
  for (const name of fields.keys()) {
    if (name === 'bucket' || EXEMPT.has(name) || name.startsWith('x-ignore-') || named.has(name)) continue;
    throw denied(`Extra input fields: ${name}`);
  }
  return limits;
}
