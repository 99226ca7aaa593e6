#!/usr/bin/env bash
# The Python client's tests (client/python) against the real gateway and MinIO: creates a
# virtualenv once (.venv-python, or $OBJECTCACHE_PYTHON_VENV), installs the package from this
# checkout with its test extras, and runs pytest. Needs the Node build (dist/) and MinIO, which
# `npm test` and scripts/install-minio.sh provide. Before the tests: mypy --strict, ruff check
# and ruff format --check.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${OBJECTCACHE_PYTHON_VENV:-$root/.venv-python}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$root/client/python[test]"
# The package from this checkout, even when its version number did not change.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$root/client/python"
cd "$root/client/python"
# The package is typed (py.typed): its annotations must hold.
"$venv/bin/python" -m mypy --strict src/objectcache
# Lint and format as client/python/pyproject.toml [tool.ruff] says (fix: ruff check --fix . && ruff format .).
"$venv/bin/python" -m ruff check .
"$venv/bin/python" -m ruff format --check .
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
