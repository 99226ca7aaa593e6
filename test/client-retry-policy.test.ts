/**
 * The TypeScript client's one retry policy (schemas/retry-policy.ts, client/retry.ts) and its one
 * error type, against the real gateway: every call's failure is an ObjectCacheError with a stable
 * code, the AWS SDK's S3ServiceException kept as its cause (putChunks, ensureBucket); a 503
 * SlowDown of the gateway's per-key admission limit is tried again after its Retry-After on every
 * transport (a signed undici POST, an SDK PutObject, a socket fetch), and with `retries: 0` is the
 * answer at once (so the SDK's own retries are off).
 */
import { randomBytes } from 'node:crypto';
import { S3ServiceException } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectCacheClient, type ObjectCacheClientOptions } from '../client/client.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { DEFAULT_RETRIES, FIRST_BACKOFF_MS, MAX_RETRY_AFTER_MS, retryDelayMs } from '../schemas/retry-policy.js';
import { CLIENT_KEY, CLIENT_SECRET, startTestGateway, uniqueBucket, type TestGateway } from './helpers/gateway.js';
import { descriptorOf, type SeededPrefix } from './helpers/kv.js';
import { until } from './helpers/wait.js';

const credentials = { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET };

async function failure(promise: Promise<unknown>): Promise<ObjectCacheError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ObjectCacheError);
  return error as ObjectCacheError;
}

describe('the retry policy', () => {
  it('waits for Retry-After up to its cap, else doubles from the first backoff', () => {
    expect(DEFAULT_RETRIES).toBe(3);
    expect([1, 2, 3].map((attempt) => retryDelayMs(undefined, attempt))).toEqual([FIRST_BACKOFF_MS, 2 * FIRST_BACKOFF_MS, 4 * FIRST_BACKOFF_MS]);
    expect(retryDelayMs('1', 1)).toBe(1000);
    expect(retryDelayMs(' 0.5 ', 3)).toBe(500);
    expect(retryDelayMs('3600', 1)).toBe(MAX_RETRY_AFTER_MS);
    // Not delay-seconds (an HTTP-date, a negative number, junk): the backoff.
    for (const junk of ['Wed, 21 Oct 2015 07:28:00 GMT', '-1', 'soon', '', '1e3']) expect(retryDelayMs(junk, 2), junk).toBe(2 * FIRST_BACKOFF_MS);
  });
});

describe('every failure of the client is an ObjectCacheError', () => {
  let gw: TestGateway;

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 'local' });
  });

  afterAll(async () => {
    await gw?.close();
  });

  const client = (options: Partial<ObjectCacheClientOptions> = {}): ObjectCacheClient =>
    new ObjectCacheClient({ endpoint: gw.url, bucket: uniqueBucket('errors'), credentials, ...options });

  it('putChunks and ensureBucket map the SDK exception by its code, keeping it as the cause', async () => {
    const c = client();
    const stranger = client({ credentials: { accessKeyId: 'nobody', secretAccessKey: 'x' } });
    const wrongSecret = client({ credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: 'not-the-secret' } });
    try {
      // No such bucket yet.
      const missing = await failure(c.putChunks(['k/0'], [new Uint8Array(8)]));
      expect([missing.code, missing.status, missing.details['Status'], missing.details['S3Code'], missing.retryable]).toEqual([
        'OC_ERR_STORE_NO_SUCH_BUCKET',
        404,
        404,
        'NoSuchBucket',
        false,
      ]);
      expect(missing.cause).toBeInstanceOf(S3ServiceException);
      expect(String(missing.details['RequestId'])).toMatch(/^[0-9A-Za-z-]{8,}$/);

      await c.ensureBucket();
      await c.ensureBucket(); // BucketAlreadyOwnedByYou is success
      await c.putChunks(['k/0'], [new Uint8Array(8)]);

      const unknown = await failure(stranger.ensureBucket());
      expect(unknown.code).toBe('OC_ERR_AUTH_UNKNOWN_KEY');
      expect(unknown.cause).toBeInstanceOf(S3ServiceException);
      const signature = await failure(wrongSecret.putChunks(['k/1'], [new Uint8Array(8)]));
      expect([signature.code, signature.details['Status']]).toEqual(['OC_ERR_AUTH_SIGNATURE', 403]);
      expect(signature.cause).toBeInstanceOf(S3ServiceException);
      const lookup = await failure(wrongSecret.lookup(['k/0']));
      expect(lookup.code).toBe('OC_ERR_AUTH_SIGNATURE');
    } finally {
      await Promise.all([c.close(), stranger.close(), wrongSecret.close()]);
    }
  });

  it('a gateway that cannot be reached is OC_ERR_BACKEND_UNAVAILABLE at once on every call, not tried again', async () => {
    const nowhere = new ObjectCacheClient({ endpoint: 'http://127.0.0.1:1', bucket: 'b', credentials });
    try {
      const started = performance.now();
      for (const call of [() => nowhere.ensureBucket(), () => nowhere.putChunks(['k'], [new Uint8Array(1)]), () => nowhere.lookup(['k']), () => nowhere.pin(['k'], null)]) {
        const error = await failure(call());
        expect(error.code).toBe('OC_ERR_BACKEND_UNAVAILABLE');
        expect(error.message).toContain('cannot reach the gateway');
        expect(error.cause).toBeDefined();
      }
      // Four calls with no backoff between tries.
      expect(performance.now() - started).toBeLessThan(FIRST_BACKOFF_MS * 2);
    } finally {
      await nowhere.close();
    }
  });
});

