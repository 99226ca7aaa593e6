"""One contract across languages: the constants generated from the gateway's schemas
(``_contract``, scripts/gen-python-contract.mjs), the project's one version, the descriptor's
type, and ObjectCacheError as botocore's ClientError, for code written for boto3."""

from __future__ import annotations

import importlib.metadata
import io
import json
import pickle

import pytest
from botocore.exceptions import ClientError
from crc32c import crc32c

import objectcache
from objectcache import Descriptor, ObjectCacheClient, ObjectCacheError, _contract
from objectcache.stream import HEADER, PREAMBLE_STRUCT, Geometry, read_frames


def test_the_package_version_is_the_projects() -> None:
    try:
        installed = importlib.metadata.version("objectcache")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("objectcache is not installed (run from src)")
    # pyproject.toml takes it from _contract (hatch's version source), so the wheel says the same.
    assert installed == objectcache.__version__


def test_the_stream_layout_and_the_descriptor_are_the_gateways() -> None:
    assert HEADER.size == _contract.FRAME_HEADER_BYTES and PREAMBLE_STRUCT.size == _contract.PREAMBLE_BYTES
    descriptor = ObjectCacheClient.descriptor(["a", "b"], layers=2, chunk_tokens=16, layer_bytes=64, key_prefix="p/", codecs=["none"], tenant="t")
    assert Descriptor.__required_keys__ <= set(descriptor) <= Descriptor.__required_keys__ | Descriptor.__optional_keys__


def test_a_client_error_is_a_botocore_client_error_with_the_stable_code() -> None:
    with pytest.raises(ClientError) as caught:
        ObjectCacheClient("ftp://gateway", "bucket", ("key", "secret"))
    assert isinstance(caught.value, ObjectCacheError)
    assert caught.value.response["Error"]["Code"] == "OC_ERR_CLIENT_USAGE" == caught.value.code
    assert caught.value.operation_name is None  # no request was made


def test_an_error_frame_is_caught_as_client_error_with_its_code() -> None:
    body = json.dumps({"code": "OC_ERR_CHUNK_CORRUPT", "message": "layer 1 of chunk 0", "chunk": 0}).encode()
    stream = io.BytesIO(PREAMBLE_STRUCT.pack(_contract.STREAM_MAGIC, _contract.STREAM_VERSION, 0) + HEADER.pack(_contract.FRAME_ERROR, 0, 0, 0, len(body), crc32c(body), 0) + body)
    with pytest.raises(ClientError) as caught:
        for _ in read_frames(stream, Geometry(0, 2, 1, 8, memoryview(bytearray(16)), 8)):
            pass
    assert caught.value.response["Error"] == {"Code": "OC_ERR_CHUNK_CORRUPT", "Message": "layer 1 of chunk 0"}


def test_an_error_pickles_as_itself() -> None:
    error = ObjectCacheError("OC_ERR_CHUNK_MISSING", "gone", status=404, details={"S3Code": "NoSuchKey", "ChunkIndex": "1"}, request_id="r-1", operation_name="DescriptorGet")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ObjectCacheError and copy.args == error.args and vars(copy) == vars(error)
    assert str(copy) == str(error) and copy.response == error.response


def test_a_refused_request_reads_as_boto3_reads_the_gateways_answer(client: ObjectCacheClient) -> None:
    with pytest.raises(ClientError) as missing:
        client.get_object("absent")
    error = missing.value
    assert isinstance(error, ObjectCacheError)
    # What boto3 itself gets from the gateway (here the object store's answer, passed through):
    # the S3 code and status, and the request id.
    assert error.response["Error"]["Code"] == "NoSuchKey" and error.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert error.response["ResponseMetadata"]["RequestId"] == error.request_id and error.operation_name == "GetObject"
    descriptor = ObjectCacheClient.descriptor(["absent"], layers=1, chunk_tokens=1, layer_bytes=8)
    with pytest.raises(ClientError) as refused:
        client.fetch(descriptor)
    assert isinstance(refused.value, ObjectCacheError) and refused.value.operation_name == "DescriptorGet"
    assert refused.value.code == "OC_ERR_CHUNK_MISSING" and refused.value.response["Error"]["Code"] == "NoSuchKey"
