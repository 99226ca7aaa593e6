/**
 * A loopback TCP proxy in front of MinIO for fault tests: `resetNext(n)` drops every open
 * connection (as a store that goes away, or cuts a paused response, does) and makes the next n
 * new connections fail as soon as a request arrives; `holdUploads()` stops forwarding what a
 * connection sends from its next PUT on (a store that takes an upload's body no faster than
 * nothing), until `releaseUploads()`. `puts` counts the PUT requests begun through it.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export class FaultProxy {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #toReset = 0;
  #holdUploads = false;
  readonly #held = new Set<() => void>();
  resets = 0;
  /** PUT requests begun through the proxy (a write to the store: an object or a bucket). */
  puts = 0;

  constructor(target: URL) {
    this.#server = createServer((client) => {
      this.#sockets.add(client);
      client.once('close', () => this.#sockets.delete(client));
      if (this.#toReset > 0) {
        this.#toReset--;
        client.once('data', () => {
          this.resets++;
          client.resetAndDestroy();
        });
        return;
      }
      const upstream = connect(Number(target.port), target.hostname);
      this.#sockets.add(upstream);
      upstream.once('close', () => this.#sockets.delete(upstream));
      upstream.pipe(client);
      // client -> upstream by hand, so that a PUT can be held (holdUploads).
      let holding = false;
      const held: Buffer[] = [];
      const release = (): void => {
        holding = false;
        for (const chunk of held.splice(0)) upstream.write(chunk);
        client.resume();
      };
      client.on('data', (chunk: Buffer) => {
        const put = chunk.subarray(0, 4).toString('latin1') === 'PUT ';
        if (put) this.puts++;
        if (this.#holdUploads && !holding && put) holding = true;
        if (holding) {
          held.push(chunk);
          client.pause();
          this.#held.add(release);
          return;
        }
        if (!upstream.write(chunk)) {
          client.pause();
          upstream.once('drain', () => {
            if (!holding) client.resume();
          });
        }
      });
      client.once('end', () => upstream.end());
      const end = (): void => {
        client.destroy();
        upstream.destroy();
      };
      client.once('error', end);
      upstream.once('error', end);
      client.once('close', end);
      upstream.once('close', end);
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.#server.address() as { port: number }).port}`;
  }

  /** From now on, a connection that starts a PUT forwards nothing more until releaseUploads(). */
  holdUploads(): void {
    this.#holdUploads = true;
  }

  releaseUploads(): void {
    this.#holdUploads = false;
    for (const release of this.#held) release();
    this.#held.clear();
  }

  /** Drops every open connection (so the gateway must connect anew) and resets the next `n`. */
  resetNext(n: number): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#toReset = n;
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise((r) => this.#server.close(r));
  }
}
