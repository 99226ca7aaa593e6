#!/usr/bin/env bash
# The engine-integration tests (client/python/tests_engine): the real SmolLM2-135M model through
# LMCache 0.5.6 (in process and multi-process), vLLM 0.33's object tier, NIXL's OBJ plugin and
# SGLang 0.5.23's HiCache, on CPU, against the real gateway on both backends
# (its embedded store, and the pinned MinIO). Makes or reuses the engine virtualenv
# (scripts/engine-venv.sh: torch, transformers, LMCache, vLLM, NIXL and SGLang; about 7.6 GB, kept in
# ~/.cache/objectcache). Needs the Node build (dist/) and MinIO, which
# `npm test` and scripts/install-minio.sh provide; the LMCache S3-connector test needs root (it
# gives one child process its own /etc/hosts in a private mount namespace).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(bash "$root/scripts/engine-venv.sh")
cd "$root/client/python"
# Offline model loading, no LMCache telemetry, and one token-hash seed for every process (LMCache
# hashes token chunks with Python's hash; engines in different processes must agree).
export HF_HUB_OFFLINE=1 LMCACHE_TRACK_USAGE=false DO_NOT_TRACK=1 PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -p no:logging tests_engine "$@"
