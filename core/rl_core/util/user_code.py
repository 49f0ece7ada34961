"""Importing the user's own code named in their own config (a reward function, a dataset class), once per process.
Only code the user pointed at runs; nothing read from a data file or a checkpoint names code. Standard library only:
reward worker processes import this module.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from typing import Any, Callable


def load_user_object(path: str, name: str, *, path_key: str, name_key: str, error: type[Exception], prefix: str,
                     kind: str = "function", check: Callable[[Any], bool] = callable) -> Any:
    """``name`` from the Python file at ``path``, else ``error(f"{key}: ...")``; ``prefix`` keeps modules of different
    purposes apart in ``sys.modules``, ``check`` says whether the object is the ``kind`` asked for."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        where = "is a directory" if os.path.isdir(full) else "does not exist"
        raise error(f"{path_key}: {path!r} {where} (resolved to {full}, working directory {os.getcwd()}); "
                    f"give the path of a .py file that defines {name!r}")
    module_name = f"{prefix}{hashlib.sha1(full.encode()).hexdigest()[:12]}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, full)
        if spec is None or spec.loader is None:
            raise error(f"{path_key}: {path!r} cannot be imported as Python (use a .py file)")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:
            del sys.modules[module_name]
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise error(f"{path_key}: importing {path!r} raised {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, name):
        defined = sorted(n for n, v in vars(module).items()
                         if check(v) and not n.startswith("_") and getattr(v, "__module__", None) == module_name)
        raise error(f"{name_key}: {path!r} defines no {name!r}; {'classes' if kind == 'class' else kind + 's'} it defines: {', '.join(defined) or 'none'}")
    obj = getattr(module, name)
    if not check(obj):
        raise error(f"{name_key}: {name!r} in {path!r} is a {type(obj).__name__}, not a {kind}")
    return obj
