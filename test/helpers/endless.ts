/**
 * A body without end, for tests of what a reader holds when a store or a gateway never stops
 * answering: after `head` (a status line, headers with `Transfer-Encoding: chunked`, and any
 * chunks of its own), chunks of 64 KiB of `fill` as fast as the reader takes them, until it goes
 * or `ms` pass (then the connection is closed), so a test that fails does not hang for ever.
 */
import type { Socket } from 'node:net';

export function answerWithoutEnd(socket: Socket, head: string, fill: string, ms = 10_000): void {
  socket.write(head);
  const piece = `10000\r\n${fill.repeat(0x10000)}\r\n`;
  const deadline = Date.now() + ms;
  const more = (): void => {
    while (!socket.destroyed && Date.now() < deadline && socket.write(piece));
    if (socket.destroyed) return;
    if (Date.now() < deadline) socket.once('drain', more);
    else socket.destroy();
  };
  more();
}
