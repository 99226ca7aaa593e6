"""Pins and quotas from the Python client against a budgeted gateway in front of MinIO: pinned
chunks outlive colder ones, a pin is refused with its code where it cannot hold, and a write past
the tenant's quota that nothing of its own can make room for is refused with nothing stored."""

import datetime
import os
from typing import Iterator, Tuple

import pytest
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, stack_with_bucket, uid

from objectcache import ObjectCacheClient, ObjectCacheError

CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def budgeted() -> Iterator[Tuple[Stack, str]]:
    bucket = uid("pycap").replace("_", "-")
    # The administrator key (CLIENT_KEY) is its own tenant: a quota of 4 chunks.
    with stack_with_bucket(
        bucket,
        ["--budget", f"{bucket}={16 * CHUNK}", "--tenant-quota", f"{CLIENT_KEY}={4 * CHUNK}", "--capacity-state-bucket", f"{bucket}-state", "--capacity-sync-ms", "100", "--capacity-lease-ms", "1000"],
    ) as stack:
        yield stack, bucket


def test_pins_hold_and_quotas_refuse_what_cannot_fit(budgeted: Tuple[Stack, str]) -> None:
    stack, bucket = budgeted
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        keys = [f"paid/{i}" for i in range(3)]
        c.lookup(keys)  # names the chain, as an engine's lookup does
        for key in keys:
            c.put_chunk(key, os.urandom(CHUNK))
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        held = c.pin(keys, until)
        assert held is not None and abs((held - until).total_seconds()) < 0.001
        # Past the quota, the tenant's own unpinned chunk makes room; the pinned ones stay.
        c.put_chunk("free/0", os.urandom(CHUNK))
        c.put_chunk("free/1", os.urandom(CHUNK))
        assert c.lookup(keys) == 3
        assert c.list_keys("free/") == ["free/1"]
        c.pin(["free/1"], until)
        with pytest.raises(ObjectCacheError) as refused:
            c.put_chunk("free/2", os.urandom(CHUNK))  # everything of its own is pinned
        assert refused.value.code == "OC_ERR_QUOTA_EXCEEDED"
        assert "free/2" not in c.list_keys("free/")
        assert c.pin(keys, None) is None
        c.put_chunk("free/2", os.urandom(CHUNK))  # unpinned: the paid prefix's tail makes room
        assert c.lookup(keys) == 2
        with pytest.raises(ObjectCacheError) as naive:
            c.pin(keys, datetime.datetime(2030, 1, 1))
        assert naive.value.code == "OC_ERR_CLIENT_USAGE"
    with ObjectCacheClient(stack.gateway_url, "nobudget-" + bucket[:40], (CLIENT_KEY, CLIENT_SECRET)) as other:
        other.ensure_bucket()
        with pytest.raises(ObjectCacheError) as unmanaged:
            other.pin(["x"], until)
        assert unmanaged.value.code == "OC_ERR_CAPACITY_UNMANAGED"
