#!/usr/bin/env bash
# Tries docs/engines.md's install lines, each in a FRESH virtualenv, exactly as written, then a
# small smoke check of what that line is for (client/python/engine/check_install.py):
#
#   bash scripts/check-engine-installs.sh [PATH ...]     PATH: lmcache lmcache-mp vllm-obj sglang
#                                                        (default: all four, one after the other)
#
# A line is found in docs/engines.md by its closing comment, `# scripts/check-engine-installs.sh PATH`.
# It runs from the repository's root (the lines name ./client/python) with the fresh venv's bin/
# first on PATH. Downloads several GB per path (torch with its CUDA libraries, vLLM's and SGLang's
# kernels) once: first `pip download` resolves the arguments of the line's `pip install` against
# the index, as that install would, and keeps the files in a wheelhouse,
# ${OBJECTCACHE_WHEELHOUSE:-~/.cache/objectcache/wheels} (with the build requirements of
# client/python/pyproject.toml); then the line runs against that wheelhouse alone (PIP_NO_INDEX,
# PIP_FIND_LINKS), so it installs exactly what the index gave. A rerun downloads only what the index
# has that is new. pip's HTTP cache (${OBJECTCACHE_PIP_CACHE:-~/.cache/objectcache/pip}) is set as
# well, but pip does not keep the answers the index marks uncacheable. Each venv is removed after
# its check (OBJECTCACHE_KEEP_VENVS=1 keeps them).
# Not part of `npm test`; CI may run it where it can spend the time (docs/engines.md says how long).
# Prints one line per path, `PATH ok|FAILED download N s, install N s, check N s, venv N GB`; exits non-zero
# when any path failed. Logs, and each venv's `pip freeze`, in
# ${OBJECTCACHE_CHECK_LOGS:-$TMPDIR/objectcache-engine-installs}.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
export PIP_CACHE_DIR=${OBJECTCACHE_PIP_CACHE:-$HOME/.cache/objectcache/pip}
export PIP_DISABLE_PIP_VERSION_CHECK=1
wheels=${OBJECTCACHE_WHEELHOUSE:-$HOME/.cache/objectcache/wheels}
build_requires=$("$python" -c 'import sys, tomllib; print(" ".join(repr(r) for r in tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$root/client/python/pyproject.toml")
logs=${OBJECTCACHE_CHECK_LOGS:-${TMPDIR:-/tmp}/objectcache-engine-installs}
mkdir -p "$logs" "$PIP_CACHE_DIR" "$wheels"
all=(lmcache lmcache-mp vllm-obj sglang)
[ $# -gt 0 ] && paths=("$@") || paths=("${all[@]}")
failed=0
for path in "${paths[@]}"; do
  case " ${all[*]} " in *" $path "*) ;; *) echo "unknown path $path (one of: ${all[*]})" >&2; exit 2 ;; esac
  lines=$(grep -E "^[^#].*# scripts/check-engine-installs\.sh $path\$" "$root/docs/engines.md" || true)
  if [ "$(printf '%s\n' "$lines" | grep -c .)" != 1 ]; then
    echo "$path FAILED: docs/engines.md has $(printf '%s\n' "$lines" | grep -c .) lines ending in '# scripts/check-engine-installs.sh $path', not one" >&2
    failed=1; continue
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/objectcache-install-$path.XXXXXX")
  log="$logs/$path.log"
  : > "$log"
  echo "== $path: $lines" | tee -a "$log" >&2
  "$python" -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install -q --upgrade pip >> "$log" 2>&1 || true
  # The wheelhouse: what the line's first command, `pip install ARGS`, would download.
  install=${lines%%#*}; install=${install%%&&*}; install=${install%%;*}
  started=$(date +%s)
  case "$install" in
    "pip install "*) ( cd "$root" && export VIRTUAL_ENV="$work/venv" PATH="$work/venv/bin:$PATH" \
                       && bash -e -c "pip download -d '$wheels' ${install#pip install } $build_requires" && rm -f "$wheels"/objectcache-* ) >> "$log" 2>&1 ;;
    *) echo "$path: the line does not start with 'pip install': no wheelhouse" >> "$log" ;;
  esac
  downloaded=$(( $(date +%s) - started ))
  started=$(date +%s)
  ( cd "$root" && export VIRTUAL_ENV="$work/venv" PATH="$work/venv/bin:$PATH" PIP_NO_INDEX=1 PIP_FIND_LINKS="$wheels" \
    && bash -e -c "$lines" ) >> "$log" 2>&1
  status=$?
  installed=$(( $(date +%s) - started ))
  checked=0
  if [ $status -eq 0 ]; then
    started=$(date +%s)
    ( cd "$root" && export VIRTUAL_ENV="$work/venv" PATH="$work/venv/bin:$PATH" HF_HUB_OFFLINE=1 LMCACHE_TRACK_USAGE=false DO_NOT_TRACK=1 \
      && python client/python/engine/check_install.py "$path" ) >> "$log" 2>&1
    status=$?
    checked=$(( $(date +%s) - started ))
  fi
  "$work/venv/bin/python" -m pip freeze --all > "$logs/$path.freeze.txt" 2>/dev/null || true
  size=$(du -sm "$work/venv" 2>/dev/null | cut -f1)
  if [ $status -eq 0 ]; then verdict=ok; else verdict=FAILED; failed=1; fi
  summary="$path $verdict download ${downloaded} s, install ${installed} s, check ${checked} s, venv $(awk "BEGIN{printf \"%.1f\", ${size:-0}/1024}") GB (log: $log)"
  echo "$summary" | tee -a "$log"
  [ $status -eq 0 ] || tail -n 30 "$log" >&2
  [ -n "${OBJECTCACHE_KEEP_VENVS:-}" ] && echo "kept $work/venv" >&2 || rm -rf "$work"
done
exit $failed
