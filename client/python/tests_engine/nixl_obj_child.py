"""Drives NIXL's OBJ plugin (``nixl_cu12``, aws-sdk-cpp inside) against an S3 endpoint as an
engine's transfer agent does: DRAM registered as the local side, objects registered by key as the
remote side, WRITE and READ transfers between them, ``query_memory`` to ask what exists. In a
process of its own (NIXL and UCX keep process-wide state). Called by test_nixl_obj.py:

    python nixl_obj_child.py PARAMS_JSON DATA_FILE

PARAMS_JSON holds the OBJ back end's parameters (docs/engines.md's, filled in by the test).

DATA_FILE holds a real model's KV. It is written as two objects (its first half, and its tail
from an unaligned offset in DRAM), then read back: the first at that offset, the second whole.
One JSON line reports each transfer's state, what query_memory found, and digests of the reads.
"""
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
from nixl_cu12._api import nixl_agent, nixl_agent_config
from nixl_cu12._bindings import nixlBackendError


def main() -> None:
    params_file, data_file = sys.argv[1:3]
    data = np.fromfile(data_file, dtype=np.uint8)
    half, offset = data.size // 2, 4096 + 13  # an unaligned offset into the object
    agent = nixl_agent("objectcache-test", nixl_agent_config(backends=[]))
    agent.create_backend("OBJ", json.loads(Path(params_file).read_text()))
    # Remote side: the plugin maps a descriptor's device id to an object key.
    objects = {1: "nixl/kv-first-half", 2: "nixl/kv-tail", 3: "nixl/never-written"}

    def xfer(op: str, local: Tuple[int, int], remote: Tuple[int, int, int]) -> str:
        handle = agent.initialize_xfer(op, agent.get_xfer_descs([(local[0], local[1], 0)], "DRAM"), agent.get_xfer_descs([remote], "OBJ"), "objectcache-test")
        try:
            state = agent.transfer(handle)
            deadline = time.monotonic() + 60
            while state == "PROC" and time.monotonic() < deadline:
                time.sleep(0.005)
                state = agent.check_xfer_state(handle)
        except nixlBackendError:  # how a failed transfer is reported (NIXL_ERR_BACKEND)
            state = "ERR"
        agent.release_xfer_handle(handle)
        return state

    def query() -> List[bool]:
        found = agent.query_memory([(0, 0, dev, key) for dev, key in objects.items()], "OBJ", "OBJ")
        return [entry is not None for entry in found]

    source = np.ascontiguousarray(data)
    agent.register_memory([(source.ctypes.data, source.nbytes, 0, "")], "DRAM")
    agent.register_memory([(0, 0, dev, key) for dev, key in objects.items()], "OBJ")
    result: Dict[str, Any] = {"before": query()}
    result["write_half"] = xfer("WRITE", (source.ctypes.data, half), (0, half, 1))
    # From an unaligned place in DRAM: the object is the data from that offset on.
    result["write_tail"] = xfer("WRITE", (source.ctypes.data + offset, source.nbytes - offset), (0, source.nbytes - offset, 2))
    result["after"] = query()

    at_offset = np.zeros(half - offset, dtype=np.uint8)
    whole = np.zeros(source.nbytes - offset, dtype=np.uint8)
    missing = np.zeros(4096, dtype=np.uint8)
    for buf in (at_offset, whole, missing):
        agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    result["read_offset"] = xfer("READ", (at_offset.ctypes.data, at_offset.nbytes), (offset, at_offset.nbytes, 1))
    result["read_whole"] = xfer("READ", (whole.ctypes.data, whole.nbytes), (0, whole.nbytes, 2))
    result["read_missing"] = xfer("READ", (missing.ctypes.data, missing.nbytes), (0, missing.nbytes, 3))
    digest = lambda a: hashlib.sha256(a.tobytes()).hexdigest()  # noqa: E731
    result["offset_sha256"], result["whole_sha256"] = digest(at_offset), digest(whole)
    result["objects"] = objects
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
