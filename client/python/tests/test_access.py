"""Access policies seen from the Python client, on both backends: two teams confined to their
prefixes of one bucket cannot read, list, delete or probe each other's KV, a descriptor mixing an
allowed and a forbidden chunk is refused as a whole, a tenant cannot be claimed, and every
refusal is the stable code with status 403."""

import json
import tempfile
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
from stack import Stack, layer_major, stack_with_bucket, synthetic_chunk, uid

from objectcache import ObjectCacheClient, ObjectCacheError

LAYERS, LAYER_BYTES = 4, 2048
TEAM_A = ("py-team-a", "py-team-a-secret")
TEAM_B = ("py-team-b", "py-team-b-secret")


def team_policy(bucket: str, team: str) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], "Resource": f"arn:aws:s3:::{bucket}/{team}/*"},
            {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}", "Condition": {"StringLike": {"s3:prefix": f"{team}/*"}}},
        ],
    }


@pytest.fixture(scope="module", params=["local", "s3"])
def teams(request: pytest.FixtureRequest) -> Iterator[Tuple[Stack, str]]:
    bucket = uid("py-acl")
    with tempfile.TemporaryDirectory() as tmp:
        credentials = Path(tmp) / "credentials.json"
        credentials.write_text(
            json.dumps(
                [
                    {"accessKeyId": TEAM_A[0], "secretAccessKey": TEAM_A[1], "tenant": "team-a", "policy": team_policy(bucket, "team-a")},
                    {"accessKeyId": TEAM_B[0], "secretAccessKey": TEAM_B[1], "tenant": "team-b", "policy": team_policy(bucket, "team-b")},
                ]
            )
        )
        with stack_with_bucket(bucket, ["--credentials", str(credentials), "--threshold", "0"], backend=request.param) as running:
            yield running, bucket


def seed(client: ObjectCacheClient, team: str, chunks: int) -> Tuple[List[str], List[bytes]]:
    keys = [f"{team}/kv/{uid('c')}-{c}" for c in range(chunks)]
    data = [synthetic_chunk(hash(keys[0]) % 1000, c, LAYERS * LAYER_BYTES) for c in range(chunks)]
    client.put_chunks(keys, data)
    return keys, data


def refused(code: str = "OC_ERR_ACCESS_DENIED") -> "pytest.RaisesContext[ObjectCacheError]":
    return pytest.raises(ObjectCacheError, match=code)


def test_teams_cannot_touch_each_others_kv(teams: Tuple[Stack, str]) -> None:
    stack, bucket = teams
    with ObjectCacheClient(stack.gateway_url, bucket, TEAM_A) as a, ObjectCacheClient(stack.gateway_url, bucket, TEAM_B) as b:
        a_keys, a_data = seed(a, "team-a", 3)
        b_keys, b_data = seed(b, "team-b", 1)
        descriptor = ObjectCacheClient.descriptor(a_keys, layers=LAYERS, chunk_tokens=16, layer_bytes=LAYER_BYTES)
        assert bytes(a.fetch(descriptor).target) == layer_major(a_data, LAYER_BYTES, 0, LAYERS)

        for attempt in (
            lambda: b.fetch(descriptor),
            lambda: b.fetch(descriptor, transport="post"),
            lambda: b.fetch(ObjectCacheClient.descriptor([b_keys[0], a_keys[0]], layers=LAYERS, chunk_tokens=16, layer_bytes=LAYER_BYTES)),
            lambda: b.get_object(a_keys[0]),
            lambda: b.delete(a_keys[0]),
            lambda: b.list_keys("team-a/"),
            lambda: b.list_keys(""),
            lambda: b.put_chunk("team-a/kv/planted", b"x" * 16),
        ):
            with refused() as caught:
                attempt()
            assert caught.value.status == 403
        # Probing by lookup answers the same whether the chunks exist or not.
        for keys in (a_keys, ["team-a/kv/never-written"], [b_keys[0], a_keys[0]]):
            with refused():
                b.lookup(keys)
        assert a.lookup(a_keys) == 3
        assert b.lookup(b_keys) == 1
        # Nothing of team A's changed.
        assert a.get_object(a_keys[0]) == a_data[0]
        assert "team-a/kv/planted" not in a.list_keys("team-a/")
        assert sorted(b.list_keys("team-b/")) == sorted(b_keys)


def test_a_descriptor_tenant_must_be_the_keys_own(teams: Tuple[Stack, str]) -> None:
    stack, bucket = teams
    with ObjectCacheClient(stack.gateway_url, bucket, TEAM_A) as a:
        keys, data = seed(a, "team-a", 2)
        with refused("OC_ERR_ACCESS_TENANT"):
            a.fetch(ObjectCacheClient.descriptor(keys, layers=LAYERS, chunk_tokens=16, layer_bytes=LAYER_BYTES, tenant="team-b"))
        before = stack.metric('objectcache_delivered_bytes_total{tenant="team-a"}')
        own = a.fetch(ObjectCacheClient.descriptor(keys, layers=LAYERS, chunk_tokens=16, layer_bytes=LAYER_BYTES, tenant="team-a"))
        assert bytes(own.target) == layer_major(data, LAYER_BYTES, 0, LAYERS)
        assert stack.metric('objectcache_delivered_bytes_total{tenant="team-a"}') == before + 2 * LAYERS * LAYER_BYTES


def test_a_refusal_sent_before_the_body_is_read_is_the_answer(teams: Tuple[Stack, str]) -> None:
    """The gateway refuses a forbidden PUT from its request line, drains at most 64 MiB of the
    body so that the client can read the 403, then closes: a larger body breaks off mid-send, and
    the client reports the refusal it was sent, not an unreachable gateway."""
    stack, bucket = teams
    with ObjectCacheClient(stack.gateway_url, bucket, TEAM_B) as b:
        with refused() as caught:
            b.put_chunk("team-a/kv/too-large-and-forbidden", bytes(80 * 1024 * 1024))
        assert caught.value.status == 403
        # The pool gave up the broken connection: the next call works.
        assert b.lookup(["team-b/kv/none"]) == 0