describe("the gateway's 503 SlowDown, tried again after its Retry-After", () => {
  let gw: TestGateway;
  let prefix: SeededPrefix;
  let bucket: string;

  beforeAll(async () => {
    // One request of the key in flight at a time; paced at 4 MB/s, a 4 MiB fetch holds it about a second.
    gw = await startTestGateway({ backend: 'local', args: ['--max-requests-per-key', '1', '--cap', '4MB/s', '--threshold', '0', '--epoch-ms', '10'] });
    bucket = uniqueBucket('slowdown');
    const seeder = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials });
    try {
      await seeder.ensureBucket();
      const keys = Array.from({ length: 4 }, (_, i) => `kv/slowdown/${i}`);
      const canonical = keys.map(() => new Uint8Array(randomBytes(8 * 128 * 1024)));
      await seeder.putChunks(keys, canonical, { concurrency: 1, layout: { layout: 'KV_L2TD', layers: 8, layerBytes: 128 * 1024 } });
      prefix = { keys, canonical, layers: 8, layerBytes: 128 * 1024, layout: 'KV_L2TD' };
    } finally {
      await seeder.close();
    }
  });

  afterAll(async () => {
    await gw?.close();
  });

  /** Runs `during` while a paced fetch holds the key's one request slot. */
  async function whileHeld<T>(during: () => Promise<T>): Promise<T> {
    const holder = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials, retries: 0 });
    try {
      const held = holder.fetch(descriptorOf(prefix));
      await until(async () => /objectcache_layerwise_active_requests 1/.test(await (await fetch(`${gw.gateway.adminUrl}/metrics`)).text()), 5000);
      try {
        return await during();
      } finally {
        await held;
      }
    } finally {
      await holder.close();
    }
  }

  it('with retries: 0 the refusal is the answer, with its code and Retry-After, on every transport', async () => {
    const once = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials, retries: 0 });
    try {
      await whileHeld(async () => {
        const calls = [
          () => once.lookup(prefix.keys),
          () => once.putChunks(['kv/slowdown/new'], [new Uint8Array(16)]),
          () => once.fetch(descriptorOf(prefix, { layerRange: [0, 1] }), { transport: 'post' }),
        ];
        for (const call of calls) {
          const refused = await failure(call());
          expect([refused.code, refused.details['Status'], refused.details['S3Code'], refused.details['RetryAfter'], refused.retryable]).toEqual([
            'OC_ERR_KEY_CONCURRENCY',
            503,
            'SlowDown',
            '1',
            true,
          ]);
        }
      });
    } finally {
      await once.close();
    }
  });

  it('a POST (lookup), a PutObject and a fetch refused with 503 SlowDown succeed after Retry-After', async () => {
    const patient = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials });
    try {
      let waited = 0;
      const matched = await whileHeld(async () => {
        const started = performance.now();
        const answer = await patient.lookup(prefix.keys);
        waited = performance.now() - started;
        return answer;
      });
      expect(matched).toBe(4);
      // Refused at least once (the slot was held), then waited the answer's Retry-After: 1 s.
      expect(waited).toBeGreaterThanOrEqual(950);

      await whileHeld(() => patient.putChunks(['kv/slowdown/late'], [new Uint8Array(16)]));
      expect(await patient.lookup(['kv/slowdown/late'])).toBe(1);

      const fetched = await whileHeld(() => patient.fetch(descriptorOf(prefix, { layerRange: [0, 1] }), { transport: 'post' }));
      expect(fetched.summary.layers).toEqual([0, 1]);
    } finally {
      await patient.close();
    }
  });
});
