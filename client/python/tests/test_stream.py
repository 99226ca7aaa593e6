"""The stream reader on hand-made streams (schemas/wire-format.md section 4): what an ERROR frame
tells, from this gateway and from an older one."""
from __future__ import annotations

import io
import json
import struct

import pytest
from crc32c import crc32c

from objectcache import ObjectCacheError
from objectcache.stream import ERROR, HEADER, Geometry, read_frames


def _error_stream(payload: dict) -> io.BytesIO:
    body = json.dumps(payload).encode()
    return io.BytesIO(b"OCKV" + struct.pack("<HH", 1, 0) + HEADER.pack(ERROR, 0, 0, 0, len(body), crc32c(body), 0) + body)


def _read(payload: dict) -> ObjectCacheError:
    geometry = Geometry(0, 2, 1, 8, memoryview(bytearray(16)), 8)
    with pytest.raises(ObjectCacheError) as caught:
        for _ in read_frames(_error_stream(payload), geometry):
            pass
    return caught.value


def test_an_error_frame_says_whether_a_retry_may_succeed() -> None:
    assert _read({"code": "OC_ERR_CHUNK_CORRUPT", "message": "m", "retryable": True}).retryable is True
    assert _read({"code": "OC_ERR_CHUNK_CHANGED", "message": "m", "retryable": False}).retryable is False


def test_without_retryable_the_code_decides_and_unknown_fields_are_kept_as_details() -> None:
    changed = _read({"code": "OC_ERR_CHUNK_CHANGED", "message": "m", "chunk": 3, "key": "k/3", "layer": 1})
    assert changed.code == "OC_ERR_CHUNK_CHANGED" and changed.retryable is True
    # Named as in an S3 error document and in the TypeScript client's errors.
    assert changed.details == {"ChunkIndex": 3, "Key": "k/3", "Layer": 1}
    corrupt = _read({"code": "OC_ERR_CHUNK_CORRUPT", "message": "m", "later": "field"})
    assert corrupt.retryable is False and corrupt.details == {"later": "field"}
