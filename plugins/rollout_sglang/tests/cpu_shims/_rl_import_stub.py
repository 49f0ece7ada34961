"""Import-only stand-ins for packages SGLang 0.5.23 imports but a CPU run never uses.

Test support for rl-rollout-sglang, never installed by the plugin (see
``tests/cpu_shims/README.md``). A stand-in package is importable, and so is
every submodule and attribute below it (``from sgl_kernel.flash_attn import
flash_attn_varlen_func`` works), but every *call* of anything in it raises
:class:`StandInCalled` and, when ``RL_SGLANG_STUB_CALL_LOG`` names a file,
appends one line to that file first. Engine subprocesses inherit the
variable, so a test can assert that nothing of a stand-in ran anywhere.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

CALL_LOG_ENV = "RL_SGLANG_STUB_CALL_LOG"


class StandInCalled(RuntimeError):
    """Something called a function of an import-only stand-in."""


def _record(qualname: str) -> None:
    path = os.environ.get(CALL_LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {qualname}\n")


class _Attr:
    """Any attribute of a stand-in: attribute access gives more of them, calling one raises."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __getattr__(self, name: str) -> "_Attr":
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Attr(f"{self._qualname}.{name}")

    def __call__(self, *args, **kwargs):
        _record(self._qualname)
        raise StandInCalled(
            f"{self._qualname} was called, but it belongs to an import-only stand-in "
            "(plugins/rollout_sglang/tests/cpu_shims): the real package is not installed on this CPU machine"
        )

    def __repr__(self) -> str:
        return f"<stand-in {self._qualname}>"


def _module_getattr(modname: str):
    def __getattr__(name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Attr(f"{modname}.{name}")

    return __getattr__


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # every stand-in module is a package: submodules import too
        module.__getattr__ = _module_getattr(module.__name__)  # type: ignore[attr-defined]
        module.RL_IMPORT_STAND_IN = True


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


def make_stand_in(package_globals: dict) -> None:
    """Turn the calling package's ``__init__`` into a stand-in for its whole tree."""
    name = package_globals["__name__"]
    package_globals["__getattr__"] = _module_getattr(name)
    package_globals["RL_IMPORT_STAND_IN"] = True
    # transformers finds the package (``importlib.util.find_spec``) and parses its version when it
    # has no distribution metadata: the oldest version there is turns its optional paths off.
    package_globals["__version__"] = "0.0.0+stand.in"
    if not any(isinstance(f, _Finder) and f.root == name for f in sys.meta_path):
        sys.meta_path.append(_Finder(name))
