"""Prompt data sets from the Hugging Face hub, through the optional `datasets` package (`rlcore data gsm8k`).

`datasets` is imported only here, only when a data set is fetched (``pip install 'rl-data[hub]'``).
Without a network (or with ``HF_HUB_OFFLINE=1``) a data set already in the `datasets` cache still loads;
anything else is one clear error that says where to get the files and how to pass them with ``--src``.
The hub is probed once with a short connection attempt first, so a machine without a network gets that
message in seconds, not after the library's retries.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from typing import Any, Iterator
from urllib.parse import urlparse

from rl_data.convert import DataConvertError

#: name -> (hub repository, its configuration, the page a user can download the files from)
HUB_SETS = {
    "gsm8k": ("openai/gsm8k", "main", "https://huggingface.co/datasets/openai/gsm8k (main/train-*.parquet, main/test-*.parquet)"),
}


def hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connection to the hub's host (``HF_ENDPOINT`` or huggingface.co) opens within ``timeout``."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)), timeout=timeout):
            return True
    except OSError:
        return False


#: where the hub libraries keep the offline switch they read from the environment when imported
_OFFLINE_FLAGS = (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"))


@contextlib.contextmanager
def _offline(on: bool) -> Iterator[None]:
    """``HF_HUB_OFFLINE=1`` for the block, also in hub libraries already imported (they read it once, at import)."""
    if not on:
        yield
        return
    old_env = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    saved = []
    for module, attr in _OFFLINE_FLAGS:
        mod = sys.modules.get(module)
        if mod is not None and hasattr(mod, attr):
            saved.append((mod, attr, getattr(mod, attr)))
            setattr(mod, attr, True)
    try:
        yield
    finally:
        for mod, attr, value in saved:
            setattr(mod, attr, value)
        if old_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old_env


def fetch_records(name: str, split: str) -> list[dict[str, Any]]:
    """The records of hub data set ``name`` (a key of :data:`HUB_SETS`), split ``split``, as plain dicts."""
    repo, config, page = HUB_SETS[name]
    local = f"download the {split} file from {page} and pass it with --src FILE (.jsonl or .parquet)"
    online = hub_reachable()
    with _offline(not online):  # before the import too: `datasets` reads the switch when it is imported
        try:
            import datasets
        except ImportError:
            raise DataConvertError(f"fetching {repo} from the Hugging Face hub needs the `datasets` package: pip install 'rl-data[hub]' (or datasets); or {local}") from None
        try:
            ds = datasets.load_dataset(repo, config, split=split)
        except ValueError as exc:
            if "split" in str(exc).lower():
                raise DataConvertError(f"{repo} has no split {split!r} ({exc}); use --split train or --split test") from None
            raise DataConvertError(f"could not load {repo} ({type(exc).__name__}: {exc}); {local}") from None
        except (ConnectionError, OSError) as exc:
            why = "the Hugging Face hub cannot be reached from this machine" if not online else f"loading it failed: {exc}"
            raise DataConvertError(f"{repo} is not in the local `datasets` cache and {why}; {local}") from None
    return [dict(r) for r in ds]
