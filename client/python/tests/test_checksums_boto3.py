"""boto3 with the CRT (``botocore[crt]``), as current Python stacks send S3 checksums: CRC32C and
CRC64NVME computed by botocore for a streamed body and given by the caller, through the gateway on
both backends and against MinIO direct, answered again with ``ChecksumMode="ENABLED"``; a wrong
value is refused and stores nothing. (Over plain HTTP botocore sends the checksum as a header;
the aws-chunked trailer form is what test/trailing-checksums.test.ts drives with the AWS SDK v3.)"""

from __future__ import annotations

import base64
import io
import os
from typing import Iterator, Tuple

import awscrt  # noqa: F401  (botocore[crt], in the test extras: CRC32C and CRC64NVME need it)
import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from stack import CLIENT_KEY, CLIENT_SECRET, MINIO_KEY, MINIO_SECRET, Stack, start_stack, uid


@pytest.fixture(scope="module", params=["gateway-s3", "gateway-local", "minio-direct"])
def endpoint(request: pytest.FixtureRequest) -> Iterator[Tuple[str, str, str]]:
    backend = "local" if request.param == "gateway-local" else "s3"
    running: Stack = start_stack(backend=backend)
    try:
        if request.param == "minio-direct":
            yield running.minio_url, MINIO_KEY, MINIO_SECRET
        else:
            yield running.gateway_url, CLIENT_KEY, CLIENT_SECRET
    finally:
        running.stop()


def s3_client(url: str, key: str, secret: str, when: str = "when_supported") -> object:
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation=when, response_checksum_validation="when_supported", retries={"max_attempts": 1}),
    )


@pytest.mark.parametrize("algorithm", ["CRC32C", "CRC64NVME"])
def test_trailer_and_header_checksums_round_trip(endpoint: Tuple[str, str, str], algorithm: str) -> None:
    url, key, secret = endpoint
    s3 = s3_client(url, key, secret)  # type: Any
    bucket = uid("crc")
    s3.create_bucket(Bucket=bucket)
    data = os.urandom(1024 * 1024 + 3)
    # A file-like body: botocore computes the checksum as it reads it.
    put = s3.put_object(Bucket=bucket, Key="trailer", Body=io.BytesIO(data), ChecksumAlgorithm=algorithm)
    value = put[f"Checksum{algorithm}"]
    head = s3.head_object(Bucket=bucket, Key="trailer", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == value
    got = s3.get_object(Bucket=bucket, Key="trailer", ChecksumMode="ENABLED")
    assert got["Body"].read() == data  # botocore validates the checksum as it reads

    # The same value in a header, on a second object.
    put2 = s3.put_object(Bucket=bucket, Key="header", Body=data, **{f"Checksum{algorithm}": value})
    assert put2[f"Checksum{algorithm}"] == value

    wrong = bytearray(base64.b64decode(value))
    wrong[0] ^= 1
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="wrong", Body=data, **{f"Checksum{algorithm}": base64.b64encode(bytes(wrong)).decode()})
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(ClientError) as missing:
        s3.head_object(Bucket=bucket, Key="wrong")
    assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
