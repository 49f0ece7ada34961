"""The ``judge`` reward model: an LLM asked to rate each response, its answer parsed into a score.

- The judge's prompt is ``reward_model.judge.template`` with ``{prompt}``, ``{response}`` and
  ``{ground_truth}`` filled in, rendered with the judge's own chat template (``reward_model.apply_chat_template``)
  and encoded with its own tokenizer.
- It runs on a rollout engine chosen by name (``reward_model.judge.engine``: any registered rollout card,
  e.g. ``hf``, or ``vllm`` / ``sglang`` when their plugins are installed) with its own model
  (``reward_model.model.path``), decoding greedily up to ``judge.max_new_tokens`` tokens.
- The score is the first group of the **last** match of ``judge.score_pattern`` in the answer, mapped from
  ``[score_min, score_max]`` to ``[0, 1]``. An answer without a match, or with a value outside the range, is
  a parse failure: an error outcome (``reward.on_error``: raise names the sample and the answer; skip scores
  0) counted in ``reward/model/parse_failures``.
- A judge call (one micro-batch) running past ``judge.timeout_s`` scores its samples 0 as timeouts
  (``reward/timeouts``), as a rule scorer's timeout does.
"""

from __future__ import annotations

import re
import string
from typing import Any, Sequence

import attrs
import torch

from rl_reward_model.role import ScoreRequest
from rl_core.rewards.outcome import ERROR, OK, TIMEOUT, Outcome
from rl_core.rewards.scoring import ScorerTimeout, call_with_timeout

from rl_reward_model.text import load_scorer_tokenizer, render_chat, scorer_dtype

TEMPLATE_FIELDS = ("prompt", "response", "ground_truth")


