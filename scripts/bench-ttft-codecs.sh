#!/usr/bin/env bash
# TTFT against link rate for raw, lossless and int8 chunks (client/python/benchmarks/ttft_codecs.py):
# SmolLM2-135M on core 0, MinIO and the gateways on core 1, links emulated with the gateway's
# --cap; then table A8's workloads with the compute scaled to emulated links. Writes
# bench/results/ttft-codecs-latest.json, then its report (the table in docs/benchmarks.md and its SVG figure). Needs the
# Node build (dist/) and the engine virtualenv, which scripts/engine-venv.sh makes. Arguments go
# to the benchmark (--caps, --reps, --a8-links, ...).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(bash "$root/scripts/engine-venv.sh")
export HF_HUB_OFFLINE=1 LMCACHE_TRACK_USAGE=false DO_NOT_TRACK=1 PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
out="$root/bench/results/ttft-codecs-latest.json"
for arg in "$@"; do case "$arg" in --out=*) out="${arg#--out=}" ;; esac; done
"$venv/bin/python" "$root/client/python/benchmarks/ttft_codecs.py" --out="$out" "$@"
node "$root/dist/bench/ttft-codecs-report.js" "$out"
