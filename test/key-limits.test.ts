/**
 * A key's share of the store's connections (gateway/admission/admission.ts KeyLimits): each key at most three
 * quarters of them, and keys that already hold some stop short of a reserve kept for the first
 * connection of the others, so two greedy keys together cannot shut a third out.
 */
import { describe, expect, it } from 'vitest';
import { KeyLimits } from '../gateway/admission/admission.js';
import { AccessPolicy } from '../gateway/common/access-policy.js';
import type { ClientCredential } from '../gateway/common/config.js';
import { ObjectCacheError } from '../schemas/errors.js';

const key = (accessKeyId: string): ClientCredential => ({ accessKeyId, secretAccessKey: 'x', tenant: accessKeyId, access: AccessPolicy.unrestricted });

/** How many connections `who` takes before it is refused. */
function takeAll(limits: KeyLimits, who: ClientCredential): number {
  let taken = 0;
  for (;;) {
    try {
      limits.takeBackend(who);
      taken++;
    } catch (error) {
      expect((error as ObjectCacheError).code).toBe('OC_ERR_KEY_CONCURRENCY');
      return taken;
    }
  }
}

describe("a key's share of backend connections", () => {
  it('keeps a reserve for the first connection of keys that hold none', () => {
    const limits = new KeyLimits({ maxRequestsPerKey: 128, maxDescriptorGetsPerKey: 8 }, 64);
    expect(takeAll(limits, key('greedy'))).toBe(48); // its share: three quarters
    expect(takeAll(limits, key('accomplice'))).toBe(8); // up to 56 held: 64 less the reserve of 8
    for (let i = 0; i < 8; i++) limits.takeBackend(key(`newcomer-${i}`)); // each still gets one
    expect(takeAll(limits, key('newcomer-0'))).toBe(0); // but no second
  });

  it('lets gated requests wait within the share, in order, and go on as connections are given back', async () => {
    const limits = new KeyLimits({ maxRequestsPerKey: 128, maxDescriptorGetsPerKey: 8 }, 8);
    const gate = limits.backendGate(key('lookups'));
    for (let i = 0; i < 6; i++) await gate.acquire();
    let granted = 0;
    const waiting = Array.from({ length: 3 }, () => gate.acquire().then(() => granted++));
    await Promise.resolve();
    expect(granted).toBe(0);
    // Another key is not held up by them.
    expect(() => limits.takeBackend(key('other'))).not.toThrow();
    gate.release();
    gate.release();
    await new Promise((r) => setImmediate(r));
    expect(granted).toBe(2);
    const aborted = new AbortController();
    const gone = gate.acquire(aborted.signal);
    aborted.abort(new Error('client left'));
    await expect(gone).rejects.toThrow('client left');
    gate.release();
    await Promise.all(waiting);
    expect(granted).toBe(3);
  });
});
