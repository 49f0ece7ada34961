"""The Megatron backend's forward and backward through this rank's pipeline stage (mixed into
:class:`rl_train_megatron.engine.MegatronBackend`).

Every forward runs this rank's pipeline stage (:meth:`Schedule._run_stage`: each model chunk in turn, hidden states
received from the previous (virtual) stage and sent to the next, :mod:`rl_train_megatron.pipeline`); the heads
(log-probs, values) run on the last stage. Inference results are broadcast from the last stage; the update
back-propagates stage by stage. On the way: trailing padding columns trimmed, the micro-batch padded to the same tokens
over the expert-parallel group, this context-parallel rank's columns (:mod:`rl_train_megatron.context_parallel`),
sequence parallelism's padding (:mod:`rl_train_megatron.sequence_parallel`) and MoE routing replay
(:mod:`rl_train_megatron.router_replay`).
"""

from __future__ import annotations

import attrs
import torch
from rl_core.logprobs import DEFAULT_CHUNK as DEFAULT_LOGPROB_CHUNK
from rl_core.logprobs import chunked_log_probs
from rl_core.modeling import response_columns_in_use
from rl_core.train_engine.backend import Heads

from rl_train_megatron import context_parallel as cp_mod
from rl_train_megatron import model as mmodel
from rl_train_megatron import parallel
from rl_train_megatron import router_replay as rr_mod
from rl_train_megatron import sequence_parallel as seq_par


