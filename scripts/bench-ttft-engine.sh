#!/usr/bin/env bash
# Real-model TTFT benchmark (client/python/benchmarks/ttft_engine.py): SmolLM2-135M on one core,
# MinIO and the gateway on the other, every way of getting a stored prefix into the model,
# then its report (bench/results/ttft-engine-report.md and two SVG figures). Needs root (LMCache's
# S3 connector gets its own /etc/hosts in a private mount namespace) and the engine virtualenv,
# which scripts/engine-venv.sh makes. Arguments go to the benchmark (--prompts, --hits, --reps).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(bash "$root/scripts/engine-venv.sh")
export HF_HUB_OFFLINE=1 LMCACHE_TRACK_USAGE=false DO_NOT_TRACK=1 PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
out="$root/bench/results/ttft-engine-latest.json"
"$venv/bin/python" "$root/client/python/benchmarks/ttft_engine.py" --out "$out" "$@"
node "$root/dist/bench/ttft-engine-report.js" "$out"
