"""Chunk keys, exactly as the TypeScript client names them (schemas/wire-format.md section 1).

``fingerprint`` = the first 16 hex digits of
``SHA-256("objectcache-v1|<model_id>|<dtype>|<G>|<L>|<S>|<layout>")``; chunk hashes chain
``H_0 = SHA-256(utf8(fingerprint) || tokens_0)``, ``H_i = SHA-256(H_{i-1} || tokens_i)`` with each
chunk's tokens as little-endian u32; keys are ``<namespace>/<fingerprint>/<hex H_i>``. Only full
chunks are keyed. The shared vectors in ``schemas/test-vectors/chunk-keys.json`` pin both clients.
A chunk's token ids are recorded with it as ``encode_tokens`` writes them (schemas/kv-tokens.ts;
vectors in ``schemas/test-vectors/kv-tokens.json``).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Iterable, List, Optional, Sequence

from ._contract import LAYOUTS as LAYOUTS
from ._contract import MAX_TOKENS_META_CHARS
from .types import Layout


def layout_fingerprint(model_id: str, dtype: str, chunk_tokens: int, layers: int, layer_bytes: int, layout: Layout) -> str:
    """16 hex characters naming a model layout."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    canonical = "|".join(["objectcache-v1", model_id, dtype, str(chunk_tokens), str(layers), str(layer_bytes), layout])
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def chunk_hashes(tokens: Sequence[int], chunk_tokens: int, fingerprint: str) -> List[str]:
    """Hex hashes of the full chunks of ``tokens``, in prefix order."""
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be at least 1")
    hashes: List[str] = []
    previous = fingerprint.encode("utf-8")
    pack = struct.Struct(f"<{chunk_tokens}I").pack
    for start in range(0, len(tokens) - chunk_tokens + 1, chunk_tokens):
        chunk: Iterable[int] = (int(t) & 0xFFFFFFFF for t in tokens[start : start + chunk_tokens])
        digest = hashlib.sha256(previous + pack(*chunk)).digest()
        hashes.append(digest.hex())
        previous = digest
    return hashes


def chunk_keys(tokens: Sequence[int], model_id: str, dtype: str, chunk_tokens: int, layers: int, layer_bytes: int, layout: Layout, namespace: str = "kv") -> List[str]:
    """Object keys of the full chunks of ``tokens`` for this model layout."""
    fingerprint = layout_fingerprint(model_id, dtype, chunk_tokens, layers, layer_bytes, layout)
    prefix = f"{namespace}/{fingerprint}/"
    return [prefix + h for h in chunk_hashes(tokens, chunk_tokens, fingerprint)]


def encode_tokens(tokens: Sequence[int]) -> Optional[str]:
    """The ``objectcache-tokens`` value for ``tokens`` (each a u32): unsigned LEB128 varints in
    base64url without padding (schemas/kv-tokens.ts), or None when it would not fit."""
    out = bytearray()
    for token in tokens:
        value = int(token) & 0xFFFFFFFF
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
    text = base64.urlsafe_b64encode(bytes(out)).decode("ascii").rstrip("=")
    return text if len(text) <= MAX_TOKENS_META_CHARS else None
