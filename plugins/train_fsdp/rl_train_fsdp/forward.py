"""The FSDP backend's forwards: one micro-batch to :class:`~rl_core.train_engine.backend.Heads` (mixed into
:class:`rl_train_fsdp.engine.FSDPBackend`).

MoE routing replay (``actor.router_replay``, rl-routing-replay) around the forward; the training forward's saved
activations in host memory (:mod:`rl_train_fsdp.activations`); then, by what the micro-batch holds: prompts with
images (rl-multimodal, one plain forward), packed sequences (rl_train_fsdp.packing, Ulysses sequence
parallelism: :mod:`rl_train_fsdp.ulysses`), the critic's values, or the LM head in chunks of tokens
(rl_core.logprobs: no full-vocab float32 logits).
"""

from __future__ import annotations

import warnings

import attrs
import torch
from rl_multimodal import forward as multimodal
from rl_core.logprobs import DEFAULT_CHUNK as DEFAULT_LOGPROB_CHUNK
from rl_core.logprobs import forward_response_chunked
from rl_core.modeling import forward_values
from rl_train_fsdp import packing
from rl_core.train_engine.backend import Heads

from rl_train_fsdp import activations


class Forwards:
    """:meth:`forward` and the paths it takes; reads the backend's model, role, config and its packing / replay state."""

    def forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool) -> Heads:
        rr = self.router_replay
        if rr is None:
            return self._forward_offloaded(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
        # routing replay (rl-routing-replay): the batch's routed_experts (R3: the rollout's; R2: the old-log-prob
        # pass's) are forced in this forward and kept for its backward; R2's old-log-prob pass records them
        mode = self.config.actor.router_replay
        if "routed_experts" in x:
            rr.replay(x["routed_experts"], x["attention_mask"])
        elif mode == "R3":
            raise ValueError("actor.router_replay=R3 but the batch has no routed_experts: the rollout engine returned none "
                             "(rollout.return_routed_experts=true with a rollout backend that records them)")
        elif not training:  # R2's old-log-prob pass
            with rr.recording():
                heads = self._forward_offloaded(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
            return attrs.evolve(heads, routed_experts=rr.recorded_layout(x["attention_mask"]))
        # else R2 on-policy without an old-log-prob pass: this forward is the one R2 would record; it routes natively
        try:
            return self._forward_offloaded(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
        finally:
            if not training:
                rr.stop()

    def _forward_offloaded(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool) -> Heads:
        hooks = activations.offloaded(self.activation_offload and training, self.device)
        if hooks is None:
            return self._forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)
        self.last_activations = hooks
        with hooks:
            return self._forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)

    def _forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool) -> Heads:
        chunk = self.config.model.logprob_chunk_size
        chunk = (DEFAULT_LOGPROB_CHUNK if self.device.type != "cpu" else 0) if chunk is None else chunk
        if self.config.rollout.exact and self.role != "critic":  # the Plan's log-prob forward (rl-exact): the hf rollout's, bit for bit
            lp, ent = self.exact_forward(
                self.model, x["input_ids"], x["attention_mask"], x["responses"], temperature=temperature, with_entropy=with_entropy,
                entropy_grad=entropy_grad, compute_dtype=self.autocast_dtype,  # unsharded bf16: the weights cast, not autocast
                lockstep=self.sharded,  # FSDP2 gathers in every forward: as many per rank as the rank with the most rows
            )
            return Heads(log_probs=lp, entropy=ent)
        if multimodal.has_images(x.get(multimodal.FIELD)):  # prompts with images (rl-multimodal): one plain forward
            return self._forward_images(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)
        if self.packed and not packing.run_padded(x["attention_mask"], chosen_by_default=self.packed_by_default, sequence_parallel=self.seq_parallel is not None):
            heads = self._forward_packed(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, chunk=chunk)
            if heads is not None:
                return heads
        if self.role == "critic":
            with warnings.catch_warnings():
                # FSDP2 warns that the token-classification output is a view; nothing here writes to it in place.
                warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
                return Heads(values=forward_values(self.model, x["input_ids"], x["attention_mask"], x["position_ids"], x["responses"].shape[1]))
        # the LM head in chunks of tokens (rl_core.logprobs): no full-vocab float32 logits; model.logprob_chunk_size
        lp, ent = forward_response_chunked(
            self.model, x["input_ids"], x["attention_mask"], x["position_ids"], x["responses"],
            temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, share_prompts=self.share_prompts,
            chunk_size=chunk,
        )
        return Heads(log_probs=lp, entropy=ent)

    @property
    def exact_forward(self):
        """rollout.exact: the Plan's log-prob forward (``WorkerContext.log_prob_forward``, a LogProbForwardCard's)."""
        forward = self.context.log_prob_forward
        if forward is None:
            raise RuntimeError("rollout.exact is true but this fsdp backend was built without a log-prob forward (WorkerContext.log_prob_forward "
                               "is None): build engines from the resolved Plan (Plan.log_prob_forward, from rl-exact: pip install rl-exact)")
        return forward

    def _forward_images(self, x: dict, *, temperature: float, with_entropy: bool, entropy_grad: bool) -> Heads:
        if self.seq_parallel is not None or self.pad_to_length:  # (a VLM is never packed: packing.can_pack)
            raise ValueError("the prompts carry images, which packed sequences do not carry yet: set actor.ulysses_sequence_parallel_size=1 "
                             "and actor.pad_to_length=false (padded batches)")
        if self.role == "critic":
            raise ValueError("the prompts carry images, which the critic's forward does not read yet: use a critic-free estimator "
                             "(algorithm.adv_estimator=grpo, rloo, ...)")
        lp, ent = multimodal.forward_response(
            self.model, x["input_ids"], x["attention_mask"], x["responses"], x[multimodal.FIELD],
            temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad,
        )
        return Heads(log_probs=lp, entropy=ent)

    def _forward_packed(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, chunk) -> Heads | None:
        sp = self.seq_parallel
        actor = self.config.actor  # actor.pad_to_length: fixed row lengths, in multiples of the bucket
        pad_to = packing.row_multiple(actor.fsdp_config.pad_to_length_bucket if actor.pad_to_length else None, sp.size if sp else 1)
        p = packing.pack(x["input_ids"], x["attention_mask"], x["position_ids"], x["responses"].shape[1], pad_to=pad_to)
        if p is None:
            if sp is not None:
                raise ValueError("sequence parallelism needs each response right after its prompt (no padding between them)")
            return None
        if self.role == "critic":
            return Heads(values=packing.forward_values_packed(self.model, p, sp))
        out = packing.forward_log_probs_packed(
            self.model, p, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, chunk_size=chunk, shard=sp,
        )
        if out is None:
            if sp is not None:
                raise ValueError("sequence parallelism needs a plain bias-free LM head (the chunked log-prob path)")
            return None
        return Heads(log_probs=out[0], entropy=out[1])
