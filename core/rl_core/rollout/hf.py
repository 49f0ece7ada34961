"""The built-in ``hf`` rollout: generation with a plain ``transformers`` model (CPU included), the reference backend.

Our own decode loop, not ``model.generate``: exactly ``SamplingParams``, log-probs from the logits sampled from (before
top-k / top-p, the trainer's positions), a private seeded generator. Sampling, stops, images, routing replay, weight
and adapter sync: docs/design.md ("The hf rollout"). On CUDA with rl-hf-decode, its static-cache decoder runs
(plugins/hf_decode/README.md); stop strings and images use the plain loop.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
from typing import Any, Iterable

import torch

from rl_core.backends import SamplingParams, WorkerContext
from rl_core.batch import Batch
from rl_core.util.hf_cache import cache_keyword, output_cache
from rl_core.modeling import load_causal_lm, load_tokenizer, position_ids_from_mask, torch_dtype
from rl_core.rollout.output import rollout_batch
from rl_core.rollout.samples import check_prompt_lengths, unpadded_prompts
from rl_core.rollout.sleep_policy import keeps_through_sleep, threshold_of
from rl_core.rollout.multi_turn import Generated, multi_turn_on, require_agent, unique_ids
from rl_core.weight_sync_check import sample_state

#: ``generate``'s meta: the prompt tokens it prefilled (padding excluded; ``n`` times less with ``share_prefill``)
PREFILL_TOKENS = "rollout/prefill_tokens"


class HFRolloutEngine:
    """Follows :class:`rl_core.backends.RolloutEngine`."""

    def __init__(self, config, context: WorkerContext, *, model: torch.nn.Module | None = None, tokenizer: Any = None) -> None:
        self.config = config
        self.context = context
        self.device = context.torch_device
        mcfg = config.model
        self.model = model if model is not None else load_causal_lm(
            mcfg.path,
            dtype=torch_dtype(mcfg.dtype),
            device=self.device,
            random_init=mcfg.random_init,
            override_config=mcfg.override_config,
            trust_remote_code=mcfg.trust_remote_code,
            seed=context.seed,
            init_device=self.device.type,
        )
        self.model.eval()
        self.model.requires_grad_(False)
        # rollout.exact (docs/exact.md): the trainer's attention, the one its model loaded with
        attn = config.rollout.engine_kwargs.get("attn_implementation", "eager" if self.device.type == "cpu" and not config.rollout.exact else None)
        if attn and hasattr(self.model, "set_attn_implementation"):
            self.model.set_attn_implementation(attn)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(
            mcfg.tokenizer_path or mcfg.path, trust_remote_code=mcfg.trust_remote_code, key="model.tokenizer_path" if mcfg.tokenizer_path else "model.path"
        )
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = getattr(self.model.generation_config, "pad_token_id", None) if getattr(self.model, "generation_config", None) else None
        if pad is None:
            pad = self.eos_ids[0] if self.eos_ids else 0
        self.pad_id = int(pad)
        self.max_prompt_length = config.data.max_prompt_length
        self.generation_batch_size = config.rollout.generation_batch_size
        self.share_weights = bool(config.rollout.engine_kwargs.get("share_weights", False))
        self.share_prefill = share_prefill(config.rollout.engine_kwargs)
        self.prefill_tokens = 0
        self.sleep_threshold = threshold_of(config.rollout.engine_kwargs)
        self._offloaded = False
        # rollout.return_routed_experts (MoE routing replay R3): each token's top-k experts recorded (rl-routing-replay's feature)
        self.routing = context.feature("routing_replay", "rollout.return_routed_experts").rollout_recorder(self.model) \
            if config.rollout.return_routed_experts else None
        self.static = self._static_decoder(config.rollout.engine_kwargs) if self.routing is None else None
        # LoRA adapter sync (rollout.lora_sync auto / adapter): adapters merged in place (rl-lora's rollout_adapters hook, while
        # LoRA is on; without it load_adapter says what is missing)
        make = context.features.hook(config, "rollout_adapters") if hasattr(context.features, "hook") and config.rollout.lora_sync != "merged" else None
        self.lora = make() if make is not None else None

    def _static_decoder(self, kwargs) -> Any:
        """rl-hf-decode's static-cache decoder where it runs (default: on CUDA); None: the plain loop."""
        wanted = kwargs.get("static_decode", None)
        if wanted is False or (wanted is None and self.device.type != "cuda"):
            return None
        if wanted:
            decode = self.context.feature("hf_decode", "rollout.engine_kwargs.static_decode=true")
        else:  # the default on CUDA: the plain loop without the package (`rlcore check` warns)
            decode = self.context.features.get("hf_decode") if self.context.features is not None else None
            if decode is None:
                return None
        return decode.decoder(self.model, kwargs, share_weights=self.share_weights, generation_batch_size=self.generation_batch_size)

    # ------------------------------------------------------------- generation
    def generate(self, batch: Batch, params: SamplingParams) -> Batch:
        if "input_ids" not in batch.tensors or "attention_mask" not in batch.tensors:
            raise ValueError(f"generate needs 'input_ids' and 'attention_mask' in the batch; it has {sorted(batch.tensors.keys())}")
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError(f"SamplingParams needs n >= 1 and max_new_tokens >= 1, got n={params.n}, max_new_tokens={params.max_new_tokens}")
        self.wake_up()
        input_ids = batch.tensors["input_ids"]
        attention_mask = batch.tensors["attention_mask"]
        self._check_prompts(input_ids, attention_mask)
        n, R = params.n, params.max_new_tokens
        greedy = params.greedy or params.temperature <= 0
        generator = None
        if params.seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(int(params.seed))
        mm = batch.non_tensors.get("multi_modal_inputs")  # per row, the prompt's image tensors (rl-multimodal; {}: none)
        vision = self.context.feature("multimodal", "prompts with images").for_rollout(self.config) if mm is not None and any(bool(d) for d in mm) else None
        if multi_turn_on(self.config):
            return self._generate_agentic(batch, params, generator)
        per_chunk = len(batch) if not self.generation_batch_size else max(1, self.generation_batch_size // n)
        stop = tuple(s for s in params.stop if s)
        self.prefill_tokens = 0

        responses, lengths, log_probs, routed = [], [], [], []
        for start in range(0, len(batch), per_chunk):
            ids = input_ids[start : start + per_chunk].to(self.device)
            mask = attention_mask[start : start + per_chunk].to(self.device)
            images = vision.to_device(list(mm[start : start + per_chunk]), self.device) if vision is not None else None
            with self.routing.recording(routed, len(ids), ids.shape[1], n, R) if self.routing is not None else contextlib.nullcontext():
                r, length, lp = self._decode(ids, mask, n, R, greedy=greedy, params=params, generator=generator, stop=stop, images=images)
            responses.append(r.cpu())
            lengths.append(length.cpu())
            if params.logprobs:
                log_probs.append(lp.cpu())
        responses_t = torch.cat(responses)
        lengths_t = torch.cat(lengths)

        response_mask = (torch.arange(R).unsqueeze(0) < lengths_t.unsqueeze(1)).to(attention_mask.dtype)
        out = rollout_batch(batch, n, responses_t, response_mask, torch.cat(log_probs) if params.logprobs else None)
        if params.logprobs and self.config.rollout.exact:  # the trainer's per-sequence forward's log-probs (LogProbForwardCard)
            out["rollout_log_probs"] = self._exact_log_probs(out, temperature=1.0 if greedy else params.temperature)
        out.meta[PREFILL_TOKENS] = self.prefill_tokens
        if routed:  # [rows, P + R, layers, k]; padding and the unrouted last token: -1
            out["routed_experts"] = self.routing.routed_experts(routed, out["attention_mask"])
        return out

    @torch.no_grad()
    def _exact_log_probs(self, out: Batch, *, temperature: float) -> torch.Tensor:
        """rollout.exact: the Plan's log-prob forward (``WorkerContext.log_prob_forward``) over ``out``'s sequences, 0 past each response."""
        forward = self.context.log_prob_forward
        if forward is None:
            raise RuntimeError("rollout.exact is true but this hf rollout was built without a log-prob forward (WorkerContext.log_prob_forward "
                               "is None): build engines from the resolved Plan (Plan.log_prob_forward, from rl-exact: pip install rl-exact)")
        lp, _ = forward(self.model, *(out[k].to(self.device) for k in ("input_ids", "attention_mask", "responses")), temperature=temperature)
        return lp.cpu() * out["response_mask"].to(lp.dtype)

    def _generate_agentic(self, batch: Batch, params: SamplingParams, generator) -> Batch:
        """Multi-turn rollouts (the agent runtime of ``WorkerContext.agent``): every active loop's turn decoded together."""
        agent = require_agent(getattr(self.context, "agent", None), "the hf rollout engine")
        if getattr(self, "_agent_setup", None) is None:
            self._agent_setup = agent.setup(self.tokenizer)
        greedy = params.greedy or params.temperature <= 0
        return agent.rollout(
            self._agent_setup, batch, params, lambda prompts, budgets, stop: self.decode_requests(prompts, budgets, stop, params=params, greedy=greedy, generator=generator),
            pad_id=self.pad_id, eos_ids=self.eos_ids,
        )

    def decode_requests(self, prompts: list[list[int]], budgets: list[int], stop: tuple[str, ...], *, params: SamplingParams, greedy: bool, generator) -> list:
        """One turn of many trajectories: each prompt (token ids) continued for at most its budget, in chunks of
        ``rollout.generation_batch_size``; a :class:`rl_core.rollout.multi_turn.Generated` per prompt."""
        per_chunk = self.generation_batch_size or len(prompts)
        out: list[Generated] = []
        eos = set(self.eos_ids)
        for start in range(0, len(prompts), per_chunk):
            chunk, chunk_budgets = prompts[start : start + per_chunk], budgets[start : start + per_chunk]
            width = max(len(p) for p in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, p in enumerate(chunk):
                ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                mask[i, width - len(p) :] = 1
            R = max(chunk_budgets)
            r, length, lp = self._decode(ids.to(self.device), mask.to(self.device), 1, R, greedy=greedy, params=params, generator=generator, stop=stop)
            r, length = r.cpu(), length.cpu()
            lp = lp.cpu() if lp is not None else None
            for i, budget in enumerate(chunk_budgets):
                k = min(int(length[i]), budget)
                tokens = tuple(r[i, :k].tolist())
                if tokens and tokens[-1] in eos:
                    finish = "eos"
                elif int(length[i]) <= budget and int(length[i]) < R:
                    finish = "stop"
                else:
                    finish = "length"
                out.append(Generated(tokens, tuple(lp[i, :k].tolist()) if lp is not None else None, finish))
        return out

    def _check_prompts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Every prompt has a token and at most ``data.max_prompt_length`` of them (``PromptLengthError``)."""
        check_prompt_lengths(unpadded_prompts(input_ids, attention_mask), 0, math.inf, self.max_prompt_length)

    @torch.no_grad()
    def _decode(self, ids, mask, n, R, *, greedy, params, generator, stop, images=None):
        """Decode ``n`` responses for each prompt row, the prompt prefilled once and its cache repeated; ``images`` (the
        rows' ``multi_modal_inputs``): responses continue from each prompt's largest 3-D position."""
        static = self.static is not None and not stop and images is None
        if n > 1 and (not self.share_prefill or (not static and not _cache_repeats(self.model))):
            # sharing off, or a cache that cannot be repeated (linear-attention layers: Qwen3.5): each sample's copy
            ids, mask = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0)
            images = [d for d in images for _ in range(n)] if images is not None else None
            n = 1
        self.prefill_tokens += int(mask.sum())
        temperature = 1.0 if greedy else float(params.temperature)
        eos = torch.tensor(self.eos_ids, dtype=ids.dtype, device=ids.device)
        if static:
            def sample(logits):
                return _sample(logits, greedy=greedy, temperature=temperature, top_k=params.top_k, top_p=params.top_p, generator=generator, want_log_prob=params.logprobs)

            sampling = dict(greedy=greedy, temperature=temperature, top_k=params.top_k, top_p=params.top_p, generator=generator)
            return self.static.decode(ids, mask, n, R, sample=sample, pad_id=self.pad_id, eos=eos, want_log_probs=params.logprobs,
                                      sampling=sampling)
        model = self.model
        vision = self.context.feature("multimodal", "prompts with images") if images is not None else None
        # with images rl-multimodal's keyword arguments for them and [b, 1]: each prompt's largest position
        kw, pos = vision.prefill(model, ids, mask, images) if vision is not None else ({}, position_ids_from_mask(mask))
        out = model(input_ids=ids, attention_mask=mask, position_ids=kw.pop("position_ids", pos), use_cache=True, logits_to_keep=1, **kw)
        cache = output_cache(out)
        cache_kw = cache_keyword(model) or "past_key_values"
        logits = out.logits[:, -1].float()
        del out
        if n > 1:
            cache.batch_repeat_interleave(n)
            ids, mask, pos, logits = (t.repeat_interleave(n, dim=0) for t in (ids, mask, pos, logits))
        b = ids.shape[0]
        next_pos = pos[:, -1] + 1
        responses = torch.full((b, R), self.pad_id, dtype=ids.dtype, device=ids.device)
        log_probs = torch.zeros((b, R), dtype=torch.float32, device=ids.device) if params.logprobs else None
        lengths = torch.full((b,), R, dtype=torch.long, device=ids.device)
        done = torch.zeros(b, dtype=torch.bool, device=ids.device)
        ones = torch.ones((b, 1), dtype=mask.dtype, device=mask.device)
        banned = torch.tensor(vision.vision_token_ids(model), dtype=torch.long, device=ids.device) if vision is not None else None
        for t in range(R):
            token, lp = _sample(logits, greedy=greedy, temperature=temperature, top_k=params.top_k, top_p=params.top_p, generator=generator,
                                want_log_prob=log_probs is not None, banned=banned)
            token = torch.where(done, torch.full_like(token, self.pad_id), token)
            responses[:, t] = token
            if log_probs is not None:
                log_probs[:, t] = torch.where(done, torch.zeros_like(lp), lp)
            finished = ~done & torch.isin(token, eos)
            if stop:
                finished |= ~done & self._stop_hit(responses, t, stop)
            lengths = torch.where(finished, torch.full_like(lengths, t + 1), lengths)
            done |= finished
            if t == R - 1 or bool(done.all()):
                break
            mask = torch.cat([mask, ones], dim=1)
            out = model(input_ids=token.unsqueeze(1), attention_mask=mask, position_ids=next_pos.unsqueeze(1), use_cache=True, **{cache_kw: cache})
            cache = output_cache(out)
            logits = out.logits[:, -1].float()
            del out
            next_pos = next_pos + 1
        return responses, lengths, log_probs

    def _stop_hit(self, responses: torch.Tensor, t: int, stop: tuple[str, ...]) -> torch.Tensor:
        """Rows whose response text ends with a stop string completed by token ``t``."""
        window = 2 * max(len(s) for s in stop) + 2  # tokens; generous (a token can be a partial character)
        lo = max(0, t + 1 - window)
        hit = torch.zeros(responses.shape[0], dtype=torch.bool, device=responses.device)
        for i in range(responses.shape[0]):
            text = self.tokenizer.decode(responses[i, lo : t + 1].tolist(), skip_special_tokens=False)
            before = self.tokenizer.decode(responses[i, lo:t].tolist(), skip_special_tokens=False) if t > lo else ""
            hit[i] = any(s in text and s not in before for s in stop)
        return hit

    # ------------------------------------------------------------ weight sync
    @torch.no_grad()
    def load_base_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """LoRA adapter sync: the trainer's frozen base, once; same-device tensors are kept (no copy) as the base it
        merges adapters onto."""
        self.load_weights(weights, keep_base=True)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], *, keep_base: bool = False) -> None:
        """Copy HF-named tensors into the existing parameters; every one must come once (tied weights: either name).
        An unknown name or a wrong shape raises, the tensors before it already written."""
        self.wake_up()
        targets = dict(self.model.state_dict(keep_vars=True))
        written: set[int] = set()
        for name, src in weights:
            dst = targets.get(name)
            if dst is None:
                known = ", ".join(list(targets)[:4])
                raise KeyError(
                    f"load_weights: unexpected weight {name!r}: the rollout model ({type(self.model).__name__}) has no tensor of that name "
                    f"(its names look like {known}, ...); is the trainer's model the same architecture?"
                )
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"load_weights: weight {name!r} has shape {tuple(src.shape)} but the rollout model's is {tuple(dst.shape)}")
            written.add(id(dst))
            if self.lora is not None:
                self.lora.remember(name, src if keep_base else None, dst)
            if src.data_ptr() == dst.data_ptr() and src.dtype == dst.dtype and src.device == dst.device:
                continue
            if self.share_weights and src.device == dst.device and src.dtype == dst.dtype and src.is_contiguous():
                dst.data = src.detach()
                if self.static is not None:  # captured graphs read the old storage
                    self.static.reset()
            else:
                dst.data.copy_(src, non_blocking=True)
        missing = [n for n, t in targets.items() if id(t) not in written]
        if missing:
            shown = ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else "")
            raise ValueError(f"load_weights: {len(missing)} of the rollout model's weights were not provided: {shown}")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def load_adapter(self, tensors: dict[str, torch.Tensor], peft_config: dict[str, Any], version: int) -> None:
        """LoRA adapters (peft names, ``lora_A`` / ``lora_B``) merged in place into the targeted weights, on top of
        the base :meth:`load_weights` got once (rl-lora's ``rl_lora.merge``)."""
        if self.lora is None:
            raise RuntimeError("load_adapter: this hf rollout was built without LoRA adapter sync: model.lora_rank=0, rollout.lora_sync=merged, "
                               "or no rollout_adapters hook in its WorkerContext.features (a plan's worker hands the plan's; rl-lora provides "
                               "it: pip install rl-lora)")
        self.wake_up()
        if self.lora.load(self.model.state_dict(keep_vars=True), tensors, peft_config, version) and self.static is not None:
            self.static.reset()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def merged_weights(self) -> dict[str, int]:
        """The weights the last :meth:`load_adapter` merged into (HF names -> sizes), for the sync check."""
        return self.lora.merged_numels() if self.lora is not None else {}

    @torch.no_grad()
    def sample_weights(self, positions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The elements at flat ``positions`` of each named weight as held here (rl_core.weight_sync_check), with LoRA
        adapter sync also the merged adapters."""
        self.wake_up()
        held = self.model.state_dict(keep_vars=True)
        if self.lora is not None:
            held = {**held, **self.lora.adapter}
        return sample_state(held.items(), positions)

    # ------------------------------------------------------------- memory
    def sleep(self) -> None:
        """On CUDA move the weights to host memory and release the caches, unless they hold at most
        ``engine_kwargs.sleep_threshold`` of the device (:mod:`rl_core.rollout.sleep_policy`); a no-op on CPU."""
        if self.device.type != "cuda" or self._offloaded:
            return
        if keeps_through_sleep(self.held_bytes(), torch.cuda.get_device_properties(self.device).total_memory, self.sleep_threshold):
            return
        if self.static is not None:  # its graphs, caches and packed projections point at device memory being released
            self.static.release()
        if self.lora is not None:  # LoRA: the merged weights are rebuilt at wake-up, the trainer's frozen ones pointed at
            self.lora.sleep(self.model.state_dict(keep_vars=True))
        self.model.to("cpu")
        self._offloaded = True
        torch.cuda.empty_cache()

    def held_bytes(self) -> int:
        """Device memory this engine holds: its weights and the static decoder's caches."""
        tensors = itertools.chain(self.model.parameters(), self.model.buffers())  # tied weights once
        weights = sum(t.numel() * t.element_size() for t in tensors if t.device.type != "cpu")
        return weights + (self.static.cache_bytes() if self.static is not None else 0)

    def wake_up(self) -> None:
        if not self._offloaded:
            return
        self.model.to(self.device)
        if self.lora is not None:
            self.lora.wake(self.model.state_dict(keep_vars=True), self.device)
        self._offloaded = False
        if self.static is not None:
            self.static.reset()

    def shutdown(self) -> None:
        self.model = None
        self.static = None  # it holds the model and its caches too
        if self.device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()


def share_prefill(engine_kwargs: dict[str, Any] | None) -> bool:
    """``engine_kwargs.share_prefill`` (default true): a prompt's ``n`` samples share one prefill, its KV cache repeated
    (the same tokens: the same logits and sampler, in the same row order)."""
    value = (engine_kwargs or {}).get("share_prefill", True)
    if not isinstance(value, bool):
        raise ValueError(f"rollout.engine_kwargs.share_prefill must be true or false, got {value!r}")
    return value


def _eos_ids(model, tokenizer) -> list[int]:
    generation = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return unique_ids([generation, getattr(model.config, "eos_token_id", None), tokenizer.eos_token_id])


def _cache_repeats(model) -> bool:
    """Whether the model's KV cache can be repeated per sample (transformers' attention caches can; linear-attention
    (recurrent) layers' states cannot: Qwen3.5, Qwen3-Next, ...)."""
    cfg = getattr(model.config, "get_text_config", lambda: model.config)()
    return set(getattr(cfg, "layer_types", None) or ()) <= {"full_attention", "sliding_attention", "chunked_attention"}


def _sample(logits: torch.Tensor, *, greedy: bool, temperature: float, top_k: int, top_p: float, generator, want_log_prob: bool,
            banned: torch.Tensor | None = None):
    """``(token [b], log_prob [b] or None)`` from float32 ``logits [b, V]`` (see the module docstring); ``banned`` ids
    (a VLM's image / video pad tokens) are never drawn."""
    scaled = logits if temperature == 1.0 else logits / temperature
    pick = scaled if banned is None else scaled.index_fill(-1, banned, float("-inf"))
    if greedy:
        token = pick.argmax(dim=-1)
    else:
        filtered = pick
        vocab = filtered.shape[-1]
        if top_k is not None and 0 < top_k < vocab:
            kth = torch.topk(filtered, top_k, dim=-1).values[:, -1:]
            filtered = filtered.masked_fill(filtered < kth, float("-inf"))
        if top_p is not None and top_p < 1.0:
            sorted_logits, order = torch.sort(filtered, dim=-1, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            before = probs.cumsum(dim=-1) - probs  # mass of the better tokens
            drop_sorted = before >= top_p  # the best token always stays
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            filtered = filtered.masked_fill(drop, float("-inf"))
        token = _inverse_cdf_sample(torch.softmax(filtered, dim=-1), generator)
    log_prob = None
    if want_log_prob:
        log_prob = scaled.gather(-1, token.unsqueeze(1)).squeeze(1) - torch.logsumexp(scaled, dim=-1)
    return token, log_prob


def _inverse_cdf_sample(probs: torch.Tensor, generator) -> torch.Tensor:
    """One token per row of ``probs [b, V]``: the first index whose cumulative mass exceeds a uniform draw (exact;
    one uniform per row, where ``torch.multinomial`` draws one per vocabulary entry, far slower on CPU)."""
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)


def factory(config, context: WorkerContext) -> HFRolloutEngine:
    """The ``hf`` card's factory: ``factory(config, context) -> RolloutEngine``."""
    return HFRolloutEngine(config, context)
