"""The ``classifier`` reward model: a sequence-classification model (``AutoModelForSequenceClassification``).

Each request's (prompt, response) chat is rendered with the reward model's own chat template and encoded
with its own tokenizer (:mod:`rl_reward_model.text`); inputs longer than ``reward_model.max_length``
(null: the model's ``max_position_embeddings``, no cut when it has none) keep their end (the scored last
token) and count in ``reward/model/truncated``. Micro-batches of
``reward_model.micro_batch_size_per_gpu`` are right-padded; the score is the model's first logit at the
last non-pad token (the model's own pooling, as when it was trained). ``reward_model.strategy=fsdp``
shards the model over the workers that hold it (torch FSDP2, each decoder layer and the root).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from rl_reward_model.role import ScoreRequest, chat_of
from rl_core.rewards.outcome import ERROR, OK, Outcome

from rl_reward_model.text import load_scorer_tokenizer, render_chat, scorer_dtype


class SequenceClassifierScorer:
    def __init__(self, config: Any, context: Any, *, model: Any = None, tokenizer: Any = None) -> None:
        from rl_core.modeling import build_model, load_hf_config

        rm = config.reward_model
        self.cfg = rm
        self.device = context.torch_device
        self.tokenizer = tokenizer if tokenizer is not None else load_scorer_tokenizer(rm, padding_side="right")
        if model is None:
            from transformers import AutoModelForSequenceClassification

            m = rm.model
            hf_cfg = load_hf_config(m.path, trust_remote_code=m.trust_remote_code, key="reward_model.model.path")
            model = build_model(
                AutoModelForSequenceClassification, m.path, hf_cfg, dtype=scorer_dtype(config, context.device),
                device=self.device, random_init=False, trust_remote_code=m.trust_remote_code, seed=context.seed,
            )
        self.model = model.eval().requires_grad_(False)
        if getattr(self.model.config, "pad_token_id", None) is None:  # its pooling finds the last non-pad token
            pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
            self.model.config.pad_token_id = pad
        self.pad_id = int(self.model.config.pad_token_id)
        self.max_length = rm.max_length or getattr(self.model.config, "max_position_embeddings", None)
        self.sharded = rm.strategy == "fsdp" and context.world_size > 1 and torch.distributed.is_initialized()
        if self.sharded:
            shard_for_inference(self.model)

    # ------------------------------------------------------------- encoding
    def encode(self, request: ScoreRequest) -> tuple[list[int], bool]:
        """The reward model's token ids for one request, and whether they were cut to ``max_length``."""
        text = render_chat(self.tokenizer, chat_of(request), apply_chat_template=self.cfg.apply_chat_template, generation_prompt=False)
        ids = self.tokenizer(text, add_special_tokens=not self.cfg.apply_chat_template)["input_ids"]
        cut = self.max_length is not None and len(ids) > self.max_length
        return (ids[-self.max_length :] if cut else ids), cut

    @torch.no_grad()
    def forward(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        """First logit per row (right-padded micro-batch), float32 on the CPU."""
        if not rows:  # an empty round of a sharded model: one token, so the collectives stay in step
            rows = [[self.pad_id]]
            empty = True
        else:
            empty = False
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
        out = logits[:, 0].float().cpu()
        return out[:0] if empty else out

    # -------------------------------------------------------------- scoring
    def score(self, requests: Sequence[ScoreRequest], *, rounds: int | None = None) -> list[Outcome]:
        micro = self.cfg.micro_batch_size_per_gpu
        encoded: list[tuple[list[int], bool] | None] = []
        outcomes: list[Outcome | None] = []
        for req in requests:
            try:
                encoded.append(self.encode(req))
                outcomes.append(None)
            except Exception as exc:  # noqa: BLE001 - a template that rejects the chat: this sample's error
                encoded.append(None)
                outcomes.append(Outcome(ERROR, error=f"encoding the chat for the reward model: {type(exc).__name__}: {exc}"))
        todo = [i for i, e in enumerate(encoded) if e is not None]
        n_rounds = max(rounds or 0, -(-len(todo) // micro))
        for r in range(n_rounds):
            part = todo[r * micro : (r + 1) * micro]
            scores = self.forward([encoded[i][0] for i in part])
            for i, s in zip(part, scores.tolist()):
                outcomes[i] = Outcome(OK, float(s), {"truncated": 1} if encoded[i][1] else None)
        return [o for o in outcomes]  # every slot is filled

    # ------------------------------------------------------------ placement
    def offload(self) -> None:
        self.model.to("cpu")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def onload(self) -> None:
        self.model.to(self.device)


def shard_for_inference(model: torch.nn.Module) -> None:
    """``fully_shard`` each decoder layer and the root over all ranks of the default process group (FSDP2)."""
    from torch.distributed.fsdp import fully_shard

    from rl_core.modeling import decoder_layers

    for layer in decoder_layers(model):
        fully_shard(layer, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)


def factory(config: Any, context: Any) -> SequenceClassifierScorer:
    """The ``classifier`` card's factory."""
    return SequenceClassifierScorer(config, context)
