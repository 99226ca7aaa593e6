"""Stored layouts and the per-layer checksums the gateway verifies (wire-format.md section 1)."""

from __future__ import annotations

import base64
import struct
from typing import List

from crc32c import crc32c

# The metadata names of the per-layer CRC-32Cs (``x-amz-meta-oc-layer-crc32c`` on the wire) and of
# an encoded chunk's index (its codec and each slice's length, schemas/wire-format.md section 6),
# and how many layers' checksums S3's 2 KB of user metadata holds: the gateway's (_contract).
from ._contract import CODEC_META as CODEC_META
from ._contract import LAYER_CRC_META as LAYER_CRC_META
from ._contract import MAX_CHECKSUMMED_LAYERS as MAX_CHECKSUMMED_LAYERS
from ._contract import SLICE_BYTES_META as SLICE_BYTES_META
from .types import Layout


def to_canonical(stored: bytes, layout: Layout, layers: int, layer_bytes: int) -> bytes:
    """A stored chunk in delivered (KV_L2TD) form: per layer, its K half then its V half."""
    if layout != "KV_2LTD":
        return bytes(stored)
    half = layer_bytes // 2
    view = memoryview(stored)
    parts = []
    for layer in range(layers):
        parts.append(view[layer * half : (layer + 1) * half])
        parts.append(view[layers * half + layer * half : layers * half + (layer + 1) * half])
    return b"".join(parts)


def layer_crcs(canonical: bytes, layers: int, layer_bytes: int) -> List[int]:
    """CRC-32C of each layer's slice of a chunk in KV_L2TD form."""
    view = memoryview(canonical)
    return [crc32c(view[l * layer_bytes : (l + 1) * layer_bytes]) for l in range(layers)]


def encode_layer_crcs(crcs: List[int]) -> str:
    """Base64 (with padding) of the big-endian u32 checksums, in layer order."""
    return base64.b64encode(struct.pack(f">{len(crcs)}I", *crcs)).decode("ascii")
