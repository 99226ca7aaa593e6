"""Fixtures of the engine tests: the real model (loaded once), and one gateway per backend (the
embedded store, and MinIO), each with ``--domain oc.test`` so LMCache's own S3 connector, which
sends virtual-hosted-style requests only, can reach it."""
import json
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import harness  # noqa: E402
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, start_stack, uid  # noqa: E402

from objectcache import ObjectCacheClient  # noqa: E402

DOMAIN = "oc.test"
_stacks: Dict[str, Stack] = {}


@pytest.fixture(scope="session")
def model() -> Any:
    import torch

    torch.set_num_threads(2)
    return harness.load_model()


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return harness.load_tokenizer()


#: An inference fleet's key, confined by its access policy to ``fleet/`` of any bucket.
FLEET_KEY, FLEET_SECRET = "py-fleet", "py-fleet-secret"
FLEET_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], "Resource": "arn:aws:s3:::*/fleet/*"},
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::*", "Condition": {"StringLike": {"s3:prefix": "fleet/*"}}},
    ],
}


@pytest.fixture(scope="session", params=["local", "s3"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    credentials = tmp_path_factory.mktemp("credentials") / "credentials.json"
    credentials.write_text(json.dumps([{"accessKeyId": FLEET_KEY, "secretAccessKey": FLEET_SECRET, "tenant": "fleet", "policy": FLEET_POLICY}]))
    running = start_stack(["--domain", DOMAIN, "--credentials", str(credentials)], backend=request.param)
    yield running
    running.stop()


@pytest.fixture()
def bucket(stack: Stack) -> Iterator[str]:
    """A fresh bucket on the stack, per test. A fixed name per test would collide across tests;
    virtual hosts need it in /etc/hosts, so names stay short and DNS-safe."""
    name = uid("eng").replace("_", "-")
    with ObjectCacheClient(stack.gateway_url, name, (CLIENT_KEY, CLIENT_SECRET)) as c:
        c.ensure_bucket()
    yield name
