/**
 * The sweep of the segment bucket (docs/segments.md, Sweeps): a minute after start, then hourly,
 * it deletes the data objects no manifest names once they are old enough, takes stock of the
 * segments this gateway does not know (the catalog counts them and can evict them), deletes the
 * oldest of those while all the segments in the store pass --max-segment-bytes, and learns the
 * others while they fit (with --segment-check heads).
 */
import type { ListedObject } from '../stores/capacity-store.js';
import { MAX_MANIFEST_BYTES } from './manifest.js';
import type { Catalog, CatalogOptions, Unknown } from './catalog.js';

/**
 * A data object no manifest names is deleted by a sweep once it is this old: a pack's upload
 * completes moments before its manifest is written, whichever gateway packs it.
 */
export const SWEEP_AGE_MS = 60 * 60 * 1000;
/** Sweeps of the segment bucket: the first a minute after start, then this often. */
const SWEEP_EVERY_MS = 60 * 60 * 1000;
const FIRST_SWEEP_MS = 60 * 1000;
/**
 * Segments in the store that this gateway does not know, as a sweep found them, kept for eviction
 * (the oldest first); their bytes count whatever their number.
 */
const MAX_UNKNOWN_KEPT = 10_000;

export interface SweepOptions extends Pick<CatalogOptions, 'config' | 'store' | 'logger' | 'observer' | 'now'> {
  readonly catalog: Catalog;
  /** Whether a pack of `run` is being written (its segment is not learnt meanwhile). */
  readonly packing: (run: string) => boolean;
  /** A segment of `run` was learnt (it is no longer missing from the store). */
  readonly learnt: (run: string) => void;
  /** Sweep now and then (else only when `sweep()` is called). */
  readonly timer: boolean;
}

/** Sweeps of the segment bucket, one at a time. */
export class Sweeper {
  readonly #o: SweepOptions;
  #timer: NodeJS.Timeout | undefined;
  #sweeping: Promise<number> | undefined;
  #closed = false;

  constructor(options: SweepOptions) {
    this.#o = options;
    const sweepSoon = (ms: number): void => {
      if (this.#closed) return;
      this.#timer = setTimeout(() => {
        void this.sweep()
          .catch((error: unknown) => this.#o.logger.warn({ error }, 'segments: could not sweep the segment bucket'))
          .finally(() => sweepSoon(SWEEP_EVERY_MS));
      }, ms);
      this.#timer.unref();
    };
    if (options.timer) sweepSoon(FIRST_SWEEP_MS);
  }

