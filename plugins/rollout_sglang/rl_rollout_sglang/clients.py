"""The two ways to reach SGLang: the in-process ``sglang.Engine`` (default) or a running server.

Both expose the same small surface the adapter uses: ``generate``,
``begin_weight_update`` / ``update_weights_from_tensor`` / ``end_weight_update``,
``flush_cache``, ``release_memory_occupation`` / ``resume_memory_occupation`` (with SGLang's
region ``tags``),
``context_length`` and ``shutdown``.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any

log = logging.getLogger(__name__)


class EngineStartError(RuntimeError):
    """SGLang did not start; the message holds SGLang's own error and the arguments it was given."""


class InProcessClient:
    """``sglang.Engine`` owned by this process (its scheduler runs in child processes)."""

    def __init__(self, engine_args: dict[str, Any]) -> None:
        import sglang

        start = time.perf_counter()
        try:
            self.engine = sglang.Engine(**engine_args)
        except Exception as exc:  # noqa: BLE001 - re-raised with the arguments, chained
            shown = ", ".join(f"{k}={v!r}" for k, v in engine_args.items())
            raise EngineStartError(
                f"the SGLang engine failed to start: {type(exc).__name__}: {exc}\n  sglang.Engine({shown})\n"
                "fix the argument it names (rollout.engine_kwargs passes any sglang.Engine argument), "
                "or run with rollout.engine_kwargs.log_level=info to see SGLang's start-up log"
            ) from exc
        log.info("SGLang engine ready in %.1f s", time.perf_counter() - start)

    @property
    def context_length(self) -> int:
        return int(self.engine.tokenizer_manager.model_config.context_len)

    def generate(self, input_ids: list[list[int]], sampling: list[dict[str, Any]], return_logprob: bool,
                 lora_path: list[str] | None = None) -> list[dict[str, Any]]:
        extra = {} if lora_path is None else {"lora_path": lora_path}
        return self.engine.generate(input_ids=input_ids, sampling_params=sampling, return_logprob=return_logprob, **extra)

    def load_lora_adapter_from_tensors(self, name: str, tensors: dict, config: dict):
        return self.engine.load_lora_adapter_from_tensors(name, tensors, config)

    def unload_lora_adapter(self, name: str):
        return self.engine.unload_lora_adapter(name)

    # 0.5.23 requires the session around update_weights_from_tensor; 0.5.17 (the newest SGLang for torch 2.11, the GPU
    # image's) has neither call: there the session is nothing
    def begin_weight_update(self):
        begin = getattr(self.engine, "begin_weight_update", None)
        return begin() if begin is not None else None

    def end_weight_update(self):
        end = getattr(self.engine, "end_weight_update", None)
        return end() if end is not None else None

    def update_weights_from_tensor(self, named_tensors, flush_cache: bool):
        return self.engine.update_weights_from_tensor(named_tensors=named_tensors, flush_cache=flush_cache)

    def flush_cache(self):
        return self.engine.flush_cache()

    def get_weights_by_name(self, name: str):
        return self.engine.get_weights_by_name(name, truncate_size=0)

    # tags: SGLang's memory regions ("kv_cache", "weights", "cuda_graph"); None: all of them (0.5.17 and 0.5.23 alike)
    def release_memory_occupation(self, tags: list[str] | None = None):
        return self.engine.release_memory_occupation(tags=tags)

    def resume_memory_occupation(self, tags: list[str] | None = None):
        return self.engine.resume_memory_occupation(tags=tags)

    def shutdown(self) -> None:
        self.engine.shutdown()


