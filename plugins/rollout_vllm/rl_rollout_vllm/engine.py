"""The ``vllm`` rollout engine: :class:`VLLMRollout` over ``vllm.LLM``.

One engine per worker process, created by :func:`build` (the card's
factory). The engine lives **in the worker's own process**
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), which is what lets weight sync hand
tensors over by reference, with no serialisation and no disk.

Generation
    Prompts arrive left-padded; the padding is stripped and token ids go to
    vLLM as ``TokensPrompt`` (no re-tokenisation). ``SamplingParams`` maps as
    n -> n, temperature, top_p, top_k (``<= 0`` -> off), max_new_tokens ->
    max_tokens, stop, seed; ``greedy`` (or temperature 0) -> temperature 0.
    A seed gives prompt ``i`` the seed ``seed + i * n`` (vLLM adds the
    sample's index), so no two samples of a batch share a random stream.

Log-probs
    The engine is built with ``logprobs_mode="processed_logprobs"`` and asks
    ``logprobs=0``: vLLM then reports, for each sampled token, the log-prob
    after temperature scaling, i.e. ``log_softmax(logits / temperature)``,
    the quantity a trainer's forward pass computes (and the ``hf`` backend
    reports). vLLM's default ``raw_logprobs`` ignores the temperature. Two
    departures: with top-k / top-p filtering on, vLLM renormalises over the
    kept tokens (the distribution it really sampled from), so the values
    are >= the trainer's (a warning says so once); greedy decoding reports
    ``log_softmax(logits)`` (temperature 1), as the ``hf`` backend does.

Weight sync (:meth:`VLLMRollout.load_weights`)
    HF-named tensors go straight into ``reload_weights`` of the model
    runner (``llm.collective_rpc``), in buckets of at most
    ``rollout.engine_kwargs.weight_sync_bucket_mb`` MiB (default 256) that
    never split a transformer layer (see :mod:`rl_rollout_vllm.weights`).
    Nothing is written to disk. Peak extra memory during a sync: the bucket
    being sent (references to the caller's tensors, so only what the caller
    materialised for it: <= bucket size + one layer) plus one layer that
    vLLM materialises while it processes it. ``weight_sync_bucket_mb=0``
    sends everything in one call over the caller's iterator, streamed (peak:
    about one layer). The prefix cache is reset after every sync.

Memory and colocation
    GPU: ``gpu_memory_utilization`` is passed through and, with
    ``rollout.enable_sleep``, the engine is built with sleep mode;
    :meth:`~VLLMRollout.sleep` offloads the weights to host memory and drops
    the KV cache (``rollout.engine_kwargs.sleep_level``, default 1: level 2
    would also drop the weights, which is only safe when every generation
    follows a sync). CPU: the KV cache has ``VLLM_CPU_KVCACHE_SPACE`` GiB
    (default 1); sleep / wake-up do nothing (logged once).

Tensor parallelism
    With ``torch.distributed`` already initialised by rl-core (several ranks)
    the engine uses vLLM's ``external_launcher`` executor: each rank is one
    vLLM worker, consecutive ranks form a TP group (as rl-core hands the same
    prompts to the ranks of a group), and every rank of a group must sample
    with the same seed, which the group's first rank decides.

Other ``rollout.engine_kwargs`` are passed to ``vllm.LLM`` unchanged
(``max_model_len``, ``max_num_seqs``, ``enable_prefix_caching``,
``enforce_eager``, ``logprobs_mode``, ...).
"""

from __future__ import annotations

import gc
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Iterable

import torch

from rl_core.backends import SamplingParams, WorkerContext
from rl_core.batch import Batch
from rl_rollout_vllm.convert import Sample, build_rollout_batch, check_prompt_lengths, unpadded_prompts
from rl_rollout_vllm.weights import buckets

log = logging.getLogger(__name__)

#: ``rollout.engine_kwargs`` keys this adapter reads itself (not passed to ``vllm.LLM``).
OWN_KWARGS = frozenset({"weight_sync_bucket_mb", "sleep_level"})
DEFAULT_BUCKET_MB = 256

_RELOAD_LOGGERS = ("vllm.model_executor.model_loader.reload.layerwise", "vllm.model_executor.model_loader.reload.inplace")


