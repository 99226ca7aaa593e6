/**
 * A bounded receive buffer for backend connections (native/socket-buffer.c, built by
 * scripts/build-native.mjs): a streamed chunk read pauses its response while its next layer has
 * no buffer, and what the store has sent meanwhile waits in the kernel's receive buffer, which
 * Linux otherwise grows up to net.ipv4.tcp_rmem's maximum per connection. Without the native
 * module (no C compiler at build time) streamed reads are off and grouped range reads serve
 * every layerwise GET (docs/layerwise-get.md, Streamed reads).
 */
import type { Socket } from 'node:net';
import { loadNative } from './load.js';

interface NativeSocketBuffer {
  setReceiveBuffer(fd: number, bytes: number): number;
}

function load(): NativeSocketBuffer | null {
  return loadNative<NativeSocketBuffer>('socket-buffer');
}

/** Whether receive buffers can be bounded here (the native module is built and loads). */
export function canBoundReceiveBuffers(): boolean {
  return load() !== null;
}

/**
 * Sets a connected socket's receive buffer to `bytes` (the kernel doubles it for bookkeeping) and
 * returns what the kernel granted, or undefined when it cannot be set (no native module, no
 * descriptor).
 */
export function boundReceiveBuffer(socket: Socket, bytes: number): number | undefined {
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  const module = load();
  if (!module || typeof fd !== 'number' || fd < 0) return undefined;
  return module.setReceiveBuffer(fd, bytes);
}
