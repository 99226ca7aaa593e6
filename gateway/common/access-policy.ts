/**
 * Access policies: the subset of the AWS IAM policy language (as MinIO speaks it) that the
 * gateway enforces per access key. docs/access-control.md documents the format.
 *
 *     {"Version": "2012-10-17", "Statement": [
 *       {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"], "Resource": "arn:aws:s3:::kv/team-a/*"},
 *       {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::kv",
 *        "Condition": {"StringLike": {"s3:prefix": "team-a/*"}}}]}
 *
 * Evaluation is IAM's: an explicit Deny that matches wins, else an Allow that matches allows,
 * else the request is denied. `*` and `?` are wildcards in actions (case-insensitive) and in
 * resources (case-sensitive, `*` crossing `/`; `?` is one Unicode code point, so one emoji and
 * not half of one), matched against the whole ARN of the bucket
 * (`arn:aws:s3:::bucket`) or object (`arn:aws:s3:::bucket/key`). Everything outside the subset
 * (NotAction, NotResource, Principal, policy variables, other condition operators or keys, an
 * action no S3 operation of the gateway checks) is refused when the policy is loaded, never
 * ignored: an ignored clause would widen or narrow access silently.
 */

import { ObjectCacheError } from '../../schemas/errors.js';

/**
 * The actions the gateway checks. `objectcache:ActAsTenant` lets a descriptor name a tenant;
 * `objectcache:PinObject` lets a key retain chunks of a budgeted bucket (gateway/capacity/).
 */
export const ACTIONS = [
  's3:ListAllMyBuckets',
  's3:CreateBucket',
  's3:DeleteBucket',
  's3:ListBucket',
  's3:ListBucketVersions',
  's3:ListBucketMultipartUploads',
  's3:GetBucketLocation',
  's3:GetBucketAcl',
  's3:PutBucketAcl',
  's3:GetBucketPolicy',
  's3:PutBucketPolicy',
  's3:DeleteBucketPolicy',
  's3:GetBucketTagging',
  's3:PutBucketTagging',
  's3:GetBucketVersioning',
  's3:PutBucketVersioning',
  's3:GetLifecycleConfiguration',
  's3:PutLifecycleConfiguration',
  's3:GetBucketCORS',
  's3:PutBucketCORS',
  's3:GetEncryptionConfiguration',
  's3:PutEncryptionConfiguration',
  's3:GetBucketNotification',
  's3:PutBucketNotification',
  's3:GetBucketObjectLockConfiguration',
  's3:PutBucketObjectLockConfiguration',
  's3:GetReplicationConfiguration',
  's3:PutReplicationConfiguration',
  's3:GetObject',
  's3:GetObjectVersion',
  's3:PutObject',
  's3:DeleteObject',
  's3:DeleteObjectVersion',
  's3:GetObjectAttributes',
  's3:GetObjectAcl',
  's3:PutObjectAcl',
  's3:GetObjectTagging',
  's3:PutObjectTagging',
  's3:DeleteObjectTagging',
  's3:GetObjectRetention',
  's3:PutObjectRetention',
  's3:GetObjectLegalHold',
  's3:PutObjectLegalHold',
  's3:RestoreObject',
  's3:ListMultipartUploadParts',
  's3:AbortMultipartUpload',
  's3:BypassGovernanceRetention',
  'objectcache:ActAsTenant',
  'objectcache:PinObject',
] as const;

export type Action = (typeof ACTIONS)[number];

/** The ARN of a bucket, or of an object when `key` is given. */
export function s3Arn(bucket: string, key?: string): string {
  return key === undefined ? `arn:aws:s3:::${bucket}` : `arn:aws:s3:::${bucket}/${key}`;
}

/** The resource `objectcache:ActAsTenant` is checked on. */
export function tenantArn(tenant: string): string {
  return `arn:objectcache:::tenant/${tenant}`;
}

/** Condition values of a request: `s3:prefix` and `s3:delimiter` of list operations. */
export type ConditionContext = Readonly<Partial<Record<ConditionKey, string>>>;
type ConditionKey = 's3:prefix' | 's3:delimiter';
const CONDITION_KEYS: readonly ConditionKey[] = ['s3:prefix', 's3:delimiter'];
type Operator = 'StringEquals' | 'StringNotEquals' | 'StringLike' | 'StringNotLike';
const OPERATORS: readonly Operator[] = ['StringEquals', 'StringNotEquals', 'StringLike', 'StringNotLike'];