def template_fields(template: str) -> list[str]:
    """The ``{names}`` a judge template uses (ValueError for a malformed template)."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def judge_run_config(config: Any) -> Any:
    """The run config the judge's rollout engine is built from: the judge's model, engine and limits."""
    rm = config.reward_model
    m = rm.model
    model = attrs.evolve(
        config.model, path=m.path, tokenizer_path=m.tokenizer_path, trust_remote_code=m.trust_remote_code,
        dtype=rm.model.dtype or config.model.dtype, random_init=False, override_config={}, compile=False, architecture=None,
        lora_rank=0, lora_adapter_path=None,  # the policy's LoRA adapters are not the judge's (no adapter sync to it)
    )
    rollout = attrs.evolve(
        config.rollout, name=rm.judge.engine, n=1, tensor_model_parallel_size=1, generation_batch_size=None,
        engine_kwargs=dict(rm.judge.engine_kwargs), calculate_log_probs=False, stop=[],
    )
    data = attrs.evolve(config.data, max_prompt_length=rm.max_length, max_response_length=rm.judge.max_new_tokens)
    return attrs.evolve(config, model=model, rollout=rollout, data=data)


class JudgeScorer:
    def __init__(self, config: Any, context: Any, *, engine: Any = None, tokenizer: Any = None, rollout: Any = None) -> None:
        from rl_core.backends import SamplingParams

        self.cfg = rm = config.reward_model
        self.judge = rm.judge
        self.pattern = re.compile(self.judge.score_pattern)
        self.tokenizer = tokenizer if tokenizer is not None else load_scorer_tokenizer(rm, padding_side="left")
        if engine is None:
            if rollout is None:  # the resolver finds it (the card's rollout_key); the check names an unknown one
                raise ValueError(f"reward_model.judge.engine={self.judge.engine!r}: the resolved stack has no rollout card for the judge; "
                                 "run `rlcore check` and set it to an installed rollout engine (rlcore plugins)")
            jconfig = judge_run_config(config)
            if jconfig.model.dtype == "auto":
                jconfig = attrs.evolve(jconfig, model=attrs.evolve(jconfig.model, dtype=scorer_dtype(config, context.device)))
            engine = rollout.load()(jconfig, context)
        self.engine = engine
        self.params = SamplingParams(n=1, greedy=True, temperature=0.0, max_new_tokens=self.judge.max_new_tokens)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.tokenizer.eos_token_id or 0))

    def prompt_ids(self, request: ScoreRequest) -> list[int]:
        text = self.judge.template.format_map(
            {"prompt": request.prompt_text, "response": request.response, "ground_truth": "" if request.ground_truth is None else request.ground_truth}
        )
        rendered = render_chat(self.tokenizer, [{"role": "user", "content": text}], apply_chat_template=self.cfg.apply_chat_template, generation_prompt=True)
        ids = self.tokenizer(rendered, add_special_tokens=not self.cfg.apply_chat_template)["input_ids"]
        if len(ids) > self.cfg.max_length:
            raise ValueError(f"the judge's prompt has {len(ids)} tokens > reward_model.max_length={self.cfg.max_length}; raise it or shorten judge.template")
        return ids

    def parse(self, answer: str) -> Outcome:
        """The score in the judge's answer, mapped to [0, 1]; an error outcome (a parse failure) when there is none."""
        lo, hi = self.judge.score_min, self.judge.score_max
        matches = list(self.pattern.finditer(answer))
        value = None
        if matches:
            last = matches[-1]
            try:
                value = float(last.group(1) if self.pattern.groups else last.group(0))
            except (TypeError, ValueError):
                value = None
        if value is None or not lo <= value <= hi:
            what = "no score matching reward_model.judge.score_pattern" if value is None else f"a score {value:g} outside [{lo:g}, {hi:g}]"
            return Outcome(ERROR, error=f"the judge's answer has {what}: {answer[:200]!r}", extras={"parse_failure": 1})
        return Outcome(OK, (value - lo) / (hi - lo), {"judge_raw": value})

    def _generate(self, rows: list[list[int]]) -> list[str]:
        from rl_core.batch import Batch

        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # left-padded, as the rollout engines take prompts
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
        out = self.engine.generate(Batch({"input_ids": ids, "attention_mask": mask}, {}), self.params)
        return [
            self.tokenizer.decode(resp[m.bool()].tolist(), skip_special_tokens=True)
            for resp, m in zip(out["responses"], out["response_mask"])
        ]

    def score(self, requests: Sequence[ScoreRequest], *, rounds: int | None = None) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(requests)
        rows: dict[int, list[int]] = {}
        for i, req in enumerate(requests):
            try:
                rows[i] = self.prompt_ids(req)
            except Exception as exc:  # noqa: BLE001 - this sample's error
                outcomes[i] = Outcome(ERROR, error=f"building the judge's prompt: {type(exc).__name__}: {exc}")
        todo = sorted(rows)
        micro = self.cfg.micro_batch_size_per_gpu
        for start in range(0, len(todo), micro):
            part = todo[start : start + micro]
            try:
                answers = call_with_timeout(lambda part=part: self._generate([rows[i] for i in part]), self.judge.timeout_s)
            except ScorerTimeout:
                for i in part:
                    outcomes[i] = Outcome(TIMEOUT, error=f"the judge ran longer than reward_model.judge.timeout_s={self.judge.timeout_s:g} s")
                continue
            except Exception as exc:  # noqa: BLE001 - the engine failed on this micro-batch: its samples' error
                for i in part:
                    outcomes[i] = Outcome(ERROR, error=f"the judge's engine {self.judge.engine!r} failed: {type(exc).__name__}: {exc}")
                continue
            for i, answer in zip(part, answers):
                outcomes[i] = self.parse(answer)
        return [o for o in outcomes]

    def offload(self) -> None:
        self.engine.sleep()

    def onload(self) -> None:
        self.engine.wake_up()

    def shutdown(self) -> None:
        closer = getattr(self.engine, "shutdown", None)
        if closer is not None:
            closer()


def factory(config: Any, context: Any, *, rollout: Any = None) -> JudgeScorer:
    """The ``judge`` card's factory; ``rollout``: the card of ``reward_model.judge.engine`` (``Stack.reward_model_rollout``)."""
    return JudgeScorer(config, context, rollout=rollout)
