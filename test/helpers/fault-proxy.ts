/**
 * A loopback TCP proxy in front of MinIO for fault tests: `resetNext(n)` drops every open
 * connection (as a store that goes away, or cuts a paused response, does) and makes the next n
 * new connections fail as soon as a request arrives.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export class FaultProxy {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #toReset = 0;
  resets = 0;

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
      client.pipe(upstream).pipe(client);
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