/**
 * A policy that cannot be loaded: an invalid setting (OC_ERR_CONFIG_INVALID, schemas/errors.ts),
 * which gateway/common/config.ts reports as the ConfigError of the file it came from. `where` names the
 * offending place (`team-a.Statement[1].Action`), also the error's `Where` detail.
 */
export class PolicyError extends ObjectCacheError {
  readonly where: string;
  constructor(where: string, message: string) {
    super('OC_ERR_CONFIG_INVALID', `${where}: ${message}`, { details: { Where: where } });
    this.where = where;
  }
}

/**
 * A wildcard pattern (`*` any run of characters, `?` one character), compiled to the cheapest
 * test: equality, a prefix, or the general matcher. A character is a Unicode code point, not a
 * UTF-16 unit: `secret-?/*` must match `secret-😀/doc` (two units), or a Deny written that way
 * would miss every key with an astral character in that place.
 */
export type Matcher = (text: string) => boolean;

export function wildcard(pattern: string, ignoreCase = false): Matcher {
  if (ignoreCase) {
    const folded = wildcard(pattern.toLowerCase());
    return (text) => folded(text.toLowerCase());
  }
  const star = pattern.indexOf('*');
  const question = pattern.includes('?');
  if (star === -1 && !question) return (text) => text === pattern;
  if (!question && star === pattern.length - 1) {
    const prefix = pattern.slice(0, -1);
    return prefix === '' ? () => true : (text) => text.startsWith(prefix);
  }
  return (text) => globMatch(pattern, text);
}

const STAR = 0x2a;
const QUESTION = 0x3f;

/** UTF-16 units of the code point at `i`: 2 for a surrogate pair, else 1 (a lone surrogate is one). */
function unitsAt(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c < 0xd800 || c > 0xdbff) return 1;
  const next = text.charCodeAt(i + 1);
  return next >= 0xdc00 && next <= 0xdfff ? 2 : 1;
}

/**
 * Wildcard matching without backtracking blow-up: the classic two-index scan that remembers the
 * last `*` only, O(pattern x text) at worst (keys are at most 1 KiB). `?` and each step of `*`
 * advance by a code point, so the text is never split inside a surrogate pair; literals compare
 * unit by unit, which for aligned positions is comparing code points.
 */
function globMatch(pattern: string, text: string): boolean {
  const patternLength = pattern.length;
  const textLength = text.length;
  let p = 0;
  let t = 0;
  let starP = -1;
  let starT = 0;
  while (t < textLength) {
    const c = p < patternLength ? pattern.charCodeAt(p) : -1;
    if (c === STAR) {
      starP = p++;
      starT = t;
    } else if (c === QUESTION) {
      p++;
      t += unitsAt(text, t);
    } else if (c !== -1 && c === text.charCodeAt(t)) {
      p++;
      t++;
    } else if (starP !== -1) {
      p = starP + 1;
      starT += unitsAt(text, starT);
      t = starT;
    } else {
      return false;
    }
  }
  while (p < patternLength && pattern.charCodeAt(p) === STAR) p++;
  return p === patternLength;
}

/**
 * Whether the resource pattern matches `prefix` followed by some non-empty text: a simulation of
 * the pattern as an automaton over the prefix's code points (the prefix is a bucket's ARN, tens
 * of characters), then any unconsumed pattern can match something non-empty.
 */
function matchesBeyond(pattern: string, prefix: string): boolean {
  const closure = (positions: Iterable<number>): Set<number> => {
    const out = new Set<number>();
    for (let p of positions) {
      out.add(p);
      while (pattern.charCodeAt(p) === STAR) out.add(++p);
    }
    return out;
  };
  let states = closure([0]);
  for (const ch of prefix) {
    const code = ch.codePointAt(0);
    const next: number[] = [];
    for (const p of states) {
      if (p >= pattern.length) continue;
      const c = pattern.charCodeAt(p);
      if (c === STAR) next.push(p);
      else if (c === QUESTION) next.push(p + 1);
      else if (pattern.codePointAt(p) === code) next.push(p + ch.length);
    }
    if (next.length === 0) return false;
    states = closure(next);
  }
  for (const p of states) if (p < pattern.length) return true;
  return false;
}

interface Condition {
  readonly operator: Operator;
  readonly key: ConditionKey;
  readonly values: readonly Matcher[];
}

interface Statement {
  readonly sid: string | undefined;
  readonly effect: 'Allow' | 'Deny';
  readonly actions: ReadonlySet<Action>;
  readonly resources: readonly Matcher[];
  /** The resource patterns as written (for {@link AccessPolicy.objectChecker} and {@link AccessPolicy.mayEverOnSomeObject}). */
  readonly patterns: readonly string[];
  readonly conditions: readonly Condition[];
}