def configure_environment(device: str) -> None:
    """Environment vLLM reads at engine creation (only where the user set nothing)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def _checkpoint_names(path: str) -> set[str] | None:
    """Tensor names in a local model folder's safetensors files (headers only)."""
    folder = Path(os.path.expanduser(path))
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    from safetensors import safe_open

    names: set[str] = set()
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            names.update(fh.keys())
    return names


class VLLMRollout:
    """Follows :class:`rl_core.backends.RolloutEngine` (see the module docstring)."""

    def __init__(self, config, context: WorkerContext) -> None:
        self.config = config
        self.context = context
        self.device_type = torch.device(context.device).type
        configure_environment(self.device_type)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") not in ("0", "false", "False"):
            log.warning(
                "VLLM_ENABLE_V1_MULTIPROCESSING=%s: the engine runs in a separate process, so every weight sync "
                "serialises the tensors; rl-rollout-vllm is tested with the in-process engine (0)",
                os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING"),
            )
        r = config.rollout
        extra = dict(r.engine_kwargs or {})
        self.bucket_bytes = int(float(extra.pop("weight_sync_bucket_mb", DEFAULT_BUCKET_MB)) * 2**20)
        self.sleep_level = int(extra.pop("sleep_level", 1))
        self.tp = int(r.tensor_model_parallel_size)
        self.sleep_enabled = bool(r.enable_sleep) and self.device_type == "cuda"
        self.generation_batch_size = r.generation_batch_size
        self._asleep = False
        self._noted: set[str] = set()

        import torch.distributed as dist

        self._owns_dist = not (dist.is_available() and dist.is_initialized())
        kwargs = self._llm_kwargs(extra)
        self.llm = self._create_llm(kwargs)
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.pad_id = self._pad_id()
        self._expected_names = None if config.model.random_init else _checkpoint_names(config.model.path)

    # ----------------------------------------------------------------- set-up
    def _llm_kwargs(self, extra: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        m = cfg.model
        kwargs: dict[str, Any] = dict(
            model=m.path,
            tokenizer=m.tokenizer_path or m.path,
            dtype=m.dtype,
            trust_remote_code=m.trust_remote_code,
            seed=self.context.seed,
            tensor_parallel_size=self.tp,
            max_model_len=cfg.data.max_prompt_length + cfg.data.max_response_length,
            logprobs_mode="processed_logprobs",
            disable_log_stats=True,
        )
        if m.override_config:
            kwargs["hf_overrides"] = dict(m.override_config)
        if m.random_init:
            kwargs["load_format"] = "dummy"  # random weights; the first sync brings the actor's
        if self.device_type == "cpu":
            kwargs["enforce_eager"] = True
        else:
            kwargs["gpu_memory_utilization"] = cfg.rollout.gpu_memory_utilization
            kwargs["enable_sleep_mode"] = self.sleep_enabled
        if not self._owns_dist:
            # rl-core already joined the ranks: each rank is one vLLM worker of its TP group.
            kwargs["distributed_executor_backend"] = "external_launcher"
            os.environ.setdefault("RANK", str(self.context.rank))
            os.environ.setdefault("LOCAL_RANK", str(self.context.local_rank))
            os.environ.setdefault("WORLD_SIZE", str(self.context.world_size))
        kwargs.update(extra)
        return kwargs

    def _create_llm(self, kwargs: dict[str, Any]):
        from vllm import LLM

        threads = torch.get_num_threads()
        set_threads = torch.set_num_threads
        rng = _rng_state()
        start = time.perf_counter()
        try:
            llm = LLM(**kwargs)
        finally:
            # In-process, vLLM seeds the global RNGs with its engine seed (the same on
            # every rank); the worker's own RNG streams must go on as they were.
            _set_rng_state(rng)
            # vLLM's CPU worker drops torch to 1 thread "for serving" and then disables
            # torch.set_num_threads for the whole process; in-process and colocated with
            # a trainer, both must be undone (eager mode has no compiled graph to guard).
            if self.device_type == "cpu" and kwargs.get("enforce_eager", False):
                torch.set_num_threads = set_threads
                torch.set_num_threads(threads)
        log.info("vLLM engine ready in %.1f s (%s, tp=%d, max_model_len=%s)", time.perf_counter() - start, self.context.device, self.tp, kwargs.get("max_model_len"))
        return llm

    def _pad_id(self) -> int:
        tok = self.llm.get_tokenizer()
        for value in (getattr(tok, "pad_token_id", None), getattr(tok, "eos_token_id", None)):
            if value is not None:
                return int(value)
        return 0

    def _note_once(self, key: str, message: str, *args: Any, level: int = logging.INFO) -> None:
        if key not in self._noted:
            self._noted.add(key)
            log.log(level, message, *args)

    # ------------------------------------------------------------- generation
    def generate(self, batch: Batch, params: SamplingParams) -> Batch:
        if "input_ids" not in batch.tensors.keys() or "attention_mask" not in batch.tensors.keys():
            raise ValueError(f"generate needs 'input_ids' and 'attention_mask' in the batch; it has {sorted(batch.tensors.keys())}")
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError(f"SamplingParams needs n >= 1 and max_new_tokens >= 1, got n={params.n}, max_new_tokens={params.max_new_tokens}")
        self._wake_if_asleep()
        prompts = unpadded_prompts(batch.tensors["input_ids"], batch.tensors["attention_mask"])
        check_prompt_lengths(prompts, params.max_new_tokens, self.max_model_len)
        greedy = params.greedy or params.temperature <= 0
        if params.logprobs and not greedy and (params.top_p < 1.0 or 0 < params.top_k):
            self._note_once(
                "filtered-logprobs",
                "rollout log-probs with top_k=%s / top_p=%s are vLLM's renormalised (filtered) distribution, "
                "not log_softmax(logits / temperature) over the whole vocabulary as the trainer computes",
                params.top_k, params.top_p, level=logging.WARNING,
            )
        seed = self._agreed_seed(params.seed)
        from vllm.inputs import TokensPrompt

        per_call = len(prompts) if not self.generation_batch_size else max(1, self.generation_batch_size // params.n)
        samples: list[Sample] = []
        for start in range(0, len(prompts), per_call):
            chunk = prompts[start : start + per_call]
            sampling = [self._sampling_params(params, greedy, None if seed is None else seed + (start + i) * params.n) for i in range(len(chunk))]
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in chunk], sampling, use_tqdm=False)
            for out in outputs:
                for comp in sorted(out.outputs, key=lambda c: c.index):
                    samples.append(Sample(comp.token_ids, _sampled_log_probs(comp) if params.logprobs else None, comp.finish_reason))
        return build_rollout_batch(batch, samples, params, self.pad_id)

    def _sampling_params(self, params: SamplingParams, greedy: bool, seed: int | None):
        from vllm import SamplingParams as VSamplingParams

        return VSamplingParams(
            n=params.n,
            temperature=0.0 if greedy else float(params.temperature),
            top_p=1.0 if greedy else float(params.top_p),
            top_k=0 if greedy or params.top_k <= 0 else int(params.top_k),
            max_tokens=int(params.max_new_tokens),
            seed=seed,
            stop=list(params.stop) or None,
            logprobs=0 if params.logprobs else None,
            detokenize=bool(params.stop),
        )

    def _agreed_seed(self, seed: int | None) -> int | None:
        """The seed every rank of this TP group uses (the group's first rank decides)."""
        if self.tp <= 1:
            return seed
        from vllm.distributed.parallel_state import get_tp_group

        group = get_tp_group()
        value = torch.tensor([random.randrange(2**31) if seed is None else int(seed)], dtype=torch.long)
        torch.distributed.broadcast(value, src=group.ranks[0], group=group.cpu_group)
        return int(value.item())

    # ------------------------------------------------------------ weight sync
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Reload HF-named tensors in place (see the module docstring), then reset the prefix cache."""
        self._wake_if_asleep()
        start = time.perf_counter()
        sent: set[str] = set()
        nbytes = 0

        def record(items):
            nonlocal nbytes
            for name, tensor in items:
                sent.add(name)
                nbytes += tensor.numel() * tensor.element_size()
                yield name, tensor

        calls = 0
        if self.bucket_bytes <= 0:
            self._reload(record(weights))
            calls = 1
        else:
            quiet = _quiet_loggers(_RELOAD_LOGGERS)  # every bucket leaves the other layers "not loaded"
            try:
                for bucket in buckets(record(weights), self.bucket_bytes):
                    self._reload(iter(bucket))
                    calls += 1
                    del bucket
            finally:
                quiet.restore()
        self.llm.reset_prefix_cache()
        if self._expected_names is not None:
            missing = sorted(self._expected_names - sent)
            if missing:
                shown = ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else "")
                raise ValueError(f"load_weights: {len(missing)} of the model's checkpoint tensors were not provided: {shown}")
        if self.device_type == "cuda":
            torch.cuda.synchronize()
        log.info("weight sync: %d tensors, %.1f MiB in %d call(s), %.2f s", len(sent), nbytes / 2**20, calls, time.perf_counter() - start)

    def _reload(self, iterator) -> None:
        self.llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=iterator, is_checkpoint_format=True))

    # ------------------------------------------------------------- memory
    def sleep(self) -> None:
        if self.device_type == "cpu":
            self._note_once("cpu-sleep", "vLLM on CPU has no sleep mode: sleep() / wake_up() do nothing (weights and KV cache stay in host memory)")
            return
        if not self.sleep_enabled:
            self._note_once("no-sleep", "rollout.enable_sleep=false: the vLLM engine keeps its GPU memory between generations")
            return
        if not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = True

    def wake_up(self) -> None:
        if self.device_type == "cpu":
            self._note_once("cpu-sleep", "vLLM on CPU has no sleep mode: sleep() / wake_up() do nothing (weights and KV cache stay in host memory)")
            return
        self._wake_if_asleep()

    def _wake_if_asleep(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def shutdown(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        client = getattr(llm.llm_engine, "engine_core", None)
        try:
            if self._owns_dist:
                # vLLM created its own (single-rank) process group: its normal teardown
                # (which destroys every torch.distributed group) lets another engine start here.
                client.shutdown()
            else:
                # Under rl-core's process group (external launcher) vLLM's teardown would
                # destroy rl-core's default group too: stop the executor and scheduler, then
                # destroy only vLLM's own sub-groups (and their shared-memory queues).
                finalizer = getattr(client, "_finalizer", None)
                if finalizer is not None:
                    finalizer.detach()
                core = getattr(client, "engine_core", None)
                for part in (getattr(core, "model_executor", None), getattr(core, "scheduler", None)):
                    if part is not None:
                        part.shutdown()
                from vllm.distributed import parallel_state as ps

                ps.destroy_model_parallel()
                if ps._WORLD is not None:  # what destroy_distributed_environment does, minus the default group
                    ps._WORLD.destroy()
                    ps._WORLD = None
        except Exception as exc:  # noqa: BLE001 - shutting down must not mask the caller's error
            log.warning("vLLM engine shutdown raised %s: %s", type(exc).__name__, exc)
        del llm, client
        gc.collect()
        if self.device_type == "cuda":
            torch.cuda.empty_cache()


def _rng_state() -> tuple:
    import numpy as np

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda


def _set_rng_state(state: tuple) -> None:
    import numpy as np

    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])
    if state[3] is not None:
        torch.cuda.set_rng_state_all(state[3])


def _sampled_log_probs(comp) -> list[float]:
    """The sampled tokens' log-probs from a ``CompletionOutput`` asked with ``logprobs=0``."""
    if comp.logprobs is None:
        raise RuntimeError("vLLM returned no log-probs although logprobs=0 was requested")
    return [float(comp.logprobs[pos][tok].logprob) for pos, tok in enumerate(comp.token_ids)]


class _quiet_loggers:
    """Raise the level of some loggers to ERROR until :meth:`restore`."""

    def __init__(self, names: Iterable[str]) -> None:
        self._saved = []
        for name in names:
            logger = logging.getLogger(name)
            self._saved.append((logger, logger.level))
            logger.setLevel(logging.ERROR)

    def restore(self) -> None:
        for logger, level in self._saved:
            logger.setLevel(level)


def build(config, context: WorkerContext) -> VLLMRollout:
    """The ``vllm`` card's factory: ``build(config, context) -> RolloutEngine``."""
    return VLLMRollout(config, context)
