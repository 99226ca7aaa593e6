/**
 * What a connection may cost the gateway before it is closed: how many are open, how long a
 * client may take to send headers, a body, a whole request, and how long it may leave a response
 * unread. Each bound is a setting (gateway/common/config.ts ConnectionLimits; docs in
 * docs/reliability.md), chosen so that a client who never authenticates holds a socket and a few
 * kilobytes for at most --header-timeout-ms, and a client who stalls mid-request holds its
 * request's resources for at most --body-idle-timeout-ms (upload) or --client-stall-timeout-ms
 * (download).
 *
 * Node's http server enforces the first three (maxConnections, headersTimeout, requestTimeout,
 * checked every second). The last two are one socket timer with a decision when it fires: the
 * same silence means a stalled client while its request body is arriving or while its response
 * waits in the send buffer, and nothing wrong while the gateway itself is working (a backend
 * answer, the scheduler) or the connection is idle between requests (the keep-alive timeout
 * closes that one, as the Keep-Alive header tells the client).
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { ConnectionLimits } from '../common/config.js';
import { sendError } from '../s3/respond.js';

/** How often Node checks headersTimeout and requestTimeout (its default, 30 s, would add up to 30 s to both). */
export const CONNECTION_CHECK_INTERVAL_MS = 1000;

/** A response that could not be flushed this long after a timeout answer is cut. */
const ANSWER_GRACE_MS = 1000;

interface Exchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
}

export type TimeoutKind = 'headers' | 'body-idle' | 'client-stall';

export class ConnectionGuard {
  readonly #limits: ConnectionLimits;
  readonly #onTimeout: (kind: TimeoutKind) => void;
  /** The request each connection is serving now (none between requests). */
  readonly #current = new WeakMap<Socket, Exchange>();
  /** Connections that have sent at least one request. */
  readonly #used = new WeakSet<Socket>();

  constructor(server: Server, limits: ConnectionLimits, onTimeout: (kind: TimeoutKind) => void) {
    this.#limits = limits;
    this.#onTimeout = onTimeout;
    server.maxConnections = limits.maxConnections;
    server.headersTimeout = limits.headerTimeoutMs;
    server.requestTimeout = limits.requestTimeoutMs;
    server.on('connection', (socket: Socket) => {
      // Until its first request's headers, a connection is unauthenticated: the header bound.
      socket.setTimeout(limits.headerTimeoutMs);
    });
    // Node emits a socket's timeout here (and destroys the socket itself when nobody listens).
    server.on('timeout', (socket: Socket) => this.#timedOut(socket));
  }

  /**
   * Called when a request's headers have arrived: its body is timed from now. `over` runs once,
   * when the request is over both ways (its response closed, its body read or discarded) or its
   * socket is gone: Node emits no 'close' on the response of a pipelined request whose socket
   * dies before its turn, so the socket's closing ends every request queued on it.
   */
  track(req: IncomingMessage, res: ServerResponse, over: () => void): void {
    const socket = req.socket;
    this.#used.add(socket);
    this.#current.set(socket, { req, res });
    socket.setTimeout(this.#limits.bodyIdleTimeoutMs);
    let responseClosed = false;
    let ended = false;
    const finish = (): void => {
      if (ended) return;
      ended = true;
      socket.off('close', finish);
      // Between requests the socket's timer is Node's keep-alive timeout (set as the response
      // finished), whose firing #timedOut turns into the close the Keep-Alive header announced.
      if (this.#current.get(socket)?.req === req) this.#current.delete(socket);
      over();
    };
    const bodyDone = (): void => {
      if (responseClosed) return finish();
      // The body is in: from here on the silence that counts is the client not reading.
      if (this.#current.get(socket)?.req === req) socket.setTimeout(this.#limits.clientStallTimeoutMs);
    };
    // A request without a body is complete once the parser has run past its headers (just after
    // this 'request' event); one with a body once the handler has read it to its end.
    setImmediate(() => {
      if (req.complete && !responseClosed) bodyDone();
    });
    req.once('end', bodyDone);
    req.once('close', () => {
      if (responseClosed) finish();
    });
    socket.once('close', finish);
    res.once('close', () => {
      responseClosed = true;
      if (req.complete || req.destroyed) return finish();
      // Answered before its body was in (an early refusal drains the rest): the rest is timed as
      // a body, not by the keep-alive timer Node set as the response finished.
      if (this.#current.get(socket)?.req === req && !socket.destroyed) socket.setTimeout(this.#limits.bodyIdleTimeoutMs);
    });
  }

  #timedOut(socket: Socket): void {
    const exchange = this.#current.get(socket);
    if (exchange === undefined) {
      // Never sent a request (the header bound: an unauthenticated connection holding a socket),
      // or idle between requests for Node's keep-alive timeout: closed, as Node would.
      if (!this.#used.has(socket)) this.#onTimeout('headers');
      socket.destroy();
      return;
    }
    const { req, res } = exchange;
    if (!req.complete) {
      // The gateway has not read what is buffered: it is the one waiting (on the store), not the
      // client. Timed again, since only socket activity would re-arm the timer.
      if (req.readableLength > 0) {
        socket.setTimeout(this.#limits.bodyIdleTimeoutMs);
        return;
      }
      this.#onTimeout('body-idle');
      this.#answerTimeout(socket, res);
      return;
    }
    const unsent = res.writableLength > 0 || socket.writableLength > 0 || socket.writableNeedDrain;
    if (unsent) {
      this.#onTimeout('client-stall');
      socket.destroy();
    }
    // Otherwise the gateway is working (a store answer, the scheduler): nothing to blame the client for.
  }

  /** 400 RequestTimeout when nothing was sent yet, then the connection is closed either way. */
  #answerTimeout(socket: Socket, res: ServerResponse): void {
    if (res.headersSent || res.destroyed) {
      socket.destroy();
      return;
    }
    res.setHeader('connection', 'close');
    const requestId = String(res.getHeader('x-amz-request-id') ?? '');
    const error = new ObjectCacheError(
      'OC_ERR_REQUEST_TIMEOUT',
      'Your socket connection to the server was not read from or written to within the timeout period; the connection is closed',
    );
    sendError(res, error, requestId, res.req.url ?? '/', 0);
    // `connection: close` ends the socket once the answer is flushed; a client that reads
    // nothing either is cut after the grace.
    const cut = setTimeout(() => socket.destroy(), ANSWER_GRACE_MS);
    cut.unref();
    socket.once('close', () => clearTimeout(cut));
  }
}
