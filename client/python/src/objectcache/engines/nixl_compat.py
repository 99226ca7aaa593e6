"""NIXL under the module name vLLM imports.

vLLM's object tier (and its NIXL connector) import ``nixl._api`` and ``nixl._bindings``. NIXL's
wheels install their module under another name: ``nixl-cu12`` installs ``nixl_cu12``,
``nixl-cu13`` installs ``nixl_cu13``; only the ``nixl`` meta package provides ``nixl``, and it
picks the build that matches torch's CUDA (the CUDA-13 one for torch from PyPI, whose OBJ plugin
needs ``libcuobjclient.so.1``, which no package ships). With ``nixl-cu12`` alone vLLM logs
"NIXL is not available" and its object tier cannot start.

This module lets ``import nixl`` (and ``nixl.<anything>``) resolve to the installed build, the
same module objects (so ``nixl._bindings.nixlBackendError`` *is* ``nixl_cu12._bindings.nixlBackendError``),
and only when no real ``nixl`` is importable: an installed ``nixl`` always wins. Nothing is
imported until something imports ``nixl``.

Set-up, once per virtualenv (no change to vLLM or to its command line)::

    python -m objectcache.engines.nixl_compat install     # writes objectcache-nixl-compat.pth
    python -m objectcache.engines.nixl_compat check       # says which module `nixl` is
    python -m objectcache.engines.nixl_compat uninstall   # removes the .pth file

The ``.pth`` file in the virtualenv's site-packages makes every Python process of that
environment (vLLM's engine core and workers included) call :func:`install` at start-up. It loads
this file by its path, not the ``objectcache`` package, so a process that never imports ``nixl``
pays for the definition of one small class and nothing else. ``OBJECTCACHE_NIXL_MODULE`` names the
build to use where several are installed (default: ``nixl_cu12``, then ``nixl_cu13``).

This file uses the standard library only, and imports nothing from ``objectcache``.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys

ALIAS = "nixl"
CANDIDATES = ("nixl_cu12", "nixl_cu13")
ENV = "OBJECTCACHE_NIXL_MODULE"
PTH_NAME = "objectcache-nixl-compat.pth"


def _real_nixl_exists(skip: object) -> bool:
    """Whether a finder other than ours (and copies of ours) can find a top-level ``nixl``."""
    for finder in sys.meta_path:
        if finder is skip or getattr(finder, "objectcache_nixl_alias", False):
            continue
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            if find_spec(ALIAS, None) is not None:
                return True
        except Exception:  # a broken finder is no reason to break imports
            continue
    return False


def alias_target() -> str | None:
    """The module ``nixl`` resolves to when no real ``nixl`` is installed: ``$OBJECTCACHE_NIXL_MODULE``,
    else the first of ``nixl_cu12``, ``nixl_cu13`` that is installed (found, not imported)."""
    named = os.environ.get(ENV, "").strip()
    for name in [named] if named else CANDIDATES:
        if importlib.machinery.PathFinder.find_spec(name) is not None:
            return name
    return None


class _AliasLoader:
    """Loads ``nixl[.sub]`` as the already-named module ``target[.sub]``: the import system returns
    what exec_module leaves in sys.modules, which is the real module, not a copy."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: object) -> None:
        return None  # a placeholder module, replaced in exec_module

    def exec_module(self, module: object) -> None:
        real = importlib.import_module(self.target)
        sys.modules[getattr(module, "__name__")] = real


class NixlAliasFinder:
    """A ``sys.meta_path`` finder for ``nixl`` and ``nixl.*`` (see the module's docstring)."""

    objectcache_nixl_alias = True

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == ALIAS:
            if _real_nixl_exists(self):
                return None
            real = alias_target()
            if real is None:
                return None
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real), is_package=True)  # type: ignore[arg-type]
        if fullname.startswith(ALIAS + "."):
            parent = sys.modules.get(ALIAS)
            real_name = getattr(parent, "__name__", ALIAS)
            if parent is None or real_name == ALIAS:
                return None  # the real nixl, or none: not ours to resolve
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real_name + fullname[len(ALIAS):]))  # type: ignore[arg-type]
        return None


def install() -> bool:
    """Puts the finder first in ``sys.meta_path`` (first, so that ``nixl._api`` is not found a
    second time, under another name, in ``nixl_cu12``'s folder). True if it was not there yet."""
    if any(getattr(finder, "objectcache_nixl_alias", False) for finder in sys.meta_path):
        return False
    sys.meta_path.insert(0, NixlAliasFinder())
    return True


def pth_line(module_file: str | None = None) -> str:
    """The ``.pth`` line that runs :func:`install` in every process of the environment (an
    ``import`` line of a .pth file is executed by ``site`` at start-up). It loads this file by its
    path and does nothing once the file is gone (``objectcache`` uninstalled)."""
    path = os.path.abspath(module_file or __file__)
    return (
        "import os, importlib.util as u; p = %r; s = u.spec_from_file_location('_objectcache_nixl_compat', p) if os.path.exists(p) else None; "
        "m = u.module_from_spec(s) if s else None; s and s.loader.exec_module(m); m and m.install()\n"
    ) % path


def site_packages() -> str:
    import sysconfig

    return sysconfig.get_paths()["purelib"]


def write_pth(directory: str | None = None) -> str:
    """Writes ``objectcache-nixl-compat.pth`` into ``directory`` (default: this environment's
    site-packages). Returns its path."""
    target = os.path.join(directory or site_packages(), PTH_NAME)
    with open(target, "w") as out:
        out.write(pth_line())
    return target


def remove_pth(directory: str | None = None) -> bool:
    target = os.path.join(directory or site_packages(), PTH_NAME)
    if os.path.exists(target):
        os.remove(target)
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "check"
    if command == "install":
        print(f"wrote {write_pth()}")
        return 0
    if command == "uninstall":
        print("removed" if remove_pth() else "nothing to remove")
        return 0
    if command == "check":
        install()
        try:
            api = importlib.import_module(ALIAS + "._api")
        except ImportError as error:
            print(f"import nixl._api fails: {error} (installed: {', '.join(n for n in CANDIDATES if importlib.machinery.PathFinder.find_spec(n)) or 'none of ' + ', '.join(CANDIDATES)})")
            return 1
        print(f"nixl._api is {api.__name__} ({api.__file__})")
        return 0
    print("usage: python -m objectcache.engines.nixl_compat [install|uninstall|check]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