/**
 * A resource pattern narrowed to the objects of one bucket: a matcher of the key alone when the
 * pattern spells out `arn:aws:s3:::bucket/` before its first wildcard, else of the whole ARN.
 * Undefined when no object of the bucket can match.
 */
function objectMatcher(pattern: string, bucketArn: string): Matcher | undefined {
  const wild = pattern.search(/[*?]/);
  const literal = wild === -1 ? pattern : pattern.slice(0, wild);
  if (literal.length >= bucketArn.length) return literal.startsWith(bucketArn) ? wildcard(pattern.slice(bucketArn.length)) : undefined;
  if (!bucketArn.startsWith(literal)) return undefined;
  // A wildcard within the bucket part (`*`, `arn:aws:s3:::kv*`): match the whole ARN.
  if (wild === pattern.length - 1 && pattern.endsWith('*')) return () => true;
  const whole = wildcard(pattern);
  return (key) => whole(bucketArn + key);
}

function conditionHolds(condition: Condition, context: ConditionContext): boolean {
  const value = context[condition.key];
  const negated = condition.operator === 'StringNotEquals' || condition.operator === 'StringNotLike';
  // IAM: a key the request does not carry fails a positive operator and satisfies a negated one.
  if (value === undefined) return negated;
  const any = condition.values.some((match) => match(value));
  return negated ? !any : any;
}

function statementMatches(statement: Statement, action: Action, resource: string, context: ConditionContext): boolean {
  return statement.actions.has(action) && statement.resources.some((match) => match(resource)) && statement.conditions.every((condition) => conditionHolds(condition, context));
}

/** The outcome of one check, and the statement that decided it (for the refusal's message). */
export type Decision = { readonly allowed: true } | { readonly allowed: false; readonly explicit: boolean; readonly sid: string | undefined };

const ALLOWED: Decision = { allowed: true };
const IMPLICIT_DENY: Decision = { allowed: false, explicit: false, sid: undefined };

/** The statements that apply to one access key, evaluated together. */
export class AccessPolicy {
  /** May do everything: the administrator key. */
  static readonly unrestricted = new AccessPolicy([], true);

  readonly #statements: readonly Statement[];
  readonly #denies: readonly Statement[];
  readonly #allows: readonly Statement[];
  readonly unrestricted: boolean;

  constructor(statements: readonly Statement[], unrestricted = false) {
    this.#statements = statements;
    this.#denies = statements.filter((s) => s.effect === 'Deny');
    this.#allows = statements.filter((s) => s.effect === 'Allow');
    this.unrestricted = unrestricted;
  }

  /** No statement at all: the key may do nothing. */
  get empty(): boolean {
    return !this.unrestricted && this.#statements.length === 0;
  }

