"""The smoke check scripts/check-engine-installs.sh runs after one of docs/engines.md's install
lines, in the fresh virtualenv that line installed into (run from the repository's root):

    python client/python/engine/check_install.py lmcache|lmcache-mp|vllm-obj|sglang

Each check imports what that engine path loads and builds what can be built without a GPU or a
gateway, from docs/engines.md's own configuration blocks:

- ``lmcache``: LMCache's config from the page's YAML, the plugin's module and class as LMCache
  names them, and vLLM's LMCacheConnectorV1 module.
- ``lmcache-mp``: ``lmcache server`` started with the page's flags (1 GB of L1 here, not 20) and
  the page's ``--l2-adapter`` JSON (pointed at a port nothing listens on: a gateway that cannot be
  reached does not stop the server); its HTTP status must list the adapter. This is what failed
  with ``ImportError ... _ExtendedAttributes`` when opentelemetry-api was lifted past 1.40.
- ``vllm-obj``: ``nixl._api`` importable (objectcache.engines.nixl_compat's .pth), vLLM's NIXL
  wrapper available, its object tier's manager module importable, and NIXL's OBJ back end created
  with the page's parameters.
- ``sglang``: SGLang's storage backend factory, HiCache's storage config and objectcache's backend
  class as the page's JSON names it.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "client" / "python" / "tests_engine"))

from engine_docs import block, filled  # noqa: E402

DEAD = "http://127.0.0.1:9"  # nothing listens on port 9 here


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_lmcache() -> None:
    import tempfile

    from lmcache.v1.config import LMCacheEngineConfig

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config_file:
        config_file.write(block("LMCache, in process (vLLM's LMCacheConnectorV1)", "yaml"))
        config_file.flush()
        extra = LMCacheEngineConfig.from_file(config_file.name).extra_config
    module = importlib.import_module(extra["remote_storage_plugin.objectcache.module_path"])
    getattr(module, extra["remote_storage_plugin.objectcache.class_name"])
    importlib.import_module("vllm.distributed.kv_transfer.kv_connector.v1.lmcache_connector")
    print("lmcache: config, plugin and vLLM's LMCacheConnectorV1 module load")


def check_lmcache_mp() -> None:
    adapter = filled("LMCache, multi-process mode", "json", {"endpoint": DEAD, "bucket": "kvcache", "access_key": "ak", "secret_key": "sk"})
    command = block("LMCache, multi-process mode", "bash").strip()
    assert command.startswith("lmcache server "), command
    flags = command[len("lmcache server "):].replace('"$(cat l2-adapter.json)"', "ADAPTER").split()
    flags[flags.index("--l1-size-gb") + 1] = "1"  # the page's 20 GB is allocated at start-up
    flags[flags.index("ADAPTER")] = json.dumps(json.loads(adapter))
    http_port, zmq_port = free_port(), free_port()
    server_bin = shutil.which("lmcache")
    assert server_bin, "the lmcache command is not installed"
    assert subprocess.run([server_bin, "server", "--help"], capture_output=True, timeout=120).returncode == 0
    argv = [server_bin, "server", *flags, "--host", "127.0.0.1", "--port", str(zmq_port), "--http-port", str(http_port)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                raise SystemExit(f"lmcache server exited {server.returncode}:\n{server.stdout.read()[-4000:] if server.stdout else ''}")
            if time.monotonic() > deadline:
                raise SystemExit("lmcache server did not answer in 180 s")
            try:
                status = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/status", timeout=5).read())
                break
            except OSError:
                time.sleep(0.5)
        adapters = [a["type"] for a in status["storage_manager"]["l2_adapters"]]
        assert adapters == ["ObjectCacheL2Adapter"], adapters
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    print("lmcache-mp: lmcache server started with the page's flags and reports ObjectCacheL2Adapter")


def check_vllm_obj() -> None:
    import nixl._api  # the alias the .pth installs when only nixl_cu12 is there

    print(f"nixl._api is {nixl._api.__name__}")
    from vllm.distributed import nixl_utils

    assert nixl_utils.NixlWrapper is not None, "vLLM says NIXL is not available"
    importlib.import_module("vllm.v1.kv_offload.tiering.obj.manager")
    from vllm.config import KVTransferConfig

    transfer = KVTransferConfig(**json.loads(filled("vLLM's native object tier", "json", {"endpoint": DEAD, "bucket": "kvcache", "access_key": "ak", "secret_key": "sk"})))
    store = transfer.kv_connector_extra_config["secondary_tiers"][0]["store_config"]
    from vllm.v1.kv_offload.tiering.obj.config import ObjStoreConfig

    params = ObjStoreConfig(**store).to_nixl_params()
    agent = nixl_utils.NixlWrapper("objectcache-check", nixl_utils.nixl_agent_config(backends=[]))
    agent.create_backend("OBJ", params)
    print("vllm-obj: nixl._api, vLLM's NIXL wrapper, its object tier and NIXL's OBJ back end load")


def check_sglang() -> None:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: F401
    from sglang.srt.mem_cache.storage import StorageBackendFactory  # noqa: F401

    extra = json.loads(filled("SGLang HiCache", "json", {"endpoint": DEAD, "bucket": "kvcache"}))
    module = importlib.import_module(extra["module_path"])
    getattr(module, extra["class_name"])
    print("sglang: SGLang's storage factory and the backend class of the page's JSON load")


CHECKS = {"lmcache": check_lmcache, "lmcache-mp": check_lmcache_mp, "vllm-obj": check_vllm_obj, "sglang": check_sglang}

if __name__ == "__main__":
    os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")
    CHECKS[sys.argv[1]]()
