"""The ``vllm`` rollout engine: :class:`VLLMRollout` over ``vllm.LLM``.

One engine per worker process, created by :func:`build` (the card's
factory). The engine lives **in the worker's own process**
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), which is what lets weight sync hand
tensors over by reference, with no serialisation and no disk.

Generation
    Prompts arrive left-padded; the padding is stripped and token ids go to
    vLLM as ``TokensPrompt`` (no re-tokenisation). ``SamplingParams`` maps as
    n -> n, temperature, top_p, top_k (``<= 0`` -> off), max_new_tokens ->
    max_tokens, stop, seed; ``greedy`` (or temperature 0) -> temperature 0,
    one request per prompt whose answer fills the n rows (vLLM refuses n > 1
    when greedy; greedy samples are identical anyway).
    A seed seeds the device's generator for the call and the requests go
    unseeded (one noise draw for the whole batch, as vLLM alone samples:
    :mod:`rl_rollout_vllm.fast_path`); with ``rollout.engine_kwargs.seed_mode=request``
    (or a multi-process engine) prompt ``i`` gets the seed ``seed + i * n`` (vLLM adds the
    sample's index) and its own generator, which vLLM's sampler serves one row at a time.
    ``rollout.precision=fp8``: vLLM quantizes the weights to FP8 as they load
    (``quantization="fp8"``) and keeps an FP8 KV cache (:mod:`rl_rollout_correction.precision`).
    A prompt longer than ``data.max_prompt_length``, or one that leaves fewer
    than ``max_new_tokens`` positions below the engine's max model length, is
    an error naming the sample and the lengths
    (:func:`rl_rollout_vllm.convert.check_prompt_lengths`); an empty
    generation is kept with an all-zero mask and reported
    (:func:`rl_rollout_vllm.convert.build_rollout_batch`).

Log-probs
    ``rollout_log_probs`` are ``log_softmax(logits / temperature)`` of each
    sampled token over the **whole vocabulary**, before top-k / top-p
    filtering: what the trainer's forward pass computes and what the ``hf``
    backend reports. Greedy decoding reports ``log_softmax(logits)``
    (temperature 1). vLLM 0.32 has no mode for this: ``raw_logprobs`` (its
    default) ignores the temperature and ``processed_logprobs`` is
    renormalised over the tokens top-k / top-p keep. So the engine runs with
    ``raw_logprobs`` and this adapter wraps the model runner's top-k / top-p
    sampler so that it hands back the full-vocabulary log-softmax of the
    temperature-scaled logits it receives (:func:`_install_full_vocab_logprobs`;
    V1 model runner, which the adapter selects with
    ``VLLM_USE_V2_MODEL_RUNNER=0``). Setting
    ``rollout.engine_kwargs.logprobs_mode`` turns the wrapper off and gives
    vLLM's own semantics.

Weight sync (:meth:`VLLMRollout.load_weights`)
    HF-named tensors go straight into ``reload_weights`` of the model
    runner (``llm.collective_rpc``), in buckets of at most
    ``rollout.engine_kwargs.weight_sync_bucket_mb`` MiB (default 256) that
    never split a transformer layer (see :mod:`rl_rollout_vllm.weights`).
    Nothing is written to disk and nothing is serialised. Each name and
    shape is checked against the model before its bucket is sent, and every
    tensor of the checkpoint must arrive. Peak extra memory during a sync:
    the bucket being collected (references to the caller's tensors: at most
    the bucket size plus one layer of whatever the caller materialised for
    them) plus one layer that vLLM materialises while it processes it.
    ``weight_sync_bucket_mb=0`` sends everything in one call over the
    caller's iterator, streamed (peak: about one layer; but an invalid
    tensor then fails inside vLLM's reload, and the engine needs a full sync
    before it can generate again). The prefix cache is reset after every sync.
    :meth:`VLLMRollout.sample_weights` reads elements back for rl-core's sync
    check (rl_core.weight_sync_check; CPU-packed linear weights by probing the
    layer's GEMM). With LoRA (``rollout.lora_sync`` adapter / auto) the base
    weights come once and then only adapters, through
    :meth:`VLLMRollout.load_adapter` (:mod:`rl_rollout_vllm.lora`).

Memory and colocation
    GPU: ``gpu_memory_utilization`` is passed through and, with
    ``rollout.enable_sleep``, the engine is built with sleep mode;
    :meth:`~VLLMRollout.sleep` offloads the weights to host memory and drops
    the KV cache (``rollout.engine_kwargs.sleep_level``, default 1: level 2
    would also drop the weights, which is only safe when every generation
    follows a sync). CPU: the KV cache has ``VLLM_CPU_KVCACHE_SPACE`` GiB
    (default 1); sleep / wake-up do nothing (logged once).

Tensor parallelism and several ranks
    When rl-core runs several ranks (``torch.distributed`` initialised by
    the placement layer), the engine uses vLLM's ``external_launcher``
    executor: each rank is one vLLM worker, consecutive ranks form a TP
    group (rl-core hands the same prompts to the ranks of a group), and all
    ranks of a group sample with the seed the group's first rank decides.
    Tested on CPU (gloo) with 2 ranks, TP 1 and 2. vLLM's ``LOCAL_RANK`` is the
    index of the rank's GPU in its own process (``cuda:0`` in a Ray actor).
    Weight sync reaches every worker (each rank loads the full HF tensors and
    vLLM's loaders cut its shard); the sync check reads every element back
    from the worker holding it and compares the copies of replicated ones
    (:mod:`rl_rollout_vllm.tp_shards`).

Across nodes (a TP group larger than one node's devices)
    Under ``trainer.placement=ray`` rl-core's ranks form one
    ``torch.distributed`` group over the Ray nodes, so a TP group of
    consecutive ranks spans nodes as it is: the same external-launcher engine,
    each rank a vLLM worker on its own node (vLLM reads nothing else about the
    nodes; its cross-node all-reduce is NCCL's). vLLM binds its TP group's
    broadcast queue for readers on other nodes to ``VLLM_HOST_IP``, which the
    engine sets (where the user set nothing) to the address the node
    registered with Ray, where rl-core's own rendezvous listens; never every
    interface. verl runs such a rollout as one vLLM server per node of the
    replica joined through vLLM's own multi-node launch (``nnodes`` /
    ``node_rank`` / ``master_addr``) and pushes weights into its workers; here
    the workers are rl-core's ranks and the weights arrive in process.
    vLLM's Ray executor (``distributed_executor_backend="ray"``) is not used:
    it would start vLLM's own Ray actors, each wanting the GPU an rl-core
    rank already holds, and move every weight sync through Ray's object
    store; vllm-cpu 0.32 refuses it anyway ("current platform cpu does not
    support ray").

MoE parallelism (``rollout.data_parallel_size``, ``rollout.expert_parallel_size``)
    Passed as vLLM's ``data_parallel_size`` and ``enable_expert_parallel``
    (:func:`rl_rollout_vllm.plugin.parallel_kwargs`). With the external
    launcher each engine spans TP x DP consecutive ranks, and a rollout with
    more ranks runs several engines side by side (verl's DeepSeek-V4 script:
    16 engines of TP 1 x DP 4 over 64 GPUs): vLLM cuts its TP, DP and EP
    groups per engine from the whole world, and while an engine is built
    ``RANK`` is the rank within it, from which vLLM derives the DP rank
    (:mod:`rl_rollout_vllm.replicas`). Each TP group is still one rl-core
    replica with prompts of its own; vLLM runs the DP ranks of an engine in
    lockstep over the engine's DP group (dummy batches for a rank without
    requests), so they must call ``generate`` equally often: rl-core hands
    every replica an equal share of the prompts (padded;
    tests/core/test_rollout_shards.py), hence the same number of engine
    calls, and the plugin's checks refuse DP > 1 with
    multi-turn rollouts. EP spreads the experts over each engine's TP x DP
    ranks (vLLM's EP group = the engine), and the weight-sync check reads
    experts back over that group. Tested on the CPU with a dense model: one
    engine of DP 2 end to end (bench/verl_scripts/vllm_dp_smoke.py), two
    engines of TP 1 x DP 2 on 4 ranks (tests/test_vllm_dp_replicas.py).
    vllm-cpu cannot generate with EP (its CPU communicator has no
    all_gatherv); two EP engines on 4 GPUs: tests/test_vllm_dp_replicas_gpu.py
    (passed on 4 H100s: bench/results/four_gpu_h100/session14/).

MoE routing replay R3 (``rollout.return_routed_experts``)
    The engine is built with ``enable_return_routed_experts`` (vLLM 0.26's V1 model runner captures each token's
    experts; the plugin's checks refuse engines that do not) and each generation's batch gets ``routed_experts``,
    laid out as the hf rollout lays it out (:mod:`rl_rollout_vllm.routing`); at start-up vLLM's MoE layers are
    checked against the HF model's router layers. Multi-turn rollouts do not record it (refused by the core rules).

Other ``rollout.engine_kwargs`` are passed to ``vllm.LLM`` unchanged
(``max_model_len``, ``max_num_seqs``, ``enable_prefix_caching``,
``enforce_eager``, ``logprobs_mode``, ...).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.batch import Batch
from rl_core.rollout.multi_turn import multi_turn_on

from rl_rollout_vllm import experts, fast_path, routing
from rl_rollout_vllm.convert import Sample, build_rollout_batch, check_prompt_lengths, unpadded_prompts
from rl_rollout_vllm.plugin import parallel_kwargs
from rl_rollout_vllm.replicas import engine_rank_env
from rl_rollout_vllm.weights import buckets

log = logging.getLogger(__name__)

#: Default of ``rollout.engine_kwargs.weight_sync_bucket_mb``; that key and ``sleep_level``
#: are read here, every other key goes to ``vllm.LLM``.
DEFAULT_BUCKET_MB = 256

#: where vLLM reports "weights not loaded" after each bucket: 0.32's reload modules, 0.26's model runner (the GPU build)
_RELOAD_LOGGERS = ("vllm.model_executor.model_loader.reload.layerwise", "vllm.model_executor.model_loader.reload.inplace",
                   "vllm.v1.worker.gpu_model_runner")

# Engines alive in this process, and whether vLLM (not rl-core) created the
# torch.distributed group they share: only the last engine may tear it down.
_PROCESS = {"engines": 0, "vllm_owns_group": False}


def configure_environment(device: str) -> None:
    """Environment vLLM reads at engine creation (only where the user set nothing)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")  # the log-prob wrapper targets the V1 sampler
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def worker_local_rank(context: WorkerContext) -> int:
    """vLLM's ``LOCAL_RANK``: the index of this rank's GPU among the GPUs this process sees (vLLM's worker runs on
    ``cuda:LOCAL_RANK``): ``cuda:0`` in a Ray actor, which sees its own GPU only, whatever its rank on the node; on
    CPU the rank on the node."""
    device = torch.device(context.device)
    if device.type == "cpu":
        return context.local_rank
    return device.index if device.index is not None else 0


