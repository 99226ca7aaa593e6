/**
 * The admin endpoint, on its own port because every S3 path (`/metrics` included) is a bucket
 * name: /healthz (the process serves), /readyz (the store or backend answers), /metrics
 * (Prometheus text format from the gateway's own registry), /capacity (budgeted buckets' usage
 * and the chunks eviction would take next, as JSON; `objectcache capacity` prints it).
 *
 * /capacity names every tenant's coldest keys: with OBJECTCACHE_ADMIN_TOKEN set it answers only a
 * request with `Authorization: Bearer <token>`, and without one only on a loopback admin address,
 * to a request whose Host is a loopback name (a web page a browser on the host loaded from a
 * domain that resolves to 127.0.0.1, DNS rebinding, names its own domain) (docs/reference.md:
 * --metrics-host).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import type { Registry } from 'prom-client';
import { MAX_REPORT_TOP } from '../capacity/capacity.js';

export interface AdminOptions {
  readonly host: string;
  readonly port: number;
  /** What /metrics serves: this process's registry, or the primary's aggregate of every serving process's (gateway/cluster/primary.ts). */
  readonly registry: Pick<Registry, 'metrics' | 'contentType'>;
  readonly ready: () => Promise<boolean>;
  /** The /capacity document for `?top=n` coldest chunks per bucket; undefined: no budget is set. */
  readonly capacity?: (top: number) => Promise<unknown>;
  /** OBJECTCACHE_ADMIN_TOKEN: the bearer token /capacity asks for; undefined: none (then loopback only). */
  readonly token?: string | undefined;
  /** Whether `host` is a loopback address (config.ts isLoopback). */
  readonly loopback: boolean;
}

/** Whether the request's Host names a loopback address (`127.x.x.x`, `[::1]`, `localhost`), with any port. */
function loopbackHost(req: IncomingMessage): boolean {
  const host = (req.headers.host ?? '').toLowerCase().replace(/:\d+$/, '');
  return host === 'localhost' || host === '[::1]' || /^127(?:\.\d{1,3}){3}$/.test(host);
}

/** Whether the request carries `Authorization: Bearer <token>` (compared in constant time). */
function bearer(req: IncomingMessage, token: string): boolean {
  const given = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '';
  const digest = (text: string): Buffer => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(given), digest(token));
}

export interface AdminServer {
  readonly url: string;
  close(): Promise<void>;
}

function json(status: number, body: unknown): [number, Record<string, string>, string] {
  return [status, { 'content-type': 'application/json' }, JSON.stringify(body)];
}

export async function startAdminServer(options: AdminOptions): Promise<AdminServer> {
  const server = createServer((req, res) => {
    const [path, query = ''] = (req.url ?? '/').split('?');
    const respond = ([status, headers, body]: [number, Record<string, string>, string]): void => {
      res.writeHead(status, { ...headers, 'content-length': String(Buffer.byteLength(body)) });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return respond(json(405, { error: 'method not allowed' }));
    switch (path) {
      case '/healthz':
        return respond(json(200, { status: 'ok' }));
      case '/readyz':
        options.ready().then(
          (ok) => respond(json(ok ? 200 : 503, { status: ok ? 'ready' : 'backend unreachable' })),
          () => respond(json(503, { status: 'backend unreachable' })),
        );
        return;
      case '/metrics':
        options.registry.metrics().then(
          (text) => respond([200, { 'content-type': options.registry.contentType }, text]),
          (error: Error) => respond(json(500, { error: error.message })),
        );
        return;
      case '/capacity': {
        if (options.token !== undefined) {
          if (!bearer(req, options.token)) {
            res.setHeader('www-authenticate', 'Bearer realm="objectcache-admin"');
            return respond(json(401, { error: '/capacity needs Authorization: Bearer <OBJECTCACHE_ADMIN_TOKEN>' }));
          }
        } else if (!options.loopback || !loopbackHost(req)) {
          return respond(
            json(403, {
              error:
                '/capacity lists every tenant\u2019s keys: it is served on a loopback admin address to a loopback Host, or with OBJECTCACHE_ADMIN_TOKEN set (then with Authorization: Bearer <token>)',
            }),
          );
        }
        if (!options.capacity) return respond(json(404, { error: 'no bucket has a --budget' }));
        const top = Number(new URLSearchParams(query).get('top') ?? '10');
        options.capacity(Number.isSafeInteger(top) ? Math.min(Math.max(top, 0), MAX_REPORT_TOP) : 10).then(
          (document) => respond(json(200, document)),
          (error: Error) => respond(json(500, { error: error.message })),
        );
        return;
      }
      default:
        return respond(json(404, { error: 'not found', paths: ['/healthz', '/readyz', '/metrics', '/capacity'] }));
    }
  });
  server.listen(options.port, options.host);
  await once(server, 'listening');
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
