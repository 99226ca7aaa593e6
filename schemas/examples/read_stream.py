#!/usr/bin/env python3
"""A reader of the ObjectCache stream, written from schemas/wire-format.md alone.

Usage: read_stream.py STREAM_FILE CHUNKS LAYER_BYTES FIRST END OUT_FILE
Reads a response body saved to STREAM_FILE, checks every rule of section 4, writes the delivered
layers to OUT_FILE in layer-major order, and prints the END summary as JSON. On any error it exits
1 with the error's stable code first: OC_ERR_CLIENT_PROTOCOL (the format's rules),
OC_ERR_CLIENT_CRC, OC_ERR_CLIENT_INCOMPLETE (the body ended early), or an ERROR frame's code
followed by the frame's JSON.
Standard library only (CRC-32C is computed bitwise, which is slow but needs nothing installed).
"""
import json
import struct
import sys


def crc32c(data: bytes, crc: int = 0) -> int:
    table = crc32c.table
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _table():
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


crc32c.table = _table()


def fail(code: str, message: str) -> SystemExit:
    return SystemExit(f'{code}: {message}')


def main() -> int:
    path, chunks, layer_bytes, first, end, out_path = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
    data = open(path, 'rb').read()
    if data[:4] != b'OCKV' or struct.unpack_from('<HH', data, 4) != (1, 0):
        raise fail('OC_ERR_CLIENT_PROTOCOL', 'bad preamble')
    pos = 8
    layers = [None] * (end - first)
    chunk_payloads = []
    mode = None
    while True:
        if pos + 24 > len(data):
            raise fail('OC_ERR_CLIENT_INCOMPLETE', 'no END frame')
        ftype, flags, reserved, index, length, crc, reserved2 = struct.unpack_from('<BBHIQII', data, pos)
        pos += 24
        payload = data[pos:pos + length]
        pos += length
        if flags or reserved or reserved2:
            raise fail('OC_ERR_CLIENT_PROTOCOL', 'a reserved field is set')
        if len(payload) != length:
            raise fail('OC_ERR_CLIENT_INCOMPLETE', 'the body ends inside a frame')
        if crc32c(payload) != crc:
            raise fail('OC_ERR_CLIENT_CRC', 'crc mismatch')
        if ftype == 1:
            if mode == 'chunkwise' or index != first + sum(x is not None for x in layers) or length != chunks * layer_bytes:
                raise fail('OC_ERR_CLIENT_PROTOCOL', 'LAYER out of order')
            mode = 'layerwise'
            layers[index - first] = payload
        elif ftype == 2:
            if mode == 'layerwise' or index != len(chunk_payloads) or length != (end - first) * layer_bytes:
                raise fail('OC_ERR_CLIENT_PROTOCOL', 'CHUNK out of order')
            mode = 'chunkwise'
            chunk_payloads.append(payload)
        elif ftype in (3, 4):
            try:
                document = json.loads(payload.decode('utf-8'))
            except ValueError:
                raise fail('OC_ERR_CLIENT_PROTOCOL', 'an ERROR or END frame that is not UTF-8 JSON')
            if not isinstance(document, dict):
                raise fail('OC_ERR_CLIENT_PROTOCOL', 'an ERROR or END frame that is not a JSON object')
            if ftype == 3:
                raise fail(str(document.get('code', 'OC_ERR_INTERNAL')), payload.decode())
            summary = document
            break
        else:
            raise fail('OC_ERR_CLIENT_PROTOCOL', 'unknown frame type')
    if pos != len(data):
        raise fail('OC_ERR_CLIENT_PROTOCOL', 'bytes after END')
    if mode == 'chunkwise':
        layers = [b''.join(c[(l * layer_bytes):(l + 1) * layer_bytes] for c in chunk_payloads) for l in range(end - first)]
    if any(x is None for x in layers):
        raise fail('OC_ERR_CLIENT_PROTOCOL', 'END before every layer')
    with open(out_path, 'wb') as out:
        for layer in layers:
            out.write(layer)
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())
