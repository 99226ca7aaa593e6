/**
 * A binary min-heap of entries named by a key, each of which can be found, re-ordered or taken
 * out in O(log n): the standing eviction orders of gateway/capacity/standing-order.ts (leaves by
 * last access, dead chunks by last access) kept up to date as chunks come, go and are read, so
 * that a trim costs work in proportion to what it takes, not to the bucket's size.
 *
 * `ordered()` lists the entries smallest first without changing the heap (a second, small heap
 * of the positions whose parents were listed): k entries cost O(k log k), however many it holds.
 */
export class KeyedHeap<T> {
  /** The heap, as slots that know their place in it (a swap moves two slots, no map is touched). */
  readonly #slots: Slot<T>[] = [];
  readonly #byKey = new Map<string, Slot<T>>();
  #nextId = 0;
  readonly #keyOf: (item: T) => string;
  readonly #before: (a: T, b: T) => boolean;

  constructor(keyOf: (item: T) => string, before: (a: T, b: T) => boolean) {
    this.#keyOf = keyOf;
    this.#before = before;
  }

  get size(): number {
    return this.#slots.length;
  }

  has(key: string): boolean {
    return this.#byKey.has(key);
  }

  get(key: string): T | undefined {
    return this.#byKey.get(key)?.item;
  }

  /** Adds the entry, or replaces the one of the same key (and moves it to its new place). */
  set(item: T): void {
    const key = this.#keyOf(item);
    const slot = this.#byKey.get(key);
    if (slot === undefined) {
      const added = { item, at: this.#slots.length, id: String(this.#nextId++) };
      this.#slots.push(added);
      this.#byKey.set(key, added);
      this.#up(added.at);
      return;
    }
    slot.item = item;
    this.#down(this.#up(slot.at));
  }

  /** Takes the entry out; false when it was not there. */
  delete(key: string): boolean {
    const slot = this.#byKey.get(key);
    if (slot === undefined) return false;
    this.#byKey.delete(key);
    const last = this.#slots.pop() as Slot<T>;
    if (last !== slot) {
      this.#slots[slot.at] = last;
      last.at = slot.at;
      this.#down(this.#up(last.at));
    }
    return true;
  }

  clear(): void {
    this.#slots.length = 0;
    this.#byKey.clear();
  }

  /** The smallest entry. */
  peek(): T | undefined {
    return this.#slots[0]?.item;
  }

  /** Takes out and returns the smallest entry. */
  pop(): T | undefined {
    const top = this.#slots[0]?.item;
    if (top !== undefined) this.delete(this.#keyOf(top));
    return top;
  }

  /**
   * The entries, smallest first, lazily; the heap itself is left as it is. Where it changes while
   * the listing is read, the listing reads on in the changed heap: an entry added or moved
   * meanwhile may be missed or met out of place, one taken out is not listed, and no slot is listed
   * twice, but a key taken out and added again has a new slot and may be listed again (callers
   * that must not meet a key twice keep their own record, as StandingOrder.walk does).
   */
  *ordered(): Generator<T> {
    const slots = this.#slots;
    const first = slots[0];
    if (first === undefined) return;
    // The slots whose parent was listed, smallest entry first.
    const open = new KeyedHeap<Slot<T>>(
      (slot) => slot.id,
      (a, b) => this.#before(a.item, b.item),
    );
    const met = new Set<Slot<T>>([first]);
    open.set(first);
    for (let slot = open.pop(); slot !== undefined; slot = open.pop()) {
      if (this.#byKey.get(this.#keyOf(slot.item)) !== slot) continue; // taken out meanwhile
      yield slot.item;
      for (const child of [slots[2 * slot.at + 1], slots[2 * slot.at + 2]]) {
        if (child === undefined || met.has(child)) continue;
        met.add(child);
        open.set(child);
      }
    }
  }

  #swap(i: number, j: number): void {
    const slots = this.#slots;
    const a = slots[i] as Slot<T>;
    const b = slots[j] as Slot<T>;
    slots[i] = b;
    slots[j] = a;
    b.at = i;
    a.at = j;
  }

  #up(i: number): number {
    const slots = this.#slots;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#before((slots[i] as Slot<T>).item, (slots[parent] as Slot<T>).item)) break;
      this.#swap(i, parent);
      i = parent;
    }
    return i;
  }

  #down(i: number): void {
    const slots = this.#slots;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < slots.length && this.#before((slots[l] as Slot<T>).item, (slots[m] as Slot<T>).item)) m = l;
      if (r < slots.length && this.#before((slots[r] as Slot<T>).item, (slots[m] as Slot<T>).item)) m = r;
      if (m === i) return;
      this.#swap(i, m);
      i = m;
    }
  }
}

interface Slot<T> {
  item: T;
  at: number;
  /** Names the slot in a listing's frontier (a key taken out and added again gets a new slot). */
  readonly id: string;
}