class ServerClient:
    """An SGLang server that is already running (``python -m sglang.launch_server``), over HTTP.

    Weight sync sends tensors the way SGLang's own HTTP API takes them: each
    tensor is shared through the operating system (``torch.multiprocessing``
    handles, base64-encoded), so the server must run on the same machine as
    this worker. Nothing is started or stopped here.
    """

    def __init__(self, url: str, timeout: float = 600.0, tp_size: int = 1) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.tp_size = tp_size
        self._no_session = False  # begin_weight_update answered 404 (a server without the session routes)
        try:
            info = self._get("/server_info")
        except EngineStartError:
            raise
        self.info = info[0] if isinstance(info, list) and info else info
        self.tp_size = int(self.info.get("tp_size", tp_size)) if isinstance(self.info, dict) else tp_size

    @property
    def context_length(self) -> int:
        model = self._get("/model_info")
        for source in (model, self.info):
            if isinstance(source, dict):
                for key in ("context_length", "context_len", "max_req_input_len"):
                    if source.get(key):
                        return int(source[key])
        raise RuntimeError(f"the SGLang server at {self.url} reports no context length; set rollout.engine_kwargs.context_length")

    def _request(self, path: str, payload: dict[str, Any] | None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"}, method="GET" if data is None else "POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:2000]
            raise RuntimeError(f"SGLang server {self.url}{path} answered HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise EngineStartError(
                f"cannot reach the SGLang server at {self.url} ({path}): {exc}; start it "
                "(python -m sglang.launch_server --model-path ...) or fix rollout.engine_kwargs.server_url"
            ) from exc
        text = body.decode(errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text

    def _get(self, path: str) -> Any:
        return self._request(path, None)

    def generate(self, input_ids: list[list[int]], sampling: list[dict[str, Any]], return_logprob: bool,
                 lora_path: list[str] | None = None) -> list[dict[str, Any]]:
        body = {"input_ids": input_ids, "sampling_params": sampling, "return_logprob": return_logprob}
        if lora_path is not None:
            body["lora_path"] = lora_path
        out = self._request("/generate", body)
        return out if isinstance(out, list) else [out]

    def load_lora_adapter_from_tensors(self, name: str, tensors: dict, config: dict):
        from sglang.srt.utils import MultiprocessingSerializer

        payload = base64.b64encode(MultiprocessingSerializer.serialize(dict(tensors))).decode()
        return self._request("/load_lora_adapter_from_tensors", {"lora_name": name, "config_dict": config,
                                                                 "serialized_named_tensors": [payload] * self.tp_size})

    def unload_lora_adapter(self, name: str):
        return self._request("/unload_lora_adapter", {"lora_name": name})

    def begin_weight_update(self):
        """The session 0.5.23 requires; a server without the route (0.5.17, the GPU image's) answers 404: no session."""
        try:
            result = self._request("/begin_weight_update", {})
        except RuntimeError as exc:
            if "answered HTTP 404" not in str(exc):
                raise
            self._no_session = True
            return None
        self._no_session = False
        return result

    def end_weight_update(self):
        if self._no_session:
            return None
        return self._request("/end_weight_update", {})

    def update_weights_from_tensor(self, named_tensors, flush_cache: bool):
        from sglang.srt.utils import MultiprocessingSerializer

        payload = base64.b64encode(MultiprocessingSerializer.serialize(list(named_tensors))).decode()
        return self._request(
            "/update_weights_from_tensor", {"serialized_named_tensors": [payload] * self.tp_size, "flush_cache": flush_cache}
        )

    def flush_cache(self):
        return self._request("/flush_cache", {})

    def get_weights_by_name(self, name: str):
        try:
            return self._request("/get_weights_by_name", {"name": name, "truncate_size": 0})
        except RuntimeError:  # an older server, or one without rl-rollout-sglang's hook: not verified
            return None

    def release_memory_occupation(self, tags: list[str] | None = None):
        return self._request("/release_memory_occupation", {} if tags is None else {"tags": list(tags)})

    def resume_memory_occupation(self, tags: list[str] | None = None):
        return self._request("/resume_memory_occupation", {} if tags is None else {"tags": list(tags)})

    @property
    def weights_backup(self) -> bool | None:
        """Whether the server keeps a host copy of released weights (its ``enable_weights_cpu_backup``; None: not said)."""
        value = self.info.get("enable_weights_cpu_backup") if isinstance(self.info, dict) else None
        return None if value is None else bool(value)

    def shutdown(self) -> None:
        """The server belongs to whoever started it: nothing to do."""
