"""The stream reader on hand-made streams (schemas/wire-format.md section 4): what an ERROR frame
tells, from this gateway and from an older one."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any, Dict

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


VECTORS = json.loads((Path(__file__).resolve().parents[3] / "schemas" / "test-vectors" / "streams.json").read_text())


class _Trickle(io.BytesIO):
    """A body that arrives a few bytes per read, as a socket may deliver it."""

    def readinto(self, b: Any) -> int:
        view = memoryview(b)
        return super().readinto(view[: min(len(view), 5)])


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
@pytest.mark.parametrize("source", [io.BytesIO, _Trickle], ids=["whole", "trickle"])
def test_the_shared_stream_vectors(vector: Dict[str, Any], source: Any) -> None:
    g = VECTORS["geometry"]
    target = bytearray((g["end"] - g["first"]) * g["chunks"] * g["layerBytes"])
    geometry = Geometry(g["first"], g["end"], g["chunks"], g["layerBytes"], memoryview(target), g["chunks"] * g["layerBytes"])
    expect = vector["expect"]
    reader = read_frames(source(bytes.fromhex(vector["body"])), geometry)
    if expect["outcome"] == "ok":
        ready = []
        try:
            while True:
                ready.append(next(reader)[0])
        except StopIteration as done:
            summary = done.value
        assert ready == list(range(g["first"], g["end"]))
        assert target.hex() == expect["layers"] and summary["mode"] == expect["mode"]
        return
    with pytest.raises(ObjectCacheError) as caught:
        for _ in reader:
            pass
    assert caught.value.code == expect["code"]
    if "retryable" in expect:
        assert caught.value.retryable is expect["retryable"]
    if "details" in expect:
        assert dict(caught.value.details) == expect["details"]


def test_a_code_this_client_does_not_know_is_internal_with_the_code_kept() -> None:
    newer = _read({"code": "OC_ERR_FROM_THE_FUTURE", "message": "m", "retryable": True})
    assert newer.code == "OC_ERR_INTERNAL" and newer.details["Code"] == "OC_ERR_FROM_THE_FUTURE" and newer.retryable is True
    odd = _read({"code": [1], "message": "m"})
    assert odd.code == "OC_ERR_INTERNAL" and odd.details["Code"] == [1]
    none = _read({"message": "m"})
    assert none.code == "OC_ERR_INTERNAL" and "Code" not in none.details


def test_the_request_id_shows_in_the_message_and_botocore_shape_once_known() -> None:
    error = _read({"code": "OC_ERR_CHUNK_CORRUPT", "message": "m"})
    assert error.request_id is None and "request" not in str(error)
    error.request_id = "req-1"  # as the client sets it from the response's x-amz-request-id
    assert str(error) == "OC_ERR_CHUNK_CORRUPT: m (request req-1)"
    assert error.response["ResponseMetadata"]["RequestId"] == "req-1"
