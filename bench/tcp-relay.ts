/**
 * A zero-logic TCP relay (no HTTP parsing, no signing), run as its own process by the
 * passthrough benchmark: the floor of what any proxy hop costs on this machine.
 *
 *   node dist/bench/tcp-relay.js LISTEN_PORT TARGET_PORT
 */
import { connect, createServer } from 'node:net';

const [listenPort, targetPort] = process.argv.slice(2).map(Number);
if (!listenPort || !targetPort) {
  console.error('usage: tcp-relay LISTEN_PORT TARGET_PORT');
  process.exit(2);
}
createServer((client) => {
  const upstream = connect(targetPort, '127.0.0.1');
  client.pipe(upstream);
  upstream.pipe(client);
  client.on('error', () => upstream.destroy());
  upstream.on('error', () => client.destroy());
  client.on('close', () => upstream.destroy());
  upstream.on('close', () => client.destroy());
}).listen(listenPort, '127.0.0.1', () => process.send?.('ready'));