def ray_node_address() -> str | None:
    """The address this node registered with Ray when this process is a Ray worker (rl-core's
    ``trainer.placement=ray``), else None."""
    import sys

    ray = sys.modules.get("ray")  # only a process Ray started has it imported; never import Ray here
    if ray is None or not ray.is_initialized():
        return None
    return ray.util.get_node_ip_address()


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
        self.full_vocab_logprobs = "logprobs_mode" not in extra
        # one seed per generate call, not one generator per request (rl_rollout_vllm.fast_path)
        self.seed_mode = fast_path.seed_mode(extra)
        self.precision = r.precision
        self.tp = int(r.tensor_model_parallel_size)
        self.sleep_enabled = bool(r.enable_sleep) and self.device_type == "cuda"
        self.generation_batch_size = r.generation_batch_size
        self.max_prompt_length = config.data.max_prompt_length
        self._asleep = False
        # GPU only: what the last sleep freed and how long sleep / wake-up / weight sync took, reported in the
        # next generation's meta (``rollout/*`` counters reach the step's metrics, summed over replicas).
        self._memory_stats: dict[str, float] = {}
        self._noted: set[str] = set()
        self._shm_prefix: str | None = None
        # LoRA through vLLM's LoRA layers (rollout.lora_sync adapter / auto; rl_rollout_vllm.lora): the adapter in use
        self.lora_rank = int(config.model.lora_rank) if r.lora_sync != "merged" else 0
        self._adapter_dtype: torch.dtype | None = None
        self._lora_request = None

        import torch.distributed as dist

        group_exists = dist.is_available() and dist.is_initialized()
        self.external = context.world_size > 1 or self.tp > 1
        if self.external and not group_exists:
            raise RuntimeError(
                f"rank {context.rank} of {context.world_size} (rollout TP {self.tp}) has no torch.distributed group; "
                "rl-core's placement layer creates it before building the engine"
            )
        # rollout.return_routed_experts (MoE routing replay R3): vLLM's routing of each token (rl_rollout_vllm.routing)
        self.routing = routing.hf_layout(config) if r.return_routed_experts else None
        kwargs = self._llm_kwargs(extra)
        self.llm = self._create_llm(kwargs)
        if self.routing is not None:
            routing.check_layers(self.routing, self.llm.collective_rpc(routing.worker_moe_layers)[0], config.model.path)
        if not group_exists:
            _PROCESS["vllm_owns_group"] = True
        _PROCESS["engines"] += 1
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.pad_id = self._pad_id()
        if self.full_vocab_logprobs and not all(self.llm.collective_rpc(_install_full_vocab_logprobs)):
            self.full_vocab_logprobs = False
            log.warning(
                "could not wrap this vLLM's sampler: rollout log-probs are vLLM's raw_logprobs "
                "(log_softmax(logits), temperature ignored), not log_softmax(logits / temperature)"
            )
        self._shapes, self._required = _model_tensors(config)
        self.flat_logprobs = fast_path.flat_logprobs_supported()
        self.batch_seeded = self.seed_mode == "batch" and fast_path.in_process()

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
            logprobs_mode="raw_logprobs",
            disable_log_stats=True,
        )
        if m.override_config:
            kwargs["hf_overrides"] = dict(m.override_config)
        if m.random_init:
            kwargs["load_format"] = "dummy"  # random weights; the first sync brings the actor's
        if self.lora_rank:
            from rl_rollout_vllm.lora import lora_engine_kwargs

            kwargs.update(lora_engine_kwargs(self.lora_rank))
        if self.device_type == "cpu":
            kwargs["enforce_eager"] = True
        else:
            kwargs["gpu_memory_utilization"] = cfg.rollout.gpu_memory_utilization
            kwargs["enable_sleep_mode"] = self.sleep_enabled
        kwargs.update(parallel_kwargs(cfg.rollout))
        if cfg.rollout.return_routed_experts:
            kwargs["enable_return_routed_experts"] = True
        if self.precision == "fp8":  # rollout.precision (rl_rollout_correction.precision): FP8 weights and KV cache
            kwargs.update(fast_path.FP8_KWARGS)
        if self.external:
            # rl-core already joined the ranks: each rank is one vLLM worker of its TP group.
            kwargs["distributed_executor_backend"] = "external_launcher"
            os.environ.setdefault("RANK", str(self.context.rank))
            os.environ.setdefault("LOCAL_RANK", str(worker_local_rank(self.context)))
            os.environ.setdefault("WORLD_SIZE", str(self.context.world_size))
            host = ray_node_address()
            if host is not None:  # see "Across nodes" in the module docstring
                os.environ.setdefault("VLLM_HOST_IP", host)
        kwargs.update(extra)
        return kwargs

    def _create_llm(self, kwargs: dict[str, Any]):
        from vllm import LLM

        threads = torch.get_num_threads()
        set_threads = torch.set_num_threads
        rng = _rng_state()
        start = time.perf_counter()
        restore_launcher = self._name_shared_memory() if self.external and self.device_type == "cpu" else None
        try:
            # several DP engines side by side: vLLM must read the rank within its own engine (rl_rollout_vllm.replicas)
            with engine_rank_env(self._world_rank(), kwargs):
                llm = LLM(**kwargs)
        finally:
            if restore_launcher is not None:
                restore_launcher()
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

    def _world_rank(self) -> int:
        """This rank in the ``torch.distributed`` world vLLM cuts its groups from."""
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else self.context.rank

    def _name_shared_memory(self):
        """Give this job's CPU TP shared-memory segments a name no other job uses.

        vLLM's CPU communicator names its ``/dev/shm`` segments after the
        distributed init method, which the external launcher fixes to
        ``env://``: every job on a machine would then use the same names, and
        segments a finished job leaves behind make the next start fail
        (``create shm in SHMManager failed. errno: 17``). The init method is
        not otherwise used when the process group exists, so it carries a
        name rank 0 draws and broadcasts. Returns the function that undoes the patch.
        """
        import secrets

        import torch.distributed as dist
        from vllm.v1.executor.uniproc_executor import ExecutorWithExternalLauncher

        name = [f"rlvllm{secrets.token_hex(6)}" if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(name, src=0)
        self._shm_prefix = name[0]
        original = ExecutorWithExternalLauncher.__dict__["_distributed_args"]

        def _distributed_args(executor):
            _, rank, local_rank = original(executor)
            return f"tcp://127.0.0.1:{self._shm_prefix}", rank, local_rank

        ExecutorWithExternalLauncher._distributed_args = _distributed_args

        def restore():
            ExecutorWithExternalLauncher._distributed_args = original

        return restore

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
        check_prompt_lengths(prompts, params.max_new_tokens, self.max_model_len, self.max_prompt_length)
        greedy = params.greedy or params.temperature <= 0
        seed = self._agreed_seed(params.seed)
        if multi_turn_on(self.config):
            return self._generate_multi_turn(batch, params, greedy, seed)
        from vllm.inputs import TokensPrompt

        per_call = len(prompts) if not self.generation_batch_size else max(1, self.generation_batch_size // params.n)
        samples: list[Sample] = []
        routed: list = []  # each sample's CompletionOutput.routed_experts (rollout.return_routed_experts)
        for start in range(0, len(prompts), per_call):
            chunk = prompts[start : start + per_call]
            if self.batch_seeded:  # one seed for the call, the requests unseeded (rl_rollout_vllm.fast_path)
                one = self._sampling_params(params, greedy, None)
                sampling = [one] * len(chunk)
                seeded = fast_path.batch_seed(None if seed is None or greedy else seed + start * params.n, self.context.torch_device)
            else:
                sampling = [self._sampling_params(params, greedy, None if seed is None else seed + (start + i) * params.n) for i in range(len(chunk))]
                seeded = contextlib.nullcontext()
            with seeded:
                outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in chunk], sampling, use_tqdm=False, lora_request=self._lora_request)
            for out in outputs:
                for comp in sorted(out.outputs, key=lambda c: c.index):
                    sample = Sample(comp.token_ids, fast_path.sampled_log_probs(comp) if params.logprobs else None, comp.finish_reason)
                    # vLLM refuses n > 1 with greedy decoding: one request, its answer n times.
                    samples.extend([sample] * (params.n if greedy else 1))
                    if self.routing is not None:
                        routed.extend([comp.routed_experts] * (params.n if greedy else 1))
        out = build_rollout_batch(batch, samples, params, self.pad_id)
        if self.routing is not None:  # [rows, P + R, layers, k] int16, -1 where nothing was routed
            out["routed_experts"] = routing.routed_field(routed, batch.tensors["attention_mask"], params.n, out["response_mask"].sum(-1),
                                                         params.max_new_tokens, self.routing)
        out.meta.update(self._memory_stats)
        self._memory_stats = {}
        return out

    def _generate_multi_turn(self, batch: Batch, params: SamplingParams, greedy: bool, seed: int | None) -> Batch:
        """Agent rollouts (:mod:`rl_core.rollout.multi_turn`): each turn of every active trajectory is one request
        (token ids in, the sampled ids and log-probs out); the turns of a trajectory reuse their prefix through vLLM's
        prefix cache. Turn ``t``'s request ``i`` gets the seed ``seed + t * 1_000_003 + i``."""
        from rl_core.rollout.multi_turn import MultiTurn, eos_token_ids
        from vllm.inputs import TokensPrompt

        if getattr(self, "_multi_turn", None) is None:
            tok = self._hf_tokenizer()
            m = self.config.model
            self._multi_turn = MultiTurn(self.config, tok, eos_token_ids(m.path, tok, trust_remote_code=m.trust_remote_code), agent=self.context.agent)
        turn = [0]

        def continue_ids(prompts: list[list[int]], budgets: list[int], stop: tuple[str, ...]) -> list[Sample]:
            base = None if seed is None else seed + turn[0] * 1_000_003
            turn[0] += 1
            per_call = self.generation_batch_size or len(prompts)
            out: list[Sample] = []
            for start in range(0, len(prompts), per_call):
                chunk = range(start, min(len(prompts), start + per_call))
                one = [self._sampling_params(_one_turn(params, budgets[i], stop), greedy, None if base is None else base + i) for i in chunk]
                answers = self.llm.generate([TokensPrompt(prompt_token_ids=prompts[i]) for i in chunk], one, use_tqdm=False, lora_request=self._lora_request)
                for ans in answers:
                    comp = ans.outputs[0]
                    out.append(Sample(comp.token_ids, fast_path.sampled_log_probs(comp) if params.logprobs else None, comp.finish_reason))
            return out

        out = self._multi_turn.generate(batch, params, continue_ids, pad_id=self.pad_id)
        out.meta.update(self._memory_stats)
        self._memory_stats = {}
        return out

    def _hf_tokenizer(self):
        """The model's transformers tokenizer (chat template, decoding), as the ``hf`` backend and the trainer load it."""
        from rl_core.modeling import load_tokenizer

        m = self.config.model
        return load_tokenizer(m.tokenizer_path or m.path, trust_remote_code=m.trust_remote_code)

    def _sampling_params(self, params: SamplingParams, greedy: bool, seed: int | None):
        from vllm import SamplingParams as VSamplingParams

        flat = {"flat_logprobs": True} if params.logprobs and self.flat_logprobs else {}
        return VSamplingParams(
            **flat,
            n=1 if greedy else params.n,
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

        def checked(items) -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal nbytes
            for name, tensor in items:
                self._check_tensor(name, tensor)
                sent.add(name)
                nbytes += tensor.numel() * tensor.element_size()
                if experts.prefix(name) is not None and self.bucket_bytes <= 0:
                    moe_layers.add(experts.prefix(name))
                if experts.is_fused(name, tensor):  # transformers 5's 3-D experts: per-expert views, as vLLM loads
                    for piece in experts.split(name, tensor):
                        sent.add(piece[0])
                        yield piece
                else:
                    yield name, tensor

        moe_layers: set[str] = set()  # the experts layers of the current reload call (rl_rollout_vllm.experts): a
        # bucket's own (buckets() reads one tensor ahead, into the next bucket)

        def reload(iterator) -> None:
            self._reload(iterator)
            if moe_layers:  # vLLM-cpu prepacks experts at start only: again for those just reloaded
                self.llm.collective_rpc(experts.repack_cpu, args=(sorted(moe_layers),))
                moe_layers.clear()

        calls = 0
        if self.bucket_bytes <= 0:
            reload(checked(weights))
            calls = 1
        else:
            quiet = _QuietLoggers(_RELOAD_LOGGERS)  # every bucket leaves the other layers "not loaded"
            try:
                for bucket in buckets(checked(weights), self.bucket_bytes):
                    moe_layers.update(experts.prefix(n) for n, _ in bucket if experts.prefix(n) is not None)
                    reload(iter(bucket))
                    calls += 1
                    del bucket
            finally:
                quiet.restore()
        self.llm.collective_rpc(_refresh_tied_lm_head)
        self.llm.reset_prefix_cache()
        if self._required is not None:
            missing = sorted(self._required - sent)
            if missing:
                shown = ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else "")
                raise ValueError(f"load_weights: {len(missing)} of the model's checkpoint tensors were not provided: {shown}")
        if self.device_type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        self._memory_stats.update({"rollout/weight_sync_s": elapsed, "rollout/weight_sync_gib": nbytes / 2**30, "rollout/weight_sync_calls": calls})
        log.info("weight sync: %d tensors, %.1f MiB in %d call(s), %.2f s", len(sent), nbytes / 2**20, calls, elapsed)

    def load_adapter(self, tensors: dict[str, torch.Tensor], peft_config: dict[str, Any], version: int) -> None:
        """LoRA adapters (peft names, scale folded in) of policy ``version`` into vLLM's LoRA layers, in memory; every
        later generation uses them (rl_rollout_vllm.lora). The base weights came once through :meth:`load_weights`."""
        if not self.lora_rank:
            raise RuntimeError("load_adapter: this vLLM engine was built without LoRA (model.lora_rank=0 or rollout.lora_sync=merged)")
        from vllm.lora.request import LoRARequest

        from rl_rollout_vllm.lora import add_adapter

        self._wake_if_asleep()
        start = time.perf_counter()
        lora_id = int(version) + 1
        self.llm.collective_rpc(add_adapter, args=(tensors, peft_config, lora_id))
        # the path is never read: the adapter is held under its id (a request for an id vLLM lacks fails on this path)
        self._lora_request = LoRARequest(lora_name=f"rlcore-policy-v{version}", lora_int_id=lora_id, lora_path=f"rlcore-in-memory-adapter-v{version}")
        self.llm.reset_prefix_cache()
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        self._memory_stats.update({"rollout/weight_sync_s": time.perf_counter() - start, "rollout/weight_sync_gib": nbytes / 2**30, "rollout/weight_sync_calls": 1})

    @property
    def adapter_dtype(self) -> torch.dtype | None:
        """The dtype vLLM's LoRA slots hold adapters in: the trainer sends them in it (half the bytes of float32
        for a 16-bit model; vLLM would round them to it anyway, so it holds the same values). None without LoRA."""
        if not self.lora_rank:
            return None
        if self._adapter_dtype is None:
            from rl_rollout_vllm.lora import adapter_dtype

            self._adapter_dtype = self.llm.collective_rpc(adapter_dtype)[0]
        return self._adapter_dtype

    def sample_weights(self, positions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """What the engine holds at flat ``positions`` of HF-named weights and of the adapter in use (peft names), for
        rl_core.weight_sync_check. With tensor parallel > 1 every rank of the TP group must call it (the same
        positions): each element comes from the worker holding it, NaN where its holders disagree
        (rl_rollout_vllm.tp_shards); None for LoRA adapters with TP > 1 and fully_sharded_loras (not sampled)."""
        from rl_rollout_vllm.lora import sample_held

        if self.precision == "fp8":  # the engine holds FP8 copies: they differ from the sent weights by design
            self._note_once("fp8-unverified", "weight sync: not verified element-wise with rollout.precision=fp8 (vLLM holds FP8 "
                            "copies of the weights; the rollout / trainer log-prob mismatch metrics show the gap)", level=logging.WARNING)
            return None
        lora_id = self._lora_request.lora_int_id if self._lora_request is not None else None
        held = self.llm.collective_rpc(sample_held, args=(positions, self._shapes, lora_id, self.lora_rank))[0]
        if held is None:
            self._note_once("unverified", "weight sync: LoRA adapters are not verified with tensor parallel > 1 and fully_sharded_loras (another layout of vLLM's LoRA slots)", level=logging.WARNING)
        return held

    def _check_tensor(self, name: str, tensor: torch.Tensor) -> None:
        if self._shapes is None:
            return
        want = self._shapes.get(name)
        if want is None:
            known = ", ".join(list(self._shapes)[:4])
            raise ValueError(
                f"load_weights: unexpected weight {name!r}: the rollout model has no tensor of that name "
                f"(its names look like {known}, ...); is the trainer's model the same architecture?"
            )
        if tuple(tensor.shape) != want:
            raise ValueError(f"load_weights: weight {name!r} has shape {tuple(tensor.shape)} but the rollout model's is {want}")

    def _reload(self, iterator) -> None:
        if self.lora_rank:  # LoRA layers wrap the base weights: reload through them (rl_rollout_vllm.lora)
            from rl_rollout_vllm.lora import reload_base_weights

            self.llm.collective_rpc(reload_base_weights, args=(iterator,))
            return
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
            free_before = torch.cuda.mem_get_info(self.context.torch_device)[0]
            start = time.perf_counter()
            self.llm.sleep(level=self.sleep_level)
            self._memory_stats["rollout/sleep_s"] = time.perf_counter() - start
            self._memory_stats["rollout/sleep_freed_gib"] = (torch.cuda.mem_get_info(self.context.torch_device)[0] - free_before) / 2**30
            self._asleep = True

    def wake_up(self) -> None:
        if self.device_type == "cpu":
            self._note_once("cpu-sleep", "vLLM on CPU has no sleep mode: sleep() / wake_up() do nothing (weights and KV cache stay in host memory)")
            return
        self._wake_if_asleep()

    def _wake_if_asleep(self) -> None:
        if self._asleep:
            start = time.perf_counter()
            # The colocated trainer's freed blocks stay in torch's cache, out of the engine's reach
            # (measured on an H100: wake-up of a 38 GiB KV cache ran out of memory after a 62 GiB update).
            torch.cuda.empty_cache()
            self.llm.wake_up()
            self._memory_stats["rollout/wake_s"] = time.perf_counter() - start
            self._asleep = False

    def shutdown(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        _PROCESS["engines"] -= 1
        last = _PROCESS["engines"] == 0
        client = getattr(llm.llm_engine, "engine_core", None)
        try:
            if last and _PROCESS["vllm_owns_group"]:
                # vLLM created the (single-rank) process group: its own teardown, which
                # destroys every torch.distributed group, lets a new engine start here.
                _PROCESS["vllm_owns_group"] = False
                client.shutdown()
            else:
                # Other engines still use the groups, or they belong to rl-core (whose
                # default group vLLM's teardown would destroy): stop this engine only.
                finalizer = getattr(client, "_finalizer", None)
                if finalizer is not None:
                    finalizer.detach()
                core = getattr(client, "engine_core", None)
                for part in (getattr(core, "model_executor", None), getattr(core, "scheduler", None)):
                    if part is not None:
                        part.shutdown()
                if last:
                    # rl-core's group: destroy vLLM's sub-groups (and their shared-memory
                    # queues) as destroy_distributed_environment would, minus the default group.
                    from vllm.distributed import parallel_state as ps

                    ps.destroy_model_parallel()
                    if ps._WORLD is not None:
                        ps._WORLD.destroy()
                        ps._WORLD = None
        except Exception as exc:  # noqa: BLE001 - shutting down must not mask the caller's error
            log.warning("vLLM engine shutdown raised %s: %s", type(exc).__name__, exc)
        if self._shm_prefix:
            # vLLM leaves its CPU communicator's segments in /dev/shm; the names are this job's own.
            for leftover in Path("/dev/shm").glob(f"{self._shm_prefix}-*"):
                leftover.unlink(missing_ok=True)
        del llm, client
        gc.collect()
        if self.device_type == "cuda":
            torch.cuda.empty_cache()


def _install_full_vocab_logprobs(worker) -> bool:
    """Make the V1 sampler report full-vocabulary log-probs of the temperature-scaled logits.

    Runs inside the vLLM worker (``collective_rpc``). vLLM's sampler hands the
    temperature-scaled logits to its top-k / top-p sampler, which returns
    ``(tokens, processed_logprobs or None)``; the sampler then reports those
    processed log-probs instead of the raw ones when they are not None. The
    wrapper computes ``log_softmax`` of the logits it receives (after
    temperature, before filtering) and returns them in that slot. Greedy-only
    steps never reach it and report raw ``log_softmax(logits)``.
    """
    runner = getattr(worker, "model_runner", None)
    sampler = getattr(runner, "sampler", None)
    inner_sampler = getattr(sampler, "topk_topp_sampler", None)
    if inner_sampler is None or not callable(getattr(inner_sampler, "forward", None)):
        return False
    if getattr(inner_sampler, "_rl_full_vocab_logprobs", False):
        return True
    inner = inner_sampler.forward

    def forward(logits, generators, k, p):
        full = logits.log_softmax(dim=-1, dtype=torch.float32)  # before the in-place top-k / top-p masking
        tokens, _ = inner(logits, generators, k, p)
        return tokens, full

    inner_sampler.forward = forward
    inner_sampler._rl_full_vocab_logprobs = True
    return True


def _refresh_tied_lm_head(worker) -> bool:
    """Re-derive a tied ``lm_head``'s kernel state after a weight reload (runs in the worker).

    With tied embeddings vLLM's ``lm_head`` is its own module sharing the
    embedding's weight; a reload skips ``lm_head.weight`` (the checkpoint has
    none), so the layer-wise reload never reprocesses that module, and on CPU
    its matmul keeps using the weight it prepacked at start-up. Reprocessing
    it from the (already updated) shared weight fixes that; on GPU the
    unquantized method has nothing to redo.
    """
    runner = getattr(worker, "model_runner", None)
    model = runner.get_model() if runner is not None and hasattr(runner, "get_model") else None
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or head is embed:
        return False
    weight, shared = getattr(head, "weight", None), getattr(embed, "weight", None)
    if weight is None or shared is None or weight.data_ptr() != shared.data_ptr():
        return False
    method = getattr(head, "quant_method", None)
    if method is None or not hasattr(method, "process_weights_after_loading"):
        return False
    method.process_weights_after_loading(head)
    return True


def _model_tensors(config) -> tuple[dict[str, tuple[int, ...]] | None, set[str] | None]:
    """``(HF name -> shape of every tensor, names a sync must provide)`` for the configured model.

    Shapes come from the model built on the meta device (no memory, no
    weights), so tied aliases such as ``lm_head.weight`` are known; the
    required names are those in the folder's safetensors files (headers only).
    Either is None when it cannot be had, and that check is skipped.
    """
    m = config.model
    shapes = None
    try:
        from transformers import AutoConfig, AutoModelForCausalLM

        hf_cfg = AutoConfig.from_pretrained(m.path, trust_remote_code=m.trust_remote_code)
        for key, value in (m.override_config or {}).items():
            setattr(hf_cfg, key, value)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_cfg, trust_remote_code=m.trust_remote_code)
        shapes = experts.per_expert_shapes({name: tuple(t.shape) for name, t in model.state_dict().items()})
        del model
    except Exception as exc:  # noqa: BLE001 - validation is a convenience, never a reason not to run
        log.info("weight sync: names and shapes will not be checked (%s: %s)", type(exc).__name__, exc)
    required = None
    folder = Path(os.path.expanduser(m.path))
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() and not m.random_init else []
    if files:
        from safetensors import safe_open

        required = set()
        for f in files:
            with safe_open(str(f), framework="pt") as fh:
                required.update(fh.keys())
        if shapes is not None:
            required &= set(shapes)
    return shapes, required


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


class _QuietLoggers:
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


def _one_turn(params: SamplingParams, budget: int, stop: tuple[str, ...]) -> SamplingParams:
    """``params`` for one request of one turn: one sample, at most ``budget`` new tokens, ``stop`` strings."""
    import attrs

    return attrs.evolve(params, n=1, max_new_tokens=int(budget), stop=tuple(stop))


def build(config, context: WorkerContext) -> VLLMRollout:
    """The ``vllm`` card's factory: ``build(config, context) -> RolloutEngine``."""
    return VLLMRollout(config, context)
