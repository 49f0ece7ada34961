"""Test set-up for rl-rollout-sglang.

SGLang 0.5.23 on a CPU machine needs two import-only stand-ins
(``tests/cpu_shims``: ``sgl_kernel`` and ``torchvision``; see its README).
They are test support, never installed by the plugin: this file puts a
folder holding the stand-ins for whichever of the two packages is *not*
installed on ``sys.path`` and on ``PYTHONPATH`` (SGLang's scheduler and
detokenizer are spawned processes and import them too), so a machine with the
real packages uses those. Every call of a stand-in's functions is appended to
the file named by ``RL_SGLANG_STUB_CALL_LOG``; ``test_zz_stand_ins.py`` checks
it stayed empty.

Tests that need the engine skip, with the reason, where SGLang is not
importable; the card / resolver / conversion tests run everywhere (the
package is put on ``sys.path`` when it is not installed).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

for _key, _value in {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_key, _value)

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
SHIMS = Path(__file__).resolve().parent / "cpu_shims"
STAND_INS = ("sgl_kernel", "torchvision")


def _is_stand_in(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None and Path(spec.origin).resolve().is_relative_to(SHIMS)


def _install_stand_ins() -> Path | None:
    if importlib.util.find_spec("sglang") is None:
        return None
    if all(_is_stand_in(name) for name in STAND_INS):  # already on the path (e.g. tox's PYTHONPATH)
        folder = SHIMS
    else:
        missing = [name for name in STAND_INS if importlib.util.find_spec(name) is None]
        if not missing:
            return None
        folder = Path(tempfile.mkdtemp(prefix="rl_sglang_shims_"))
        (folder / "_rl_import_stub.py").symlink_to(SHIMS / "_rl_import_stub.py")
        for name in missing:
            (folder / name).symlink_to(SHIMS / name, target_is_directory=True)
        sys.path.append(str(folder))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(folder)) if p)
    log_dir = Path(tempfile.mkdtemp(prefix="rl_sglang_stand_in_calls_"))
    os.environ.setdefault("RL_SGLANG_STUB_CALL_LOG", str(log_dir / "calls.log"))
    os.environ["RL_SGLANG_STAND_IN_DIR"] = str(folder)
    return folder


STAND_IN_DIR = _install_stand_ins()

try:
    import rl_rollout_sglang  # noqa: F401
except ImportError:
    sys.path.insert(0, str(PLUGIN_ROOT))