  decide(action: Action, resource: string, context: ConditionContext = {}): Decision {
    if (this.unrestricted) return ALLOWED;
    for (const statement of this.#denies) {
      if (statementMatches(statement, action, resource, context)) return { allowed: false, explicit: true, sid: statement.sid };
    }
    for (const statement of this.#allows) if (statementMatches(statement, action, resource, context)) return ALLOWED;
    return IMPLICIT_DENY;
  }

  /**
   * The decision for `action` on each object of `bucket`, specialised once for the bucket: the
   * check of a descriptor's thousands of keys then compares each key with the key part of the
   * patterns (no ARN is built per key; measured in bench/access-check-cost.ts).
   */
  objectChecker(action: Action, bucket: string): (key: string) => Decision {
    if (this.unrestricted) return () => ALLOWED;
    const bucketArn = s3Arn(bucket, '');
    const narrow = (statements: readonly Statement[]): { sid: string | undefined; matchers: Matcher[] }[] =>
      statements
        .filter((s) => s.actions.has(action) && s.conditions.every((condition) => conditionHolds(condition, {})))
        .map((s) => ({ sid: s.sid, matchers: s.patterns.map((pattern) => objectMatcher(pattern, bucketArn)).filter((m): m is Matcher => m !== undefined) }))
        .filter((s) => s.matchers.length > 0);
    const denies = narrow(this.#denies);
    const allows = narrow(this.#allows).flatMap((s) => s.matchers);
    return (key) => {
      for (const deny of denies) {
        for (const match of deny.matchers) if (match(key)) return { allowed: false, explicit: true, sid: deny.sid };
      }
      for (const match of allows) if (match(key)) return ALLOWED;
      return IMPLICIT_DENY;
    };
  }

  /**
   * Whether one of `actions` could be allowed on some object of `bucket`: some Allow statement
   * names one of them with a resource pattern that matches `arn:aws:s3:::bucket/<some key>`,
   * conditions ignored. Denies are ignored too, so it may answer yes for a key every object of
   * the bucket is denied to: it is the cheap refusal before a request's body is read (a key that
   * could never delete anything there makes the gateway parse no DeleteObjects XML), never the
   * decision, which is made per key once the body is read.
   */
  mayEverOnSomeObject(actions: readonly Action[], bucket: string): boolean {
    if (this.unrestricted) return true;
    const prefix = s3Arn(bucket, '');
    return this.#allows.some((s) => actions.some((action) => s.actions.has(action)) && s.patterns.some((pattern) => matchesBeyond(pattern, prefix)));
  }

  allows(action: Action, resource: string, context: ConditionContext = {}): boolean {
    return this.decide(action, resource, context).allowed;
  }

  /**
   * Whether some request of `action` on `resource` could be allowed whatever its conditions: an
   * Allow matches ignoring its conditions, and no unconditional Deny matches. ListBuckets shows
   * the buckets a key may list at least in part this way.
   */
  mayEver(action: Action, resource: string): boolean {
    if (this.unrestricted) return true;
    if (this.#denies.some((s) => s.conditions.length === 0 && statementMatches(s, action, resource, {}))) return false;
    return this.#allows.some((s) => s.actions.has(action) && s.resources.some((match) => match(resource)));
  }

  /** The statements of several policies attached to one key, evaluated as one. */
  static combine(policies: readonly AccessPolicy[]): AccessPolicy {
    if (policies.some((p) => p.unrestricted)) return AccessPolicy.unrestricted;
    return new AccessPolicy(policies.flatMap((p) => p.#statements));
  }
}

// --- parsing -------------------------------------------------------------------------------

const VERSIONS = new Set(['2012-10-17', '2008-10-17']);
const DOCUMENT_FIELDS = new Set(['Version', 'Id', 'Statement']);
const STATEMENT_FIELDS = new Set(['Sid', 'Effect', 'Action', 'Resource', 'Condition']);
const UNSUPPORTED_FIELDS: Record<string, string> = {
  NotAction: 'NotAction is not supported; list the actions to allow or deny',
  NotResource: 'NotResource is not supported; list the resources',
  Principal: 'Principal belongs to bucket policies; an access policy applies to the keys it is attached to',
  NotPrincipal: 'NotPrincipal belongs to bucket policies; an access policy applies to the keys it is attached to',
};

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A string or a non-empty array of strings, as IAM allows for Action, Resource and values. */
function stringList(value: unknown, where: string, what: string): string[] {
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.length === 0 || list.some((v) => typeof v !== 'string' || v === '')) {
    throw new PolicyError(where, `${what} must be a non-empty string or a non-empty array of non-empty strings`);
  }
  return list as string[];
}

function parseActions(value: unknown, where: string): Set<Action> {
  const actions = new Set<Action>();
  for (const pattern of stringList(value, where, 'Action')) {
    if (!/^[A-Za-z0-9:*?]+$/.test(pattern) || (pattern !== '*' && !pattern.includes(':'))) {
      throw new PolicyError(where, `${JSON.stringify(pattern)} is not an action such as s3:GetObject`);
    }
    const match = wildcard(pattern, true);
    const covered = ACTIONS.filter((action) => match(action));
    if (covered.length === 0) {
      throw new PolicyError(where, `${JSON.stringify(pattern)} names no action the gateway checks (see docs/access-control.md for the list)`);
    }
    for (const action of covered) actions.add(action);
  }
  return actions;
}

function parseResources(value: unknown, where: string): string[] {
  return stringList(value, where, 'Resource').map((pattern) => {
    if (pattern.includes('${')) throw new PolicyError(where, `${JSON.stringify(pattern)}: policy variables (\${...}) are not supported`);
    if (pattern !== '*' && !pattern.startsWith('arn:aws:s3:::') && !pattern.startsWith('arn:objectcache:::tenant/')) {
      throw new PolicyError(where, `${JSON.stringify(pattern)} is not arn:aws:s3:::bucket, arn:aws:s3:::bucket/key-pattern, arn:objectcache:::tenant/name or *`);
    }
    if (pattern === 'arn:aws:s3:::' || pattern === 'arn:objectcache:::tenant/') throw new PolicyError(where, `${JSON.stringify(pattern)} names no bucket or tenant`);
    return pattern;
  });
}

function parseConditions(value: unknown, where: string): Condition[] {
  if (value === undefined) return [];
  if (!isObject(value)) throw new PolicyError(where, 'Condition must be an object of operators');
  const conditions: Condition[] = [];
  for (const [operator, block] of Object.entries(value)) {
    if (!(OPERATORS as readonly string[]).includes(operator)) {
      throw new PolicyError(where, `the condition operator ${JSON.stringify(operator)} is not supported (supported: ${OPERATORS.join(', ')})`);
    }
    if (!isObject(block) || Object.keys(block).length === 0) throw new PolicyError(where, `Condition.${operator} must be an object of condition keys`);
    for (const [name, values] of Object.entries(block)) {
      const key = CONDITION_KEYS.find((k) => k === name.toLowerCase());
      if (key === undefined) throw new PolicyError(where, `the condition key ${JSON.stringify(name)} is not supported (supported: ${CONDITION_KEYS.join(', ')})`);
      const like = operator === 'StringLike' || operator === 'StringNotLike';
      const list = typeof values === 'string' ? [values] : values;
      if (!Array.isArray(list) || list.length === 0 || list.some((v) => typeof v !== 'string')) {
        throw new PolicyError(where, `Condition.${operator}.${name} must be a string or a non-empty array of strings`);
      }
      conditions.push({ operator: operator as Operator, key, values: (list as string[]).map((v) => (like ? wildcard(v) : (text: string) => text === v)) });
    }
  }
  return conditions;
}

/** Parses and checks one policy document; `where` prefixes every error (the policy's name). */
export function parseAccessPolicy(document: unknown, where: string): AccessPolicy {
  if (!isObject(document)) throw new PolicyError(where, 'a policy must be a JSON object {"Version": "2012-10-17", "Statement": [...]}');
  for (const field of Object.keys(document)) {
    if (!DOCUMENT_FIELDS.has(field)) throw new PolicyError(where, `${JSON.stringify(field)} is not a policy field (Version, Id, Statement)`);
  }
  const version = document['Version'];
  if (version !== undefined && (typeof version !== 'string' || !VERSIONS.has(version))) {
    throw new PolicyError(`${where}.Version`, `must be "2012-10-17" (or "2008-10-17"), got ${JSON.stringify(version)}`);
  }
  const raw = document['Statement'];
  const list = isObject(raw) ? [raw] : raw;
  if (!Array.isArray(list) || list.length === 0) throw new PolicyError(`${where}.Statement`, 'must be a statement or a non-empty array of statements');
  const sids = new Set<string>();
  const statements = list.map((entry: unknown, index): Statement => {
    const at = `${where}.Statement[${index}]`;
    if (!isObject(entry)) throw new PolicyError(at, 'a statement must be an object');
    for (const field of Object.keys(entry)) {
      const unsupported = UNSUPPORTED_FIELDS[field];
      if (unsupported !== undefined) throw new PolicyError(at, unsupported);
      if (!STATEMENT_FIELDS.has(field)) throw new PolicyError(at, `${JSON.stringify(field)} is not a statement field (Sid, Effect, Action, Resource, Condition)`);
    }
    const sid = entry['Sid'];
    if (sid !== undefined) {
      if (typeof sid !== 'string' || !/^[A-Za-z0-9]*$/.test(sid)) throw new PolicyError(`${at}.Sid`, 'must be letters and digits');
      if (sid !== '' && sids.has(sid)) throw new PolicyError(`${at}.Sid`, `${JSON.stringify(sid)} is used by two statements of the policy`);
      sids.add(sid);
    }
    const effect = entry['Effect'];
    if (effect !== 'Allow' && effect !== 'Deny') throw new PolicyError(`${at}.Effect`, `must be "Allow" or "Deny", got ${JSON.stringify(effect)}`);
    if (entry['Action'] === undefined) throw new PolicyError(at, 'a statement needs an Action');
    if (entry['Resource'] === undefined) throw new PolicyError(at, 'a statement needs a Resource');
    const patterns = parseResources(entry['Resource'], `${at}.Resource`);
    return {
      sid: typeof sid === 'string' && sid !== '' ? sid : undefined,
      effect,
      actions: parseActions(entry['Action'], `${at}.Action`),
      resources: patterns.map((pattern) => wildcard(pattern)),
      patterns,
      conditions: parseConditions(entry['Condition'], `${at}.Condition`),
    };
  });
  return new AccessPolicy(statements);
}
