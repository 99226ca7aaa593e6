/**
 * The access-policy language and its files, without a server: IAM evaluation (explicit Deny wins,
 * default deny, wildcards, conditions), every malformed or contradictory policy or credentials
 * file refused at start-up with a message that says where, and protected mode (the published
 * trial secret is served on loopback only).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ACTIONS, AccessPolicy, parseAccessPolicy, PolicyError, s3Arn, wildcard } from '../gateway/common/access-policy.js';
import { requirementOf } from '../gateway/s3/auth/access.js';
import { ConfigError, isLoopback, loadServeConfig } from '../gateway/common/config.js';
import { parseTarget } from '../gateway/s3/request.js';
import { runCli, startServe } from './helpers/cli.js';

const allow = (Action: unknown, Resource: unknown, extra: Record<string, unknown> = {}): Record<string, unknown> => ({ Effect: 'Allow', Action, Resource, ...extra });
const deny = (Action: unknown, Resource: unknown): Record<string, unknown> => ({ Effect: 'Deny', Action, Resource });
const policy = (...Statement: unknown[]): AccessPolicy => parseAccessPolicy({ Version: '2012-10-17', Statement }, 'test');

describe('policy evaluation', () => {
  it('denies by default, allows what a statement allows, and lets an explicit Deny win', () => {
    const p = policy(allow(['s3:GetObject', 's3:PutObject'], 'arn:aws:s3:::kv/*'), deny('s3:*', 'arn:aws:s3:::kv/secret/*'));
    expect(p.allows('s3:GetObject', s3Arn('kv', 'team/a'))).toBe(true);
    expect(p.allows('s3:PutObject', s3Arn('kv', 'team/a'))).toBe(true);
    expect(p.allows('s3:DeleteObject', s3Arn('kv', 'team/a'))).toBe(false);
    expect(p.allows('s3:GetObject', s3Arn('kv', 'secret/a'))).toBe(false);
    expect(p.decide('s3:GetObject', s3Arn('kv', 'secret/a'))).toEqual({ allowed: false, explicit: true, sid: undefined });
    expect(p.allows('s3:GetObject', s3Arn('kv2', 'team/a'))).toBe(false);
    expect(p.allows('s3:ListBucket', s3Arn('kv'))).toBe(false);
    expect(new AccessPolicy([]).allows('s3:GetObject', s3Arn('kv', 'x'))).toBe(false);
    expect(AccessPolicy.unrestricted.allows('s3:DeleteBucket', s3Arn('kv'))).toBe(true);
  });

  it('matches actions without case and with wildcards, and resources with case, * crossing / and ? one character', () => {
    const p = policy(allow('S3:get*', 'arn:aws:s3:::kv/team-?/*.bin'));
    expect(p.allows('s3:GetObject', s3Arn('kv', 'team-a/deep/x.bin'))).toBe(true);
    expect(p.allows('s3:GetObjectTagging', s3Arn('kv', 'team-b/x.bin'))).toBe(true);
    expect(p.allows('s3:PutObject', s3Arn('kv', 'team-a/x.bin'))).toBe(false);
    expect(p.allows('s3:GetObject', s3Arn('kv', 'team-ab/x.bin'))).toBe(false);
    expect(p.allows('s3:GetObject', s3Arn('kv', 'TEAM-a/x.bin'))).toBe(false);
    expect(p.allows('s3:GetObject', s3Arn('kv', 'team-a/x.bin.old'))).toBe(false);
    // "*" as a resource or action is everything, tenants included.
    const all = policy(allow('*', '*'));
    expect(ACTIONS.every((action) => all.allows(action, s3Arn('any', 'key')))).toBe(true);
    expect(all.allows('objectcache:ActAsTenant', 'arn:objectcache:::tenant/x')).toBe(true);
    expect(policy(allow('s3:*', 'arn:aws:s3:::*')).allows('objectcache:ActAsTenant', 'arn:objectcache:::tenant/x')).toBe(false);
  });

  it('agrees with a regular expression on random wildcard patterns, and stays fast on hostile ones', () => {
    const alphabet = 'ab/*?';
    let seed = 7;
    const next = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let i = 0; i < 3000; i++) {
      const pattern = Array.from({ length: next(8) }, () => alphabet[next(alphabet.length)]).join('');
      const text = Array.from({ length: next(10) }, () => 'ab/'[next(3)]).join('');
      const regex = new RegExp(`^${pattern.replace(/[/]/g, '\\/').replace(/\*/g, '.*').replace(/\?/g, '.')}$`, 's');
      expect(wildcard(pattern)(text), `${pattern} ~ ${text}`).toBe(regex.test(text));
    }
    const hostile = wildcard(`${'*a'.repeat(40)}*b`);
    expect(hostile('a'.repeat(1024))).toBe(false);
  });

  it("decides a bucket's keys in bulk (objectChecker) exactly as it decides their ARNs one by one", () => {
    let seed = 11;
    const next = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    const pick = <T>(list: readonly T[]): T => list[next(list.length)] as T;
    const pieces = ['kv', 'kv2', 'k', '*', '?', '/', 'a', 'b/', 'team-a/', '*/'];
    for (let round = 0; round < 300; round++) {
      const statements = Array.from({ length: 1 + next(4) }, () => {
        const resource = next(6) === 0 ? '*' : `arn:aws:s3:::${Array.from({ length: 1 + next(4) }, () => pick(pieces)).join('')}`;
        return { Effect: next(3) === 0 ? 'Deny' : 'Allow', Action: pick(['s3:GetObject', 's3:*', 's3:PutObject']), Resource: resource };
      });
      const p = parseAccessPolicy({ Statement: statements }, 'random');
      for (const bucket of ['kv', 'kv2']) {
        const check = p.objectChecker('s3:GetObject', bucket);
        for (let i = 0; i < 20; i++) {
          const key = Array.from({ length: 1 + next(4) }, () => pick(['a', 'b', 'team-a', 'kv', '*'])).join('/');
          expect(check(key), `${JSON.stringify(statements)} ${bucket}/${key}`).toEqual(p.decide('s3:GetObject', s3Arn(bucket, key)));
        }
      }
    }
  });

  it('applies s3:prefix conditions as IAM does (a missing key fails StringLike and satisfies StringNotLike)', () => {
    const p = policy(allow('s3:ListBucket', 'arn:aws:s3:::kv', { Condition: { StringLike: { 's3:prefix': ['team-a/*'] } } }));
    expect(p.allows('s3:ListBucket', s3Arn('kv'), { 's3:prefix': 'team-a/' })).toBe(true);
    expect(p.allows('s3:ListBucket', s3Arn('kv'), { 's3:prefix': 'team-b/' })).toBe(false);
    expect(p.allows('s3:ListBucket', s3Arn('kv'), { 's3:prefix': '' })).toBe(false);
    expect(p.allows('s3:ListBucket', s3Arn('kv'))).toBe(false);
    expect(p.mayEver('s3:ListBucket', s3Arn('kv'))).toBe(true);
    expect(p.mayEver('s3:ListBucket', s3Arn('other'))).toBe(false);
    const not = policy(allow('s3:ListBucket', 'arn:aws:s3:::kv', { Condition: { StringNotEquals: { 's3:delimiter': '/' } } }));
    expect(not.allows('s3:ListBucket', s3Arn('kv'))).toBe(true);
    expect(not.allows('s3:ListBucket', s3Arn('kv'), { 's3:delimiter': '/' })).toBe(false);
    const denied = parseAccessPolicy({ Statement: [allow('s3:ListBucket', 'arn:aws:s3:::kv'), deny('s3:ListBucket', 'arn:aws:s3:::kv')] }, 'test');
    expect(denied.mayEver('s3:ListBucket', s3Arn('kv'))).toBe(false);
  });

  it('refuses what it does not enforce, and says where', () => {
    const cases: [unknown, RegExp][] = [
      [[], /must be a JSON object/],
      [{ Statement: [] }, /test\.Statement: must be a statement or a non-empty array/],
      [{ Version: '2020-01-01', Statement: [allow('s3:GetObject', '*')] }, /test\.Version: must be "2012-10-17"/],
      [{ Statement: [allow('s3:GetObjects', '*')] }, /test\.Statement\[0\]\.Action: "s3:GetObjects" names no action the gateway checks/],
      [{ Statement: [allow('GetObject', '*')] }, /is not an action such as s3:GetObject/],
      [{ Statement: [{ Effect: 'allow', Action: 's3:GetObject', Resource: '*' }] }, /Effect: must be "Allow" or "Deny", got "allow"/],
      [{ Statement: [{ Effect: 'Allow', NotAction: 's3:GetObject', Resource: '*' }] }, /NotAction is not supported/],
      [{ Statement: [{ Effect: 'Allow', Action: 's3:GetObject', NotResource: '*' }] }, /NotResource is not supported/],
      [{ Statement: [{ ...allow('s3:GetObject', '*'), Principal: '*' }] }, /Principal belongs to bucket policies/],
      [{ Statement: [{ Effect: 'Allow', Action: 's3:GetObject' }] }, /needs a Resource/],
      [{ Statement: [allow('s3:GetObject', 'arn:aws:s3:::kv/${aws:username}/*')] }, /policy variables/],
      [{ Statement: [allow('s3:GetObject', 'kv/*')] }, /is not arn:aws:s3:::bucket/],
      [{ Statement: [allow('s3:GetObject', [])] }, /Resource must be a non-empty string/],
      [{ Statement: [allow('s3:GetObject', '*', { Condition: { IpAddress: { 'aws:SourceIp': '10.0.0.0/8' } } })] }, /condition operator "IpAddress" is not supported/],
      [{ Statement: [allow('s3:ListBucket', '*', { Condition: { StringLike: { 's3:max-keys': '10' } } })] }, /condition key "s3:max-keys" is not supported/],
      [
        {
          Statement: [
            { ...allow('s3:GetObject', '*'), Sid: 'A' },
            { ...allow('s3:PutObject', '*'), Sid: 'A' },
          ],
        },
        /"A" is used by two statements/,
      ],
      [{ Statement: [{ ...allow('s3:GetObject', '*'), Effects: 'Allow' }] }, /"Effects" is not a statement field/],
    ];
    for (const [document, message] of cases) {
      expect(() => parseAccessPolicy(document, 'test'), JSON.stringify(document)).toThrow(PolicyError);
      expect(() => parseAccessPolicy(document, 'test'), JSON.stringify(document)).toThrow(message);
    }
  });
});

describe('what a request needs (gateway/s3/auth/access.ts)', () => {
  const need = (method: string, url: string, headers: Record<string, string> = {}): ReturnType<typeof requirementOf> => requirementOf(method, parseTarget(url), headers);
  const checks = (r: ReturnType<typeof requirementOf>): string[] => (r.kind === 'checks' ? r.checks.map((c) => `${c.action} ${c.resource}`) : [r.kind]);

  it('checks the copy source of any request that names one, sub-resources included (MinIO routes the copy first)', () => {
    expect(checks(need('PUT', '/kvc/team-b/x', { 'x-amz-copy-source': 'kvc/team-a/secret' }))).toEqual([
      's3:PutObject arn:aws:s3:::kvc/team-b/x',
      's3:GetObject arn:aws:s3:::kvc/team-a/secret',
    ]);
    expect(checks(need('DELETE', '/kvc/team-b/x?versionId=v1', { 'x-amz-bypass-governance-retention': 'true' }))).toEqual([
      's3:DeleteObjectVersion arn:aws:s3:::kvc/team-b/x',
      's3:BypassGovernanceRetention arn:aws:s3:::kvc/team-b/x',
    ]);
    expect(checks(need('PUT', '/kvc/team-b/x?retention', { 'x-amz-copy-source': 'kvc/team-a/secret' }))).toContain('s3:GetObject arn:aws:s3:::kvc/team-a/secret');
    expect(checks(need('PUT', '/kvc/team-b/x?legal-hold', { 'x-amz-copy-source': '/kvc/team-a/secret?versionId=v1' }))).toContain(
      's3:GetObjectVersion arn:aws:s3:::kvc/team-a/secret',
    );
    // ... and the destination is written, locked and tagged as a PutObject would be.
    expect(checks(need('PUT', '/kvc/team-b/x?legal-hold', { 'x-amz-copy-source': 'kvc/team-b/y', 'x-amz-object-lock-mode': 'COMPLIANCE', 'x-amz-tagging': 'a=b' }))).toEqual([
      's3:PutObjectLegalHold arn:aws:s3:::kvc/team-b/x',
      's3:GetObject arn:aws:s3:::kvc/team-b/y',
      's3:PutObject arn:aws:s3:::kvc/team-b/x',
      's3:PutObjectRetention arn:aws:s3:::kvc/team-b/x',
      's3:PutObjectTagging arn:aws:s3:::kvc/team-b/x',
    ]);
    expect(checks(need('PUT', '/kvc/team-b/x?retention', { 'x-amz-bypass-governance-retention': 'true' }))).toContain('s3:BypassGovernanceRetention arn:aws:s3:::kvc/team-b/x');
  });

  it("refuses two operations' parameters together, and x-amz-* query parameters that MinIO would read as metadata", () => {
    for (const [method, url] of [
      ['GET', '/kvc/k?acl&uploadId=X'],
      ['GET', '/kvc/k?acl&attributes'],
      ['GET', '/kvc?versions&list-type=2'],
      ['GET', '/kvc?uploads&versions'],
      ['PUT', '/kvc/k?acl&partNumber=1&uploadId=X'],
      ['PUT', '/kvc/k?X-Amz-Tagging=a%3Db'],
      ['PUT', '/kvc/k?x-amz-meta-a=b'],
    ] as const) {
      expect(need(method, url).kind, url).toBe('unclassified');
    }
    expect(checks(need('PUT', '/kvc/k?partNumber=2&uploadId=X'))).toEqual(['s3:PutObject arn:aws:s3:::kvc/k']);
    expect(checks(need('GET', '/kvc?list-type=2&prefix=a%2F'))).toEqual(['s3:ListBucket arn:aws:s3:::kvc']);
  });

  it("refuses a sub-resource combined with another operation's parameter, which MinIO would route to that operation", () => {
    for (const url of ['/kvc/team-b/x?tagging&partNumber=1&uploadId=U', '/kvc/team-b/x?uploads&select&select-type=2', '/kvc/team-b/x?uploadId=U&restore', '/kvc?policy&delete']) {
      const method = url.includes('tagging') ? 'PUT' : url.includes('policy') ? 'GET' : 'POST';
      expect(need(method, url).kind, url).toBe('unclassified');
    }
    expect(checks(need('POST', '/kvc/team-b/x?select&select-type=2'))).toEqual(['s3:GetObject arn:aws:s3:::kvc/team-b/x']);
  });

  it('refuses headers that make MinIO write or read other objects, and checks what a write sets beside its bytes', () => {
    for (const header of ['x-amz-meta-snowball-auto-extract', 'x-amz-meta-minio-snowball-prefix', 'x-minio-extract', 'x-amz-replication-status']) {
      expect(need('PUT', '/kvc/team-b/a.tar', { [header]: 'true' }).kind, header).toBe('unclassified');
    }
    expect(
      checks(
        need('PUT', '/kvc/team-b/x', {
          'x-amz-object-lock-mode': 'COMPLIANCE',
          'x-amz-object-lock-retain-until-date': '2030-01-01T00:00:00Z',
          'x-amz-object-lock-legal-hold': 'ON',
          'x-amz-tagging': 'a=b',
        }),
      ),
    ).toEqual([
      's3:PutObject arn:aws:s3:::kvc/team-b/x',
      's3:PutObjectRetention arn:aws:s3:::kvc/team-b/x',
      's3:PutObjectLegalHold arn:aws:s3:::kvc/team-b/x',
      's3:PutObjectTagging arn:aws:s3:::kvc/team-b/x',
    ]);
    expect(checks(need('DELETE', '/kvc/team-b/x?versionId=v1', { 'x-amz-bypass-governance-retention': 'true' }))).toEqual([
      's3:DeleteObjectVersion arn:aws:s3:::kvc/team-b/x',
      's3:BypassGovernanceRetention arn:aws:s3:::kvc/team-b/x',
    ]);
  });

  it('gives list conditions the prefix MinIO lists (a leading / dropped), and refuses a path without a bucket', () => {
    const list = need('GET', '/kvc?list-type=2&prefix=%2Fsecret%2F');
    expect(list.kind === 'checks' && list.checks[0]?.context).toEqual({ 's3:prefix': 'secret/' });
    expect(() => parseTarget('//kvc/team-a/x')).toThrow(/without a bucket/);
  });
});

describe('policy and credentials files', () => {
  const dir = mkdtempSync(join(tmpdir(), 'objectcache-policy-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let n = 0;
  const file = (text: string): string => {
    const path = join(dir, `f${n++}.json`);
    writeFileSync(path, text);
    return path;
  };
  const team = { Version: '2012-10-17', Statement: [allow('s3:GetObject', 'arn:aws:s3:::kv/a/*')] };
  const creds = (entries: unknown[]): string => file(JSON.stringify(entries));
  const env = { OBJECTCACHE_ACCESS_KEY: 'admin-key', OBJECTCACHE_SECRET_KEY: 'admin-secret-1' };
  const load = (args: string[], extraEnv: Record<string, string> = {}): ReturnType<typeof loadServeConfig> => loadServeConfig(args, { ...env, ...extraEnv });
  const fails = (args: string[], message: RegExp, extraEnv: Record<string, string> = {}): void => {
    expect(() => load(args, extraEnv)).toThrow(ConfigError);
    expect(() => load(args, extraEnv)).toThrow(message);
  };

  it('attaches inline, named, per-tenant and per-key policies, and gives the administrator key everything', () => {
    const credentials = creds([
      { accessKeyId: 'inline-key', secretAccessKey: 'secret-0001', policy: team },
      { accessKeyId: 'named-key', secretAccessKey: 'secret-0002', policy: 'read-a' },
      { accessKeyId: 'tenant-key', secretAccessKey: 'secret-0003', tenant: 'team-b' },
      { accessKeyId: 'keyed-key', secretAccessKey: 'secret-0004' },
      { accessKeyId: 'bare-key', secretAccessKey: 'secret-0005' },
    ]);
    const policies = file(
      JSON.stringify({
        policies: { 'read-a': team, 'write-b': { Statement: [allow('s3:PutObject', 'arn:aws:s3:::kv/b/*')] } },
        tenants: { 'team-b': ['write-b'] },
        keys: { 'keyed-key': ['read-a', 'write-b'] },
      }),
    );
    const config = load(['--credentials', credentials, '--access-policies', policies]);
    const access = new Map(config.clientCredentials.map((c) => [c.accessKeyId, c.access]));
    expect(access.get('admin-key')?.unrestricted).toBe(true);
    expect(access.get('inline-key')?.allows('s3:GetObject', s3Arn('kv', 'a/x'))).toBe(true);
    expect(access.get('named-key')?.allows('s3:GetObject', s3Arn('kv', 'a/x'))).toBe(true);
    expect(access.get('named-key')?.allows('s3:PutObject', s3Arn('kv', 'b/x'))).toBe(false);
    expect(access.get('tenant-key')?.allows('s3:PutObject', s3Arn('kv', 'b/x'))).toBe(true);
    expect(access.get('keyed-key')?.allows('s3:GetObject', s3Arn('kv', 'a/x'))).toBe(true);
    expect(access.get('keyed-key')?.allows('s3:PutObject', s3Arn('kv', 'b/x'))).toBe(true);
    expect(access.get('bare-key')?.empty).toBe(true);
  });

  it('refuses malformed and contradictory files at start-up, naming the file and the place', () => {
    const ok = creds([{ accessKeyId: 'team-key', secretAccessKey: 'secret-0001', tenant: 'team-a' }]);
    fails(['--access-policies', file('{"policies": {"a": ')], /--access-policies .*: not valid JSON/);
    fails(['--access-policies', file('{"policies": {"a": {"Statement": []}, "a": {}}}')], /:1:\d+: "a" appears twice in the same object/);
    fails(['--access-policies', file('{"policies": {"a": {"Statement": [{"Effect": "Allow", "Effect": "Deny", "Action": "s3:*", "Resource": "*"}]}}}')], /"Effect" appears twice/);
    fails(
      ['--access-policies', file(JSON.stringify({ policies: { a: { Statement: [allow('s3:Get0bject', '*')] } } }))],
      /policies\.a\.Statement\[0\]\.Action: "s3:Get0bject" names no action/,
    );
    fails(['--access-policies', file(JSON.stringify({ policy: {} }))], /"policy" is not policies, tenants or keys/);
    fails(
      ['--credentials', ok, '--access-policies', file(JSON.stringify({ policies: {}, keys: { 'team-key': ['missing'] } }))],
      /keys\.team-key: names the policy "missing", which "policies" does not define/,
    );
    fails(
      ['--credentials', ok, '--access-policies', file(JSON.stringify({ policies: { a: team }, keys: { 'admin-key': ['a'] } }))],
      /"keys" names admin-key, the administrator key/,
    );
    fails(
      ['--credentials', ok, '--access-policies', file(JSON.stringify({ policies: { a: team }, keys: { 'typo-key': ['a'] } }))],
      /"keys" names typo-key, which is not a key of --credentials/,
    );
    fails(
      ['--credentials', ok, '--access-policies', file(JSON.stringify({ policies: { a: team }, tenants: { 'team-z': ['a'] } }))],
      /"tenants" names team-z, which no key of --credentials belongs to/,
    );
    fails(
      ['--credentials', creds([{ accessKeyId: 'k-1', secretAccessKey: 'secret-0001', policy: 'nowhere' }])],
      /names the policy "nowhere", but no --access-policies file is given/,
    );
    fails(['--credentials', creds([{ accessKeyId: 'k-1', secretAccessKey: 'secret-0001', policy: { Statement: [deny('s3:*', 'kv')] } }])], /k-1\.policy\.Statement\[0\]\.Resource/);
    fails(['--credentials', creds([{ accessKeyId: 'k-1', secretAccessKey: 'secret-0001', polcy: 'x' }])], /entry 0 has "polcy"/);
    fails(['--credentials', file('[{"accessKeyId": "k-1", "secretAccessKey": "secret-0001", "accessKeyId": "k-2"}]')], /"accessKeyId" appears twice/);
    fails(['--credentials', creds([{ accessKeyId: 'admin-key', secretAccessKey: 'secret-0001' }])], /access key admin-key is configured twice/);
    fails(['--access-policies', join(dir, 'no-such-file.json')], /--access-policies .*no-such-file\.json: ENOENT/);
  });

  it('the command refuses to start on a bad policy file, with exit code 2 and the reason', () => {
    const bad = file(
      JSON.stringify({ policies: { fleet: { Statement: [allow('s3:GetObject', 'arn:aws:s3:::kv/*'), { Effect: 'Deny', NotAction: 's3:GetObject', Resource: '*' }] } } }),
    );
    const run = runCli(['serve', '--port', '0', '--metrics-port', '0', '--access-policies', bad], { env });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain('policies.fleet.Statement[1]: NotAction is not supported');
  });

  it('protected mode: the published trial secret is served on loopback only, unless explicitly opted out', () => {
    const trial = { OBJECTCACHE_ACCESS_KEY: 'objectcache', OBJECTCACHE_SECRET_KEY: 'objectcache-secret' };
    expect(load(['--host', '127.0.0.1'], trial).host).toBe('127.0.0.1');
    expect(load(['--host', '::1'], trial).host).toBe('::1');
    for (const host of ['0.0.0.0', '::', '10.1.2.3', 'gateway.internal']) {
      fails(['--host', host], /Refusing to listen on .* with the published trial secret.*OBJECTCACHE_SECRET_KEY.*--insecure-trial-credentials on/, trial);
    }
    expect(load(['--host', '0.0.0.0', '--insecure-trial-credentials', 'on'], trial).host).toBe('0.0.0.0');
    expect(load(['--host', '0.0.0.0']).host).toBe('0.0.0.0');
    // The trial secret on any key counts, not only on the administrator key.
    fails(['--host', '0.0.0.0', '--credentials', creds([{ accessKeyId: 'copied-key', secretAccessKey: 'objectcache-secret' }])], /key copied-key/);
    fails(['--host', '0.0.0.0', '--insecure-trial-credentials', 'yes'], /must be on or off/, trial);
    expect(['127.0.0.1', '127.8.9.10', '::1', '[::1]', 'localhost', 'LOCALHOST'].every(isLoopback)).toBe(true);
    expect(['0.0.0.0', '::', '128.0.0.1', '::ffff:10.0.0.1', 'localhost.example.com', '192.168.1.1'].some(isLoopback)).toBe(false);
  });

  it('the command logs the keys it loaded and names the keys that may do nothing', async () => {
    const credentials = creds([
      { accessKeyId: 'with-policy', secretAccessKey: 'secret-0001', policy: team },
      { accessKeyId: 'forgotten-key', secretAccessKey: 'secret-0002' },
    ]);
    const serve = await startServe(['--data-dir', join(dir, 'store'), '--credentials', credentials], env);
    try {
      expect(serve.lines).toContainEqual(expect.objectContaining({ msg: 'access policies loaded', keys: 3, administrator: 1, withPolicy: 1 }));
      expect(serve.lines).toContainEqual(expect.objectContaining({ level: 'warn', keys: ['forgotten-key'], msg: expect.stringContaining('no access policy and may do nothing') }));
    } finally {
      await serve.stop();
    }
  });

  it('the command says how to fix protected mode', () => {
    const run = runCli(['serve', '--host', '0.0.0.0', '--port', '0', '--metrics-port', '0'], { env: {} });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain('Set OBJECTCACHE_ACCESS_KEY and OBJECTCACHE_SECRET_KEY');
  });
});
