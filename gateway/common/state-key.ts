/**
 * The key the gateways in front of one store sign their own state with: capacity management's
 * journals, snapshot and lease (gateway/capacity/shared-state.ts) and packed segments' manifests
 * (gateway/segments/segments.ts). Those objects live in buckets no client key may write
 * (config.ts reserves them), but a store is shared: an older gateway, a gateway with other
 * settings, or anyone holding the store's own keys could still put objects there. A gateway
 * applies or serves only what carries a MAC made with the key it holds itself, so state that no
 * gateway wrote is skipped and counted, never trusted (docs/reliability.md, Trust model).
 *
 * Where the key comes from, first that applies:
 * - OBJECTCACHE_STATE_KEY: any secret of 16 or more characters, the same on every gateway in
 *   front of the store;
 * - in front of an S3 store, derived from the store's credentials (OBJECTCACHE_BACKEND_ACCESS_KEY
 *   and _SECRET_KEY): gateways sharing them share the key with no setting at all;
 * - on the embedded store, 32 random bytes kept in `<data dir>/.state-key` (made at first start).
 *
 * A MAC is HMAC-SHA256 over the kind of object and its bytes, so a MAC made for one kind (a
 * journal) is never accepted for another (a manifest).
 */
import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** What the key may be derived from: the S3 store's credentials, or the embedded store's data directory. */
export type StateKeySource = { readonly kind: 's3'; readonly accessKeyId: string; readonly secretAccessKey: string } | { readonly kind: 'local'; readonly dataDir: string };

/** What a MAC is made for: one kind of state object each. */
export type StateKind = 'segment-manifest' | 'capacity-journal' | 'capacity-snapshot' | 'capacity-lease';

/** The shortest OBJECTCACHE_STATE_KEY accepted (config.ts checks it). */
export const MIN_STATE_KEY_CHARS = 16;

const KEY_FILE = '.state-key';

export class StateKey {
  readonly #key: Buffer;
  /** Where the key came from, for the start-up log (never the key). */
  readonly origin: 'setting' | 'backend-credentials' | 'data-dir';

  constructor(secret: Uint8Array, origin: StateKey['origin']) {
    this.#key = Buffer.from(hkdfSync('sha256', secret, 'objectcache', 'state-key-v1', 32));
    this.origin = origin;
  }

  /** The MAC of `body` as a `kind` object: 64 hex digits. */
  mac(kind: StateKind, body: Uint8Array | string): string {
    return createHmac('sha256', this.#key).update(`${kind}\n`).update(body).digest('hex');
  }

  /** Whether `mac` is this key's MAC of `body` as a `kind` object (in constant time). */
  verify(kind: StateKind, body: Uint8Array | string, mac: unknown): boolean {
    if (typeof mac !== 'string' || !/^[0-9a-f]{64}$/.test(mac)) return false;
    return timingSafeEqual(Buffer.from(this.mac(kind, body), 'hex'), Buffer.from(mac, 'hex'));
  }
}

/**
 * The gateway's state key: the setting's, else one derived from the S3 store's credentials, else
 * the embedded store's own (read from, or first written to, its data directory).
 */
export function loadStateKey(setting: string | undefined, backend: StateKeySource): StateKey {
  if (setting !== undefined) return new StateKey(Buffer.from(setting, 'utf8'), 'setting');
  if (backend.kind === 's3') return new StateKey(Buffer.from(`${backend.accessKeyId}\n${backend.secretAccessKey}`, 'utf8'), 'backend-credentials');
  mkdirSync(backend.dataDir, { recursive: true });
  const file = join(backend.dataDir, KEY_FILE);
  let secret: Buffer;
  try {
    secret = readFileSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    secret = randomBytes(32);
    try {
      // `wx`: two starts at once keep the first one's key.
      writeFileSync(file, secret, { mode: 0o600, flag: 'wx' });
    } catch (raced) {
      if ((raced as NodeJS.ErrnoException).code !== 'EEXIST') throw raced;
      secret = readFileSync(file);
    }
  }
  if (secret.length < 32)
    throw new Error(
      `${file} holds ${secret.length} bytes, not a state key of 32: delete it to make a new one (packed segments and capacity state signed with the old one are then not used)`,
    );
  return new StateKey(secret, 'data-dir');
}
