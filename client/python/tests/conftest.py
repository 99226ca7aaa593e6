import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from stack import CLIENT_KEY, CLIENT_SECRET, Stack, start_stack, uid  # noqa: E402

from objectcache import ObjectCacheClient  # noqa: E402


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    running = start_stack()
    yield running
    running.stop()


@pytest.fixture()
def client(stack: Stack) -> Iterator[ObjectCacheClient]:
    with ObjectCacheClient(stack.gateway_url, uid("py"), (CLIENT_KEY, CLIENT_SECRET)) as c:
        c.ensure_bucket()
        yield c
