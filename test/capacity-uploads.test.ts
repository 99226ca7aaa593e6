/**
 * What unfinished multipart uploads make the gateway hold is bounded (gateway/capacity/capacity.ts
 * UploadLimits): past a tenant's or all tenants' uploads or parts, a new upload's or a new part's
 * write is refused before it reaches the store; a part uploaded again replaces its bytes and is
 * let through; an upload that ends frees its share. The limits are set small here; the gateway's
 * are 10,000 uploads and 100,000 parts a tenant (docs/capacity.md).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Capacity } from '../gateway/capacity/capacity.js';
import { embeddedCapacityStore } from '../gateway/stores/capacity-store.js';
import type { CapacityConfig } from '../gateway/common/config.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { StateKey } from '../gateway/common/state-key.js';
import { LocalStore } from '../gateway/stores/embedded/local-store.js';

const config: CapacityConfig = {
  budgets: new Map([['b', 1 << 30]]),
  quotas: new Map(),
  highFraction: 0.9,
  lowFraction: 0.8,
  idleMs: undefined,
  evictPerSecond: 1000,
  stateBucket: 'objectcache-state',
  syncMs: 60_000,
  leaseMs: 60_000,
  multipartExpiryMs: undefined,
};
const noop = (): void => {};

describe('unfinished multipart uploads held by the capacity tracker', () => {
  let dataDir: string;
  let local: LocalStore;
  let capacity: Capacity;

  beforeEach(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'objectcache-uploads-'));
    local = await LocalStore.open(dataDir);
    capacity = new Capacity({
      config,
      key: new StateKey(Buffer.alloc(32, 7), 'setting'),
      mayWrite: () => true,
      store: embeddedCapacityStore(local),
      logger: { info: noop, warn: noop, error: noop },
      observer: { evicted: noop, syncFailed: noop, rejected: noop, hintsDropped: noop, uploadExpired: noop, waitedForRoom: noop },
      uploadLimits: { uploads: 3, uploadsPerTenant: 2, parts: 5, partsPerTenant: 4 },
    });
  });
  afterEach(async () => {
    await local.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** admitPart then partStored, as serve-budgeted.ts does around the store's answer. */
  const put = (uploadId: string, part: number, bytes: number, tenant: string): void => {
    capacity.admitPart('b', uploadId, part, tenant);
    capacity.partStored('b', `key-${uploadId}`, uploadId, part, bytes, tenant);
  };
  const refusal = (run: () => void): unknown => {
    try {
      run();
    } catch (error) {
      return error;
    }
    return undefined;
  };

  it("refuses a tenant's new upload past its uploads, and any new part past its parts", () => {
    put('u1', 1, 100, 'alice');
    put('u2', 1, 10, 'alice');
    const third = refusal(() => capacity.admitPart('b', 'u3', 1, 'alice'));
    expect(third).toBeInstanceOf(ObjectCacheError);
    expect((third as ObjectCacheError).code).toBe('OC_ERR_QUOTA_EXCEEDED');
    expect((third as Error).message).toMatch(/2 uploads/);
    // Another tenant is not held back by alice's uploads.
    expect(refusal(() => capacity.admitPart('b', 'v1', 1, 'bob'))).toBeUndefined();

    put('u1', 2, 100, 'alice');
    put('u2', 2, 10, 'alice');
    const fifth = refusal(() => capacity.admitPart('b', 'u1', 3, 'alice'));
    expect((fifth as ObjectCacheError).code).toBe('OC_ERR_QUOTA_EXCEEDED');
    expect((fifth as Error).message).toMatch(/4 parts/);
    // A part uploaded again replaces its bytes: let through, and counted once.
    put('u1', 2, 50, 'alice');
    expect(capacity.tenantBytes('alice')).toBe(100 + 50 + 10 + 10);
  });

  it('holds all tenants to the limits for all, and frees what an ended upload held', () => {
    put('u1', 1, 1, 'alice');
    put('v1', 1, 2, 'bob');
    put('w1', 1, 4, 'carol');
    expect((refusal(() => capacity.admitPart('b', 'w2', 1, 'carol')) as ObjectCacheError).code).toBe('OC_ERR_QUOTA_EXCEEDED');
    put('w1', 2, 8, 'carol');
    put('v1', 2, 16, 'bob');
    expect((refusal(() => capacity.admitPart('b', 'u1', 2, 'alice')) as ObjectCacheError).code).toBe('OC_ERR_QUOTA_EXCEEDED');
    expect(capacity.tenantBytes('bob')).toBe(18);

    capacity.uploadEnded('b', 'v1');
    expect(capacity.tenantBytes('bob')).toBe(0);
    expect(capacity.tenantBytes('carol')).toBe(12);
    put('u1', 2, 32, 'alice');
    put('u2', 1, 64, 'alice');
    expect(capacity.tenantBytes('alice')).toBe(97);
    // A part of an ended upload arriving late counts no more.
    capacity.partStored('b', 'key-v1', 'v1', 3, 128, 'bob');
    expect(capacity.tenantBytes('bob')).toBe(0);
  });

  it('lets anything through in a bucket without a budget', () => {
    for (let i = 0; i < 10; i++) capacity.admitPart('unbudgeted', `u${i}`, 1, 'alice');
  });
});