  /**
   * Deletes the data objects of the segment bucket that no manifest names and that are older
   * than `olderThanMs`: what a crash between a pack's two writes, or a delete that failed, leaves.
   * Lists the bucket (one page per 1,000 objects, holding one run's objects at a time) and GETs
   * the manifest of each run that has more than one data object; never deletes a data object a
   * manifest names. It also takes stock of the segments this gateway does not know (another
   * gateway's, or this one's before a restart): they count against their bucket's budget from
   * then on (`bytes`) and can be evicted for it (`evict`); and while all the segments in the
   * store pass `--max-segment-bytes`, the oldest of them are deleted. Resolves to the data
   * objects deleted as unnamed. One sweep at a time.
   */
  sweep(olderThanMs = SWEEP_AGE_MS): Promise<number> {
    if (!this.#sweeping) {
      this.#o.catalog.beginSweep();
      this.#sweeping = this.#sweep(olderThanMs).finally(() => {
        this.#sweeping = undefined;
        this.#o.catalog.endSweep();
      });
    }
    return this.#sweeping;
  }

  /** No more sweeps are started. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  async #sweep(olderThanMs: number): Promise<number> {
    const { store, catalog } = this.#o;
    const bucket = this.#o.config.bucket;
    const cutoff = this.#o.now() - olderThanMs;
    let deleted = 0;
    // Keys come in order: a run's manifest (<chunks' bucket>/<run>.json) just before its data
    // objects (<chunks' bucket>/<run>/<pack id>), so one run is looked at at a time.
    let group: { run: string; manifest: ListedObject | undefined; data: ListedObject[] } | undefined;
    let unknown: Unknown[] = [];
    /** Bytes of the unknown segments past the oldest MAX_UNKNOWN_KEPT, by chunks' bucket. */
    const unkept = new Map<string, number>();
    const settle = async (): Promise<void> => {
      if (!group || group.data.length === 0) return;
      const { run, manifest } = group;
      let data = group.data;
      // More than one data object (the usual case is a manifest and its one data object): those
      // the manifest does not name go once they are old enough.
      if (!manifest || data.length > 1) {
        let live: string | undefined;
        let named = true;
        if (manifest) {
          const found = await store.get(bucket, manifest.key, MAX_MANIFEST_BYTES);
          const parsed = found ? catalog.open(found.body, run) : undefined;
          live = parsed?.manifest.data;
          // A manifest that cannot be read is left to the reads that find it (they drop it), and its data with it.
          if (found && live === undefined) return;
          // Gone since it was listed: its data objects are swept as unnamed once old enough, and nothing is counted.
          named = found !== undefined;
        }
        const kept: ListedObject[] = [];
        for (const object of data) {
          if (object.key === live || object.lastModified > cutoff) {
            kept.push(object);
            continue;
          }
          await store.delete(bucket, object.key);
          deleted++;
          this.#o.observer?.event('swept');
        }
        // What the segment is: the data object its manifest names (not a newer pack's, not yet named).
        data = named ? kept.filter((object) => object.key === live) : [];
      }
      const [chunksBucket, name] = run.split('/') as [string, string];
      if (!manifest || data.length === 0 || catalog.has(name)) return;
      const bytes = data.reduce((sum, object) => sum + object.size, 0);
      unknown.push({ run: name, bucket: chunksBucket, manifestEtag: manifest.etag, packedAt: manifest.lastModified, data: data.map((object) => object.key), bytes });
      if (unknown.length >= 2 * MAX_UNKNOWN_KEPT) unknown = keepOldest(unknown, unkept);
    };
    for (let after: string | undefined; ;) {
      const page = await store.list(bucket, '', after);
      for (const object of page.objects) {
        const parts = object.key.split('/');
        const isManifest = parts.length === 2 && object.key.endsWith('.json');
        if (!isManifest && parts.length !== 3) continue;
        const run = isManifest ? object.key.slice(0, -'.json'.length) : `${parts[0]}/${parts[1]}`;
        if (group?.run !== run) {
          await settle();
          group = { run, manifest: undefined, data: [] };
        }
        if (isManifest) group.manifest = object;
        else group.data.push(object);
      }
      if (!page.truncated || page.objects.length === 0) break;
      after = page.objects.at(-1)?.key;
    }
    await settle();
    if (deleted > 0) this.#o.logger.info({ bucket, deleted }, 'segments: swept data objects no manifest names');
    unknown = keepOldest(unknown, unkept);
    catalog.takeStock(unknown, unkept);
    // All the segments in the store within --max-segment-bytes: the oldest unknown ones go (those
    // known here are held within it by Catalog.learn).
    let over = catalog.knownBytes + catalog.unknownBytes() - this.#o.config.maxBytes;
    let evicted = 0;
    for (const u of catalog.unknowns()) {
      if (catalog.closed || over <= 0) break;
      if (!(await catalog.deleteUnknown(u))) continue;
      evicted++;
      over -= u.bytes;
    }
    if (evicted > 0) this.#o.logger.info({ bucket, evicted }, 'segments: the segments in the store passed --max-segment-bytes; deleted the oldest this gateway did not know');
    // Those left are learnt, newest first, while they fit: from then on this gateway serves them,
    // and shorter prefixes and longer requests of them, without first reading each packed run
    // (Found in the store). Only where every read checks its chunks (--segment-check heads):
    // writes made while this gateway did not run were never seen by it.
    if (this.#o.config.check === 'heads') {
      let learnt = 0;
      for (const u of catalog.unknowns().reverse()) {
        if (catalog.closed) break;
        if (catalog.knownBytes + u.bytes <= this.#o.config.maxBytes && (await catalog.learnUnknown(u, this.#o.packing))) {
          this.#o.learnt(u.run);
          learnt++;
        }
      }
      if (learnt > 0) this.#o.logger.info({ bucket, learnt }, 'segments: learnt segments in the store this gateway did not know');
    }
    return deleted;
  }
}

/** The oldest MAX_UNKNOWN_KEPT, oldest first; the bytes of the others are added to `unkept`, by chunks' bucket. */
function keepOldest(unknown: Unknown[], unkept: Map<string, number>): Unknown[] {
  unknown.sort((a, b) => a.packedAt - b.packedAt);
  for (const u of unknown.slice(MAX_UNKNOWN_KEPT)) unkept.set(u.bucket, (unkept.get(u.bucket) ?? 0) + u.bytes);
  return unknown.slice(0, MAX_UNKNOWN_KEPT);
}
