/** A promise with its settlers: what the read-aheads hand each unit out through (read-ahead.ts, stream-read-ahead.ts). */
export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {}); // a unit nobody waits for (the stream ended first) is not an unhandled rejection
  return { promise, resolve, reject };
}