class Schedule:
    """:meth:`forward` / :meth:`backward` (TrainBackend's) over the backend's chunks, pipe and topology."""

    def _trim(self, x: dict[str, torch.Tensor], R: int) -> tuple[dict[str, torch.Tensor], int]:
        """Drop trailing response columns that are padding in every row (they hold 0 in the results)."""
        cut = R - response_columns_in_use(x["attention_mask"], R)
        if not cut:
            return x, 0
        y = dict(x)
        for k in ("input_ids", "attention_mask", "position_ids"):
            y[k] = x[k][:, :-cut]
        y["responses"] = x["responses"][:, :-cut]
        return y, cut

    def _same_tokens_over_ep(self, y: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Expert parallelism: megatron-core's all-gather dispatcher needs the same number of tokens on every rank of the
        expert-parallel group, so the micro-batch is padded to the group's largest (rows at the bottom, columns on the
        left, all masked). Their positions go through the routers like padding does (their losses count them)."""
        b, s = y["input_ids"].shape
        size = parallel.all_reduce(torch.tensor([b, s], device=self.device), "max", parallel.ep_group())
        B, S = int(size[0]), int(size[1])
        if (B, S) == (b, s):
            return y
        out = {}
        for k, v in y.items():
            if k in ("input_ids", "attention_mask", "position_ids"):
                v = torch.nn.functional.pad(v, (S - s, 0))
            if v.dim() >= 1 and v.shape[0] == b and B > b:
                v = torch.cat([v, v.new_zeros((B - b, *v.shape[1:]))])
            out[k] = v
        return out

    def _split(self, y: dict[str, torch.Tensor]) -> cp_mod.SeqSplit | None:
        """This CP rank's columns of the batch (None without context parallelism); with sequence parallelism each CP rank's
        columns are a multiple of TP (the sequence is right-padded to a multiple of 2 x CP x TP)."""
        if self.topo.cp == 1:
            return None
        return cp_mod.SeqSplit.of(y["input_ids"].shape[1], self.topo.cp, self.topo.cp_rank, self.device, multiple=self.topo.tp if self.sp else 1)

    def _run_stage(self, y: dict[str, torch.Tensor], split: cp_mod.SeqSplit | None = None) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        """Per model chunk ``(input hidden leaf or None, the chunk's output [s, b, h])``; each output is sent on to the
        next (virtual) stage. With CP (``split``) ``s`` is this rank's columns."""
        ids, attention, pos, mask = y["input_ids"], y["attention_mask"], y["position_ids"], None
        if split is not None:
            ids, pos, mask = split.local(ids), split.local(pos), split.mask(attention)
        b, s = ids.shape
        s = s // self.topo.tp if self.sp else s  # sequence parallelism: this rank's share of the columns
        out = []
        for v, chunk in enumerate(self.chunks):
            h_in = self.pipe.recv_forward((s, b, self.shape.hidden), self.device) if self.pipe.receives(v) else None
            h = mmodel.stage_hidden(chunk, ids, attention, pos, h_in, mask=mask)
            if self.pipe.sends(v):
                self.pipe.send_forward(h)
            out.append((h_in, h))
        return out

    def _log_probs_head(self, h: torch.Tensor, y, temperature: float, with_entropy: bool, entropy_grad: bool, cut: int, split=None):
        R = y["responses"].shape[1]
        chunk = self._logprob_chunk()
        if chunk and split is None and self.topo.tp == 1:  # the fsdp backend's chunked LM head (rl_core.logprobs): no [b, R, V] fp32 logits
            model = self.chunks[-1]
            weight = model.shared_embedding_or_output_weight() if model.share_embeddings_and_output_weights else model.output_layer.weight
            lp, ent = chunked_log_probs(h[-R - 1 : -1].transpose(0, 1), weight, y["responses"], temperature=temperature, with_entropy=with_entropy,
                                        entropy_grad=entropy_grad, chunk_size=chunk)
            return (torch.nn.functional.pad(lp, (0, cut)), torch.nn.functional.pad(ent, (0, cut)) if ent is not None else None) if cut else (lp, ent)
        # CP: this rank's columns that predict a response token (their labels: the next tokens), gathered after
        picked = split.predicting(R) if split is not None else None
        logits = mmodel.local_logits(self.chunks[-1], h[-R - 1 : -1] if split is None else h.index_select(0, picked))
        labels = y["responses"] if split is None else split.labels(y["input_ids"], y["responses"]).index_select(1, picked)
        if temperature != 1.0:
            logits = logits / temperature
        lp, ent = mmodel.vocab_parallel_log_probs(logits, labels, with_entropy=with_entropy, entropy_grad=entropy_grad, group=parallel.tp_group())
        if split is not None:
            lp = split.response(lp, R, picked)
            ent = split.response(ent, R, picked) if ent is not None else None
        if cut:
            lp = torch.nn.functional.pad(lp, (0, cut))
            ent = torch.nn.functional.pad(ent, (0, cut)) if ent is not None else None
        return lp, ent

    def _logprob_chunk(self) -> int:
        """``model.logprob_chunk_size`` as the fsdp backend reads it: tokens per chunk of the LM head (0: the whole
        response at once, :func:`rl_train_megatron.model.vocab_parallel_log_probs`); unset: chunked on GPUs only."""
        chunk = self.config.model.logprob_chunk_size
        return (DEFAULT_LOGPROB_CHUNK if self.device.type != "cpu" else 0) if chunk is None else int(chunk)

    def forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool) -> Heads | None:
        """This rank's stage; the heads on the last stage. Inference: broadcast to every stage; training: None on the
        other stages, which keep their ``(h_in, h)`` for :meth:`backward`.

        ``actor.router_replay`` (:mod:`rl_train_megatron.router_replay`): the batch's ``routed_experts`` (R3: the
        rollout's; R2: the old-log-prob pass's) are forced in this forward and kept for its backward (activation
        recomputation); R2's old-log-prob pass records them (``Heads.routed_experts`` on every rank)."""
        if self.stage is not None and not self.stage.running:  # train.options.fully_shard: inside the root FSDP unit
            inner = type(self).forward.__get__(self)  # (the class's: a wrapper set on the instance sees one call per micro-batch)
            return self.stage.heads(inner, x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
        rr = self.router_replay
        if rr is None:
            return self._forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training)
        action = "replay" if "routed_experts" in x else None
        if action is None and self.config.actor.router_replay == "R3":
            raise rr_mod.RouterReplayError("actor.router_replay=R3 but the batch has no routed_experts: the rollout engine returned none "
                                           "(rollout.return_routed_experts=true with a rollout backend that records them)")
        if action is None and not training:  # R2's old-log-prob pass
            action = "record"
        # else R2 on-policy without an old-log-prob pass: this forward is the one R2 would record; it routes natively
        if action == "replay":
            rr.check(x["routed_experts"], x["input_ids"])
        elif action == "record":
            rr.start_recording()
        try:
            heads = self._forward(x, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad, training=training, replay=action)
            if action == "record":
                groups = (parallel.tp_cp_group() if self.sp or self.topo.cp > 1 else None, parallel.pp_group() if self.topo.pp > 1 else None)
                routed = rr.recorded(self._tokens, tuple(x["input_ids"].shape), groups)
                routed[~x["attention_mask"].bool().to(routed.device)] = rr_mod.NO_ROUTE  # (padding: no recorded routing)
                heads = attrs.evolve(heads, routed_experts=routed)
            return heads
        finally:
            if not training:  # (training: kept for the backward's recomputation, dropped there)
                rr.stop()

    def _forward(self, x: dict[str, torch.Tensor], *, temperature: float, with_entropy: bool, entropy_grad: bool, training: bool,
                 replay: str | None = None) -> Heads | None:
        critic = self.role == "critic"
        tokens = rr_mod.TokenMap(*x["input_ids"].shape, self.device) if replay else None
        # MoE: no trim (every position goes through the routers and counts in their losses: the same positions whatever
        # the rank layout)
        y, cut = (x, 0) if critic or self.shape.moe else self._trim(x, x["responses"].shape[1])
        rows = y["input_ids"].shape[0]
        if self.topo.ep > 1:
            y = self._same_tokens_over_ep(y)
        if self.sp and self.topo.cp == 1:  # (with CP the split pads)
            y = seq_par.pad_columns(y, self.topo.tp)
        split = self._split(y)
        if tokens is not None:  # the batch position of each token this rank's routers see (rl_train_megatron.router_replay)
            tokens.fit(y)
            self._tokens = tokens.local(split, self.topo.tp, self.topo.tp_rank, self.sp)
            if replay == "replay":
                self.router_replay.replay(x["routed_experts"], self._tokens)
        if training and self.shape.moe:
            mmodel.fit_aux_loss_tracker(self.shape.layers)
        stages = self._run_stage(y, split)
        h_out = stages[-1][1]
        if training:
            self._pending = stages
        h = seq_par.gather_hidden(h_out) if self.sp and self.pipe.is_last else h_out
        if h.shape[1] != rows:  # the rows added for the expert-parallel group are dropped before the heads
            h = h[:, :rows]
            y = {k: v[:rows] for k, v in y.items()}
        if training:
            if self.shape.moe:
                mmodel.count_training_forward()
        heads = None
        if self.pipe.is_last:
            R = x["responses"].shape[1]
            if critic:
                if split is None:
                    heads = Heads(values=mmodel.values(self.chunks[-1], h[-R - 1 : -1]))
                else:
                    picked = split.predicting(R)
                    heads = Heads(values=split.response(mmodel.values(self.chunks[-1], h.index_select(0, picked)), R, picked))
            else:
                lp, ent = self._log_probs_head(h, y, temperature, with_entropy, entropy_grad, cut, split)
                heads = Heads(log_probs=lp, entropy=ent)
        if training:
            return heads
        shape = tuple(x["responses"].shape)
        if critic:
            return Heads(values=self.pipe.from_last(heads.values if heads else None, shape, self.device))
        lp = self.pipe.from_last(heads.log_probs if heads else None, shape, self.device)
        ent = self.pipe.from_last(heads.entropy if heads else None, shape, self.device) if with_entropy else None
        return Heads(log_probs=lp, entropy=ent)

    def backward(self, loss: torch.Tensor | None, weight: float) -> None:
        """The last (virtual) stage from the loss (summed over data-parallel ranks in :meth:`reduce_and_clip`), the
        others from the next stage's gradient; then on to the previous stage (chunks in reverse order)."""
        stages = self._pending
        self._pending = None
        try:
            self._backward(stages, loss, weight)
        finally:
            if self.router_replay is not None:  # the replayed routing was kept for activation recomputation
                self.router_replay.stop()

    def _backward(self, stages, loss: torch.Tensor | None, weight: float) -> None:
        if self.shape.moe:  # the routers' aux / z losses enter the gradient with this micro-batch's weight (megatron's scaler)
            mmodel.set_aux_loss_scale(weight, self.device)
        for v in reversed(range(len(stages))):
            h_in, h = stages[v]
            if loss is not None and not self.pipe.sends(v):
                (loss * weight).backward()
            else:
                h.backward(self.pipe.recv_backward(h))
            if h_in is not None:
                self.pipe.send_backward(h_in.grad)
