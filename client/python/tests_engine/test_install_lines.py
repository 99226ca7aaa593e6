"""docs/engines.md's install lines and the engine tests' own environment (scripts/engine-venv.sh,
client/python/engine/requirements*.txt) name the same engine versions, and the environment the
tests run in has them: the lines themselves are tried, each in a fresh virtualenv, by
scripts/check-engine-installs.sh (not run here: it downloads several GB per line)."""
import re
from importlib.metadata import version
from pathlib import Path
from typing import Dict

from engine_docs import PAGE

ENGINE = Path(__file__).resolve().parents[1] / "engine"
PATHS = ("lmcache", "lmcache-mp", "vllm-obj", "sglang")


def install_lines() -> Dict[str, str]:
    lines = {}
    for line in PAGE.read_text().splitlines():
        found = re.search(r"#\s*scripts/check-engine-installs\.sh (\S+)$", line)
        if found and not line.startswith("#"):
            assert found.group(1) not in lines, f"two install lines for {found.group(1)}"
            lines[found.group(1)] = line
    return lines


def pins(*names: str) -> Dict[str, str]:
    out = {}
    for name in names:
        for line in (ENGINE / name).read_text().splitlines():
            found = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
            if found:
                out[found.group(1).lower()] = found.group(2)
    return out


def test_one_install_line_per_path() -> None:
    assert sorted(install_lines()) == sorted(PATHS)


def test_the_lines_pin_the_engine_versions_the_tests_run() -> None:
    lines, pinned = install_lines(), pins("requirements.txt", "requirements-nodeps.txt")
    for path, package in [("lmcache", "lmcache"), ("lmcache-mp", "lmcache"), ("lmcache", "vllm"), ("vllm-obj", "vllm"), ("vllm-obj", "nixl-cu12"), ("sglang", "sglang")]:
        assert f"{package}=={pinned[package]}" in lines[path], (path, package, pinned[package])
        assert version(package) == pinned[package]
    # LMCache's server needs opentelemetry-api 1.40 or older (its ImportError past it): the lines
    # that install LMCache say so, and the tests' environment holds such a version.
    for path in ("lmcache", "lmcache-mp"):
        assert '"opentelemetry-api<=1.40.0"' in lines[path]
    assert pinned["opentelemetry-api"] == "1.40.0" == version("opentelemetry-api")
    # vLLM's side needs `nixl` importable: the line installs the alias, as engine-venv.sh does.
    assert lines["vllm-obj"].split("#")[0].rstrip().endswith("&& python -m objectcache.engines.nixl_compat install")
    assert "objectcache.engines.nixl_compat install" in (ENGINE.parents[2] / "scripts" / "engine-venv.sh").read_text()
