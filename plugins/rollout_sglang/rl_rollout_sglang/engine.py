"""The ``sglang`` rollout engine: :class:`SGLangRollout` over ``sglang.Engine`` or a running server.

One adapter per worker process, created by :func:`build` (the card's factory).

Engine
    By default the offline ``sglang.Engine`` is started in the worker (no
    server; SGLang runs its scheduler in child processes of the worker). With
    ``rollout.engine_kwargs.server_url`` the adapter talks to an SGLang server
    that is already running instead (:class:`rl_rollout_sglang.clients.ServerClient`;
    same machine, for weight sync). Every other ``rollout.engine_kwargs`` key
    goes to ``sglang.Engine`` unchanged. The adapter's defaults:
    ``model_path``, ``dtype`` (``model.dtype``), ``tp_size``
    (``rollout.tensor_model_parallel_size``), ``context_length``
    (``data.max_prompt_length + data.max_response_length``),
    ``random_seed`` (the worker's seed), ``skip_tokenizer_init=True`` (token
    ids in and out), ``mem_fraction_static``: ``rollout.gpu_memory_utilization``
    on GPU, 0.05 of host memory on CPU; on CPU also ``device="cpu"`` and
    ``disable_overlap_schedule=True``; on GPU ``enable_memory_saver`` when
    ``rollout.enable_sleep``. An engine that fails to start raises
    :class:`~rl_rollout_sglang.clients.EngineStartError` with SGLang's message
    and the arguments.

Generation
    Prompts arrive left-padded; padding is stripped and token ids are sent as
    ``input_ids``. Every sample is one request, so sample ``j`` of prompt ``i``
    can get the seed ``seed + i * n + j``; a prompt's n samples share its prefix
    through SGLang's radix cache because each distinct prompt is first sent once
    with no new token (``rollout.engine_kwargs.share_prefill``, default true; as
    SGLang's own ``n`` does: its scheduler would otherwise prefill the n requests
    of one batch side by side, the prompt n times). ``SamplingParams`` maps to temperature,
    top_p, top_k (``<= 0``: off), max_new_tokens and ``sampling_seed``;
    greedy (or temperature 0) is temperature 0, one request per prompt, its
    answer repeated n times. Stop strings are applied by the adapter (the
    response ends with the token that completes the stop string), since the
    engine runs without a tokenizer. ``rollout.generation_batch_size`` bounds
    the sequences per engine call. Seeds: SGLang honours them on GPU with
    ``engine_kwargs.enable_deterministic_inference=true`` and, through this
    distribution's SGLang plugin, on CPU (:mod:`rl_rollout_sglang.sglang_quirks`).

Log-probs
    ``return_logprob=True``: SGLang reports ``log(softmax(logits / T))`` of each
    sampled token over the whole vocabulary, before top-k / top-p filtering
    (its ``pytorch`` and ``flashinfer`` samplers), and ``log_softmax(logits)``
    when greedy: what the trainer's forward pass computes.

Weight sync (:meth:`SGLangRollout.load_weights`)
    HF-named tensors go to ``update_weights_from_tensor`` in buckets of at most
    ``rollout.engine_kwargs.weight_sync_bucket_mb`` MiB (default 256), inside
    one ``begin_weight_update()`` / ``end_weight_update()`` session, then the
    radix cache is flushed. Names and shapes are checked against the model
    before a bucket is sent. On CPU the tensors reach the scheduler process
    through shared memory (each bucket is copied once: peak extra memory one
    bucket); on GPU through CUDA IPC handles (no copy). Every sync is verified
    by rl-core (:meth:`SGLangRollout.sample_weights`, read in SGLang's scheduler
    by :mod:`rl_rollout_sglang.held`). LoRA: merged weights (no adapter API on
    this build: SGLang's CPU LoRA layers need pinned memory; docs/lora.md).

Expert parallelism
    ``rollout.expert_parallel_size`` (= TP, checked by the resolver) is
    SGLang's ``ep_size``: the experts spread over the engine's TP ranks.
    ``rollout.data_parallel_size`` > 1 (SGLang's ``attn_dp_size``) is not run:
    the engine would span TP x DP ranks fed by one of them, and rl-core
    groups the ranks by TP (the card does not list it, so it is refused).

Tensor parallelism
    The first rank of each TP group (consecutive ranks) starts the engine with
    ``tp_size`` = the group size; SGLang runs the TP workers itself (on GPU
    from the rank's device on, on CPU each on its own cores via
    ``SGLANG_CPU_OMP_THREADS_BIND``). The group's other ranks hold no engine:
    their ``generate`` returns an all-masked placeholder that the loop drops
    (it keeps each group's first rank's result) and their ``load_weights``
    only drains the iterator (the trainer's gathers stay collective).

Memory
    GPU with ``rollout.enable_sleep``: ``sleep`` = ``release_memory_occupation``
    of SGLang's three regions (``kv_cache``, ``weights``, ``cuda_graph``);
    ``wake_up`` resumes the weights (for the sync that usually follows); the KV
    cache and the graphs' memory are resumed before the next generation, after
    the sync (verl's and slime's order: a sync's peak does not hold them).
    SGLang drops the weights' contents on release unless the engine was started
    with ``enable_weights_cpu_backup``; rl-core wakes an engine without a sync in
    between (a reward judge's engine), so the adapter starts it with the backup
    on: the weights go to pinned host memory and back, as vLLM's sleep level 1,
    and torch_memory_saver keeps that pinned buffer from one release to the next
    (``TMS_RETAIN_CPU_BACKUP=1``, set where unset: pinning the model anew each
    step is most of the 1.15-1.46 s a release took, :mod:`rl_rollout_sglang.sglang_quirks`).
    ``rollout.engine_kwargs.enable_weights_cpu_backup=false`` skips the copies:
    a sleep then releases the weights only in an engine that has received a
    weight sync and takes full syncs (not LoRA adapters; otherwise they stay on
    the GPU, noted once), and a generation (or adapter load) after such a
    release with no sync since raises instead of running on garbage. Each
    sleep's seconds and freed GiB, and the resumes' seconds (summed), are in the
    next generation's ``rollout/sleep_s``, ``rollout/sleep_freed_gib`` and
    ``rollout/wake_s``. CPU: both do nothing (logged once).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Iterable, Iterator

import attrs
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.batch import Batch
from rl_core.rollout.multi_turn import multi_turn_on
from rl_core.rollout.output import rollout_batch

from rl_rollout_sglang import sglang_quirks
from rl_rollout_sglang.convert import (
    EMPTY_META_KEY,
    Sample,
    build_rollout_batch,
    check_prompt_lengths,
    cut_at_stop,
    parse_output,
    request_seeds,
    sampling_params,
    unpadded_prompts,
)
from rl_rollout_sglang.plugin import ADAPTER_KEYS
from rl_rollout_sglang.weights import buckets, check_tensor, model_shapes

log = logging.getLogger(__name__)

#: Default of ``rollout.engine_kwargs.weight_sync_bucket_mb``.
DEFAULT_BUCKET_MB = 256
#: On CPU, SGLang sizes its KV cache from two readings of the host's available memory, before and after loading the
#: weights, and refuses to start when the second is below ``(1 - mem_fraction_static)`` of the first. Whatever other
#: processes allocate in between counts as "weights": with two engines starting side by side (one per rank) a small
#: fraction failed 1 start in 5 here ("Loaded weights leave no GPU memory for the KV cache"). So the fraction is only
#: slack for that reading, and the KV cache itself is capped in tokens (``rollout.engine_kwargs`` overrides both).
CPU_MEM_FRACTION = 0.3
#: SGLang's memory regions (``sglang.srt.constants.GPU_MEMORY_TYPE_*``, the same in 0.5.17 and 0.5.23): the tags of
#: ``release_memory_occupation`` / ``resume_memory_occupation``.
KV_CACHE, WEIGHTS, CUDA_GRAPH = "kv_cache", "weights", "cuda_graph"
#: KV-cache tokens of the CPU engine, at least two of the longest requests (~0.75 GB for SmolLM2-135M in float32;
#: requests beyond it wait their turn).
CPU_KV_TOKENS = 16384


class SGLangRollout:
    """Follows :class:`rl_core.backends.RolloutEngine` (see the module docstring).

    ``client`` (tests, embedding): an already-built client to use instead of
    starting one; it is not shut down by :meth:`shutdown`.
    """

    def __init__(self, config, context: WorkerContext, client=None) -> None:
        self.config = config
        self.context = context
        r = config.rollout
        self.device_type = torch.device(context.device).type
        extra = dict(r.engine_kwargs or {})
        adapter = {k: extra.pop(k) for k in ADAPTER_KEYS if k in extra}
        self.bucket_bytes = int(float(adapter.get("weight_sync_bucket_mb", DEFAULT_BUCKET_MB)) * 2**20)
        self.tp = int(r.tensor_model_parallel_size)
        self.leader = context.rank % self.tp == 0
        self.release_enabled = bool(r.enable_sleep) and self.device_type == "cuda"
        self.generation_batch_size = r.generation_batch_size
        self.max_prompt_length = config.data.max_prompt_length
        #: SGLang's memory regions released by the last sleep and not resumed yet
        self._released: set[str] = set()
        #: the weights were released without a host copy and no weight sync has loaded them since
        self._weights_lost = False
        #: a weight sync has completed on this engine (it is a policy engine, kept current by syncs)
        self._synced = False
        #: timings of the last sleep / wake / sync, put in the next generation's batch.meta (as vLLM's adapter does)
        self._stats: dict[str, float] = {}
        # LoRA through SGLang's adapter API (rollout.lora_sync=adapter / auto; rl_rollout_sglang.lora)
        self.lora_rank = int(config.model.lora_rank) if r.lora_sync != "merged" else 0
        self._lora_name: str | None = None
        self._noted: set[str] = set()
        self._tokenizer = None
        self._owns_client = client is None
        self.server = bool(adapter.get("server_url"))
        # one prefill per group: each prompt is sent once (no new token) before its n samples, so the radix cache holds
        # it when they are scheduled; SGLang's scheduler (fcfs) otherwise prefills the n requests of a batch side by side
        self.share_prefill = bool(adapter.get("share_prefill", True)) and not extra.get("disable_radix_cache", False)
        if client is not None:
            self.client = client
        elif not self.leader:
            self.client = None
        elif self.server:
            from rl_rollout_sglang.clients import ServerClient

            self.client = ServerClient(adapter["server_url"], timeout=float(adapter.get("server_timeout_s", 600)), tp_size=self.tp)
        else:
            import os

            from rl_rollout_sglang.clients import InProcessClient
            from rl_rollout_sglang.held import SAMPLE_WEIGHTS_ENV

            os.environ.setdefault(SAMPLE_WEIGHTS_ENV, "1")  # the weight-sync check's read-back in SGLang's processes
            args = self.engine_args(extra)
            if self.release_enabled and args.get("enable_weights_cpu_backup"):
                sglang_quirks.retain_weights_backup()  # one pinned host copy for the engine's life, not one a step
            self.client = InProcessClient(args)
        #: whether SGLang keeps a host copy of released weights (the engine's enable_weights_cpu_backup; a server says so
        #: in /server_info, and one that does not is taken to have none)
        server_backup = getattr(self.client, "weights_backup", None) if self.server else None
        self.weights_backup = bool(server_backup) if self.server else bool(extra.get("enable_weights_cpu_backup", True))
        context_len = extra.get("context_length")
        if context_len is None and self.client is not None:
            context_len = self.client.context_length
        self.context_len = int(context_len or config.data.max_prompt_length + config.data.max_response_length)
        self.pad_id = self._pad_id()
        self._shapes = model_shapes(config) if self.leader else None

    # ----------------------------------------------------------------- set-up
    def engine_args(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The ``sglang.Engine`` arguments for this worker (``extra`` wins over the defaults)."""
        cfg, m = self.config, self.config.model
        args: dict[str, Any] = dict(
            model_path=m.path,
            tokenizer_path=m.tokenizer_path or m.path,
            dtype=m.dtype,
            trust_remote_code=m.trust_remote_code,
            tp_size=self.tp,
            random_seed=int(self.context.seed),
            context_length=cfg.data.max_prompt_length + cfg.data.max_response_length,
            skip_tokenizer_init=True,
            log_level="error",
        )
        if getattr(self, "lora_rank", 0):
            from rl_rollout_sglang.lora import lora_engine_args

            args.update(lora_engine_args(cfg, self.device_type))
        if cfg.rollout.expert_parallel_size > 1:  # = TP (the resolver's check): SGLang's MoE TP is then tp_size / ep_size = 1
            args["ep_size"] = int(cfg.rollout.expert_parallel_size)
        if m.override_config:
            args["json_model_override_args"] = json.dumps(dict(m.override_config))
        if m.random_init:
            args["load_format"] = "dummy"  # random weights; the first sync brings the actor's
        if cfg.rollout.precision == "fp8":  # FP8 weights and KV cache (rl_rollout_correction.precision)
            args.update(quantization="fp8", kv_cache_dtype="fp8_e4m3")
        if self.device_type == "cpu":
            sglang_quirks.configure_cpu_environment(self.tp)
            kv_tokens = max(CPU_KV_TOKENS, 2 * args["context_length"])  # the longest request always fits
            args.update(device="cpu", disable_overlap_schedule=True, mem_fraction_static=CPU_MEM_FRACTION, max_total_tokens=kv_tokens)
        else:
            args.update(
                device="cuda",
                base_gpu_id=int(self.context.local_rank),
                mem_fraction_static=float(cfg.rollout.gpu_memory_utilization),
                enable_memory_saver=self.release_enabled,
            )
            if self.release_enabled:  # without it SGLang's resume brings back memory, not the weights (Memory above)
                args["enable_weights_cpu_backup"] = True
        args.update(extra)
        return args

    def _pad_id(self) -> int:
        tok = self.tokenizer()
        for value in (getattr(tok, "pad_token_id", None), getattr(tok, "eos_token_id", None)):
            if value is not None:
                return int(value)
        return 0

    def tokenizer(self):
        """The model's tokenizer (pad id, stop strings), loaded on first use; None when there is none locally."""
        if self._tokenizer is None:
            m = self.config.model
            try:
                from rl_core.modeling import load_tokenizer

                self._tokenizer = load_tokenizer(m.tokenizer_path or m.path, trust_remote_code=m.trust_remote_code)
            except Exception as exc:  # noqa: BLE001 - only stop strings need it; they say so
                self._note_once("no-tokenizer", "no tokenizer at %r (%s): pad id 0, stop strings unavailable", m.tokenizer_path or m.path, exc, level=logging.WARNING)
                self._tokenizer = False
        return self._tokenizer or None

    def _note_once(self, key: str, message: str, *args: Any, level: int = logging.INFO) -> None:
        if key not in self._noted:
            self._noted.add(key)
            log.log(level, message, *args)

    # ------------------------------------------------------------- generation
    def generate(self, batch: Batch, params: SamplingParams) -> Batch:
        out = self._generate(batch, params)
        out.meta.update(self._stats)  # rollout/sleep_s, sleep_freed_gib, wake_s, weight_sync_s ... since the last one
        self._stats = {}
        return out

    def _generate(self, batch: Batch, params: SamplingParams) -> Batch:
        keys = set(batch.tensors.keys())
        if not {"input_ids", "attention_mask"} <= keys:
            raise ValueError(f"generate needs 'input_ids' and 'attention_mask' in the batch; it has {sorted(keys)}")
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError(f"SamplingParams needs n >= 1 and max_new_tokens >= 1, got n={params.n}, max_new_tokens={params.max_new_tokens}")
        if getattr(self, "_closed", False):
            raise RuntimeError("generate called after shutdown()")
        self._resume_if_released()
        prompts = unpadded_prompts(batch.tensors["input_ids"], batch.tensors["attention_mask"])
        check_prompt_lengths(prompts, params.max_new_tokens, self.context_len, self.max_prompt_length)
        if self.client is None:
            return self._placeholder(batch, params)
        greedy = params.greedy or params.temperature <= 0
        if multi_turn_on(self.config):
            return self._generate_multi_turn(batch, params, greedy)
        per_prompt = 1 if greedy else params.n
        if params.seed is not None and not greedy and self.device_type == "cuda":
            self._note_once("gpu-seed", "SGLang honours per-request seeds on GPU only with rollout.engine_kwargs.enable_deterministic_inference=true")
        seeds = request_seeds(len(prompts), per_prompt, None if greedy else params.seed)
        requests = [(prompts[i], sampling_params(params, seeds[i * per_prompt + j])) for i in range(len(prompts)) for j in range(per_prompt)]
        samples = self._answer(requests, bool(params.logprobs) or self.server, shared_prompts=per_prompt > 1)
        if not params.logprobs:
            samples = [Sample(s.token_ids, None, s.finish_reason) for s in samples]
        if params.stop:
            tok = self.tokenizer()
            if tok is None:
                raise ValueError("stop strings need the model's tokenizer, and none was found at model.tokenizer_path / model.path")
            samples = [cut_at_stop(s, params.stop, lambda ids: tok.decode(ids, skip_special_tokens=False)) for s in samples]
        if greedy and params.n > 1:
            samples = [s for s in samples for _ in range(params.n)]
        return build_rollout_batch(batch, samples, params, self.pad_id)

    def _generate_multi_turn(self, batch: Batch, params: SamplingParams, greedy: bool) -> Batch:
        """Agent rollouts (:mod:`rl_core.rollout.multi_turn`): each turn of every active trajectory is one request
        (token ids in, sampled ids and log-probs out; the radix cache keeps a trajectory's earlier turns). Stop
        strings are cut by rl-core (the engine has no tokenizer). Turn ``t``'s request ``i`` gets the seed
        ``seed + t * 1_000_003 + i``."""
        from rl_core.rollout.multi_turn import MultiTurn, eos_token_ids

        tok = self.tokenizer()
        if tok is None:
            raise ValueError("multi-turn rollouts need the model's tokenizer (chat template), and none was found at model.tokenizer_path / model.path")
        if getattr(self, "_multi_turn", None) is None:
            m = self.config.model
            self._multi_turn = MultiTurn(self.config, tok, eos_token_ids(m.path, tok, trust_remote_code=m.trust_remote_code), agent=self.context.agent)
        turn = [0]

        def continue_ids(prompts: list[list[int]], budgets: list[int], stop: tuple[str, ...]) -> list[Sample]:
            base = None if greedy or params.seed is None else int(params.seed) + turn[0] * 1_000_003
            turn[0] += 1
            one = attrs.evolve(params, n=1)
            requests = [(p, sampling_params(attrs.evolve(one, max_new_tokens=int(b)), None if base is None else base + i)) for i, (p, b) in enumerate(zip(prompts, budgets))]
            return self._answer(requests, True)

        return self._multi_turn.generate(batch, params, continue_ids, pad_id=self.pad_id)

    def _answer(self, requests: list[tuple[list[int], dict[str, Any]]], want_lp: bool, shared_prompts: bool = False) -> list[Sample]:
        """SGLang's samples for ``(prompt ids, sampling params)`` requests, at most ``rollout.generation_batch_size`` per call.
        ``shared_prompts``: the requests repeat their prompts (n samples each): with ``share_prefill`` each distinct prompt
        of a call is prefilled once first (SGLang's own ``n`` path does the same), then the samples read it from the cache."""
        per_call = len(requests) if not self.generation_batch_size else max(1, int(self.generation_batch_size))
        samples: list[Sample] = []
        for start in range(0, len(requests), per_call):
            chunk = requests[start : start + per_call]
            lora = None if self._lora_name is None else [self._lora_name] * len(chunk)  # every request names the adapter
            if shared_prompts and self.share_prefill:
                self._prefill_once([p for p, _ in chunk], lora)
            outs = self.client.generate([p for p, _ in chunk], [s for _, s in chunk], want_lp, **({} if lora is None else {"lora_path": lora}))
            if len(outs) != len(chunk):
                raise RuntimeError(f"SGLang answered {len(outs)} of {len(chunk)} requests")
            samples.extend(parse_output(o, want_lp) for o in outs)
        return samples

    def _prefill_once(self, prompts: list[list[int]], lora: list[str] | None) -> None:
        """Each distinct prompt once with no new token: its KV cache enters the radix cache before its samples arrive."""
        distinct = list({tuple(p): p for p in prompts}.values())
        if len(distinct) == len(prompts):
            return
        lora_kw = {} if lora is None else {"lora_path": [lora[0]] * len(distinct)}
        self.client.generate(distinct, [{"max_new_tokens": 0, "temperature": 0.0} for _ in distinct], False, **lora_kw)

    def _placeholder(self, batch: Batch, params: SamplingParams) -> Batch:
        """What a non-leading rank of a TP group returns: all padding, dropped by the loop."""
        rows, R = len(batch) * params.n, params.max_new_tokens
        responses = torch.full((rows, R), self.pad_id, dtype=batch.tensors["input_ids"].dtype)
        mask = torch.zeros((rows, R), dtype=batch.tensors["attention_mask"].dtype)
        lps = torch.zeros((rows, R), dtype=torch.float32) if params.logprobs else None
        return rollout_batch(batch, params.n, responses, mask, lps, meta={EMPTY_META_KEY: 0})

    # ------------------------------------------------------------ weight sync
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named tensors in buckets inside one weight-update session, then flush the cache."""
        start = time.perf_counter()
        self._resume([WEIGHTS])  # the KV cache and the graphs' memory come back after the sync, before the next generation
        if self.client is None:  # a non-leading TP rank: the leader's engine gets the weights
            for _ in weights:
                pass
            return
        sent = nbytes = calls = 0

        def checked(items) -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal sent, nbytes
            for name, tensor in items:
                check_tensor(self._shapes, name, tensor)
                sent += 1
                nbytes += tensor.numel() * tensor.element_size()
                yield name, tensor

        with sglang_quirks.weight_update_session(self.client):
            for bucket in buckets(checked(weights), self.bucket_bytes):
                payload = [(name, self._transportable(t)) for name, t in bucket]
                result = self.client.update_weights_from_tensor(payload, flush_cache=False)
                sglang_quirks.check_result(result, "update_weights_from_tensor")
                calls += 1
                del payload, bucket
        sglang_quirks.check_result(self.client.flush_cache(), "flush_cache")
        if sent:
            self._weights_lost, self._synced = False, True
        self._stats.update({"rollout/weight_sync_s": time.perf_counter() - start, "rollout/weight_sync_gib": nbytes / 2**30,
                            "rollout/weight_sync_calls": calls})
        log.info("weight sync: %d tensors in buckets of %.0f MiB", sent, self.bucket_bytes / 2**20)

    @property
    def adapter_dtype(self) -> torch.dtype | None:
        """The dtype the trainer sends LoRA adapters in: the model's (SGLang computes in it)."""
        dtype = getattr(torch, str(self.config.model.dtype), None)
        return dtype if self.lora_rank and isinstance(dtype, torch.dtype) else None

    def load_adapter(self, tensors: dict[str, torch.Tensor], peft_config: dict[str, Any], version: int) -> None:
        """LoRA adapters (peft names, scale folded in) of policy ``version`` through SGLang's
        ``load_lora_adapter_from_tensors``, the previous version unloaded; every later request names it
        (rl_rollout_sglang.lora). The base weights came once through :meth:`load_weights`."""
        if not self.lora_rank:
            raise RuntimeError("load_adapter: this SGLang engine was started without LoRA (model.lora_rank=0 or rollout.lora_sync=merged)")
        self._resume([WEIGHTS])
        self._check_weights_held("load_adapter")
        if self.client is None:  # a non-leading TP rank: the leader's engine gets them
            return
        from rl_rollout_sglang.lora import adapter_name, peft_config_for_sglang

        if self._lora_name is not None:
            sglang_quirks.check_result(self.client.unload_lora_adapter(self._lora_name), "unload_lora_adapter")
            self._lora_name = None
        start = time.perf_counter()
        name = adapter_name(version)
        payload = {k: (t.detach().contiguous() if t.is_cuda else t.detach().clone()) for k, t in tensors.items()}  # shared with SGLang's process
        sglang_quirks.check_result(self.client.load_lora_adapter_from_tensors(name, payload, peft_config_for_sglang(peft_config)), "load_lora_adapter_from_tensors")
        self._lora_name = name
        sglang_quirks.check_result(self.client.flush_cache(), "flush_cache")
        self._stats.update({"rollout/weight_sync_s": time.perf_counter() - start, "rollout/weight_sync_calls": 1,
                            "rollout/weight_sync_gib": sum(t.numel() * t.element_size() for t in payload.values()) / 2**30})

    def sample_weights(self, positions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """What the engine holds at flat ``positions`` of HF-named weights (rl_core.weight_sync_check), read in SGLang's
        scheduler (rl_rollout_sglang.held); None where it cannot be asked (a non-leading TP rank, TP > 1, a server
        started without the hook)."""
        dtype = getattr(torch, str(self.config.model.dtype), None)
        if self.client is None or not isinstance(dtype, torch.dtype):
            return None
        self._resume([WEIGHTS])  # released weights are unmapped: reading them would fault in SGLang's scheduler
        from rl_rollout_sglang.held import answer, request

        asks_adapter = any(n.endswith((".lora_A.weight", ".lora_B.weight")) for n in positions)
        if asks_adapter and self._lora_name is None:
            return {}  # no adapter loaded: nothing held (the check names each tensor as not reported)
        adapter = self._lora_name if asks_adapter else None
        held = answer(self.client.get_weights_by_name(request(positions, self._shapes, adapter)), positions, dtype)
        if held is None:
            self._note_once("unverified", "weight sync: SGLang cannot report its weights here (TP > 1 or a server without rl-rollout-sglang's hook): not verified", level=logging.WARNING)
        return held

    def _transportable(self, tensor: torch.Tensor) -> torch.Tensor:
        """A tensor safe to share with SGLang's scheduler process.

        CPU tensors are shared by moving their storage into shared memory, which
        would change the caller's tensor in place: send a copy. CUDA tensors go
        by IPC handle, no copy.
        """
        t = tensor.detach()
        return t.contiguous() if t.is_cuda else t.clone(memory_format=torch.contiguous_format)

    # ------------------------------------------------------------- memory
    def sleep(self) -> None:
        if not self.release_enabled:
            why = "on CPU there is no accelerator memory to release" if self.device_type == "cpu" else "rollout.enable_sleep=false"
            self._note_once("no-release", "SGLang keeps its memory between generations (%s): sleep() / wake_up() do nothing", why)
            return
        if self.client is None:  # a non-leading TP rank: the leader's engine releases
            return
        tags = [t for t in self._release_tags() if t not in self._released]  # after a wake-up alone: the weights again
        if tags:  # never an empty list: SGLang reads it as every region
            free_before = self._free_gpu_bytes()
            start = time.perf_counter()
            sglang_quirks.check_result(self.client.release_memory_occupation(tags), "release_memory_occupation")
            self._stats["rollout/sleep_s"] = time.perf_counter() - start
            if free_before is not None:  # device-wide: SGLang's scheduler is another process
                self._stats["rollout/sleep_freed_gib"] = (self._free_gpu_bytes() - free_before) / 2**30
            self._released.update(tags)
            self._weights_lost = self._weights_lost or (WEIGHTS in tags and not self.weights_backup)

    def _release_tags(self) -> list[str]:
        """What a sleep releases: everything, except the weights when they have no host copy and no full weight sync is
        known to follow a wake-up (an engine that never received one, e.g. a reward judge's; LoRA adapter syncs, which
        send the base weights once). Those stay on the GPU, said once."""
        if self.weights_backup or (self._synced and not self.lora_rank):
            return [KV_CACHE, WEIGHTS, CUDA_GRAPH]
        why = "LoRA adapter syncs send the base weights once" if self._synced else "no weight sync has reached this engine"
        self._note_once("weights-stay", "SGLang runs without a host copy of its weights (enable_weights_cpu_backup=false) and %s: "
                        "sleep releases the KV cache and CUDA graph memory only, the weights stay on the GPU", why)
        return [KV_CACHE, CUDA_GRAPH]

    def wake_up(self) -> None:
        """The weights' memory back (for the sync that usually follows); the KV cache and the graphs' memory come back
        before the next generation, so a sync's peak does not hold them (verl's and slime's order)."""
        if not self.release_enabled:
            self.sleep()  # the same one-time note
            return
        self._resume([WEIGHTS])

    def _resume_if_released(self) -> None:
        """Everything released back, before a generation; refused when the weights it would run on were dropped."""
        self._check_weights_held("generate")
        self._resume([KV_CACHE, WEIGHTS, CUDA_GRAPH])  # one call: SGLang resumes in its own order

    def _check_weights_held(self, what: str) -> None:
        if self._weights_lost:
            raise RuntimeError(
                f"{what}: SGLang released this engine's weights without a host copy (enable_weights_cpu_backup=false) and no "
                "weight sync has loaded them since: it would run on garbage. Sync the weights first (load_weights), or keep "
                "the host copy (remove rollout.engine_kwargs.enable_weights_cpu_backup=false) for an engine that generates "
                "without a sync after each sleep"
            )

    def _resume(self, tags: list[str]) -> None:
        """Resume those of ``tags`` that are released (one call); the seconds add to ``rollout/wake_s``."""
        wanted = [t for t in tags if t in self._released]
        if not wanted:  # never an empty list: SGLang reads it as every region (and refuses one not released)
            return
        start = time.perf_counter()
        if torch.cuda.is_available():
            # the colocated trainer's freed blocks stay in this process's torch cache, out of SGLang's reach (its
            # scheduler is another process): a resume after a large update could run out of memory otherwise
            torch.cuda.empty_cache()
        sglang_quirks.check_result(self.client.resume_memory_occupation(wanted), "resume_memory_occupation")
        self._released.difference_update(wanted)
        self._stats["rollout/wake_s"] = self._stats.get("rollout/wake_s", 0.0) + time.perf_counter() - start

    def _free_gpu_bytes(self) -> int | None:
        """Free memory of this worker's GPU (None without CUDA here, e.g. tests with a recording client)."""
        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.mem_get_info(torch.device(self.context.device))[0])

    def shutdown(self) -> None:
        client, self.client = getattr(self, "client", None), None
        self.leader = False  # nothing is generated after shutdown
        self._closed = True
        if client is not None and self._owns_client:
            try:
                client.shutdown()
            except Exception as exc:  # noqa: BLE001 - shutting down must not mask the caller's error
                log.warning("SGLang shutdown raised %s: %s", type(exc).__name__, exc)


def build(config, context: WorkerContext) -> SGLangRollout:
    """The ``sglang`` card's factory: ``build(config, context) -> RolloutEngine``."""
    return SGLangRollout(config, context)

