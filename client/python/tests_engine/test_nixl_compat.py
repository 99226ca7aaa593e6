"""objectcache.engines.nixl_compat: vLLM imports ``nixl._api``; ``nixl-cu12`` installs ``nixl_cu12``.
The engine venv is set up as docs/engines.md says (``python -m objectcache.engines.nixl_compat
install``, scripts/engine-venv.sh), so a fresh interpreter of it, with nothing done by hand,
imports ``nixl._api`` as the very ``nixl_cu12._api``, and vLLM finds NIXL. A real ``nixl`` always
wins; a build that is not installed is a plain ModuleNotFoundError; a process that never imports
``nixl`` imports no NIXL build."""
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from objectcache.engines import nixl_compat


def run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env})


def test_the_engine_venv_has_the_pth_file_the_docs_install() -> None:
    pth = Path(sysconfig.get_paths()["purelib"]) / nixl_compat.PTH_NAME
    assert pth.read_text() == nixl_compat.pth_line()


def test_a_fresh_interpreter_imports_nixl_as_the_installed_cuda_12_build() -> None:
    done = run(
        "import sys; assert 'nixl_cu12' not in sys.modules\n"
        "import nixl._api, nixl._bindings, nixl_cu12._api, nixl_cu12._bindings, nixl, nixl_cu12\n"
        "assert nixl is nixl_cu12 and nixl._api is nixl_cu12._api and nixl._bindings is nixl_cu12._bindings\n"
        "from nixl._bindings import nixlBackendError\n"
        "assert nixlBackendError is nixl_cu12._bindings.nixlBackendError\n"
        "print('ok')"
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_vllm_finds_nixl_with_no_code_of_ours() -> None:
    done = run("from vllm.distributed import nixl_utils; assert nixl_utils.NixlWrapper is not None and nixl_utils.NixlWrapper.__module__ == 'nixl_cu12._api'; print('ok')")
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_a_process_that_never_imports_nixl_loads_no_nixl_build() -> None:
    done = run("import sys, json; print(json.dumps([sorted(m for m in sys.modules if 'nixl' in m), [type(f).__name__ for f in sys.meta_path][0]]))")
    assert done.returncode == 0 and done.stdout.strip() == '[[], "NixlAliasFinder"]', (done.stdout, done.stderr[-2000:])


def test_a_real_nixl_wins(tmp_path: Path) -> None:
    (tmp_path / "nixl").mkdir()
    (tmp_path / "nixl" / "__init__.py").write_text("REAL = True\n")
    (tmp_path / "nixl" / "_api.py").write_text("API = 'real'\n")
    done = run("import nixl, nixl._api; assert nixl.REAL and nixl._api.API == 'real'; print('ok')", PYTHONPATH=str(tmp_path))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_a_build_that_is_not_installed_is_a_plain_import_error() -> None:
    done = run("import nixl._api", OBJECTCACHE_NIXL_MODULE="nixl_cu99")
    assert done.returncode != 0 and "ModuleNotFoundError: No module named 'nixl'" in done.stderr


def test_the_pth_line_does_nothing_once_the_package_is_gone(tmp_path: Path) -> None:
    line = nixl_compat.pth_line(str(tmp_path / "gone" / "nixl_compat.py"))
    (tmp_path / "x.pth").write_text(line)
    done = run(f"import site, sys; n = len(sys.meta_path); site.addsitedir({str(tmp_path)!r}); assert len(sys.meta_path) == n; print('ok')")
    assert done.returncode == 0 and done.stdout.strip() == "ok" and "Error processing" not in done.stderr, done.stderr[-2000:]


def test_the_check_command_names_the_module() -> None:
    done = subprocess.run([sys.executable, "-m", "objectcache.engines.nixl_compat", "check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("nixl._api is nixl_cu12._api"), done.stderr[-2000:]
