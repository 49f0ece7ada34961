"""Synthetic steps for tests and benchmarks: a StepRollouts shaped like the quickstart's (8 prompts x 4 samples,
16 response tokens, GRPO advantages), optionally multi-turn with tool calls, built without a model."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from rl_core.batch import Batch
from rl_core.observers import StepRollouts


def _obj(values: list) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def synthetic_rollouts(step: int, tokenizer: Any, *, groups: int = 8, n: int = 4, max_response_length: int = 16,
                       phase: str = "train", multi_turn: bool = False, seed: int = 0, log_probs: bool = True) -> StepRollouts:
    """One step's rollouts: ``a+b`` prompts (validation: the same ones at every step), answers right with a
    probability growing with ``step``, some truncated."""
    rng = random.Random(seed * 1_000_003 + step * 7 + (phase == "val"))
    prompt_rng = random.Random(seed) if phase == "val" else rng
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id
    prompts, responses, rewards, messages_col, infos, uids, truths, texts = [], [], [], [], [], [], [], []
    for g in range(groups):
        a, b = prompt_rng.randint(0, 99), prompt_rng.randint(0, 99)
        messages = [{"role": "system", "content": "Answer with the final number only."}, {"role": "user", "content": f"What is {a} + {b}?"}]
        prompt_ids = tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), add_special_tokens=False)
        for _ in range(n):
            right = rng.random() < min(0.9, 0.1 + step / 60)
            answer = a + b if right else a + b + rng.choice([-10, -1, 1, 2, 10])
            if rng.random() < 0.15:  # rambles past the budget
                text = f"Let me think about {a} plus {b} carefully and"
            else:
                text = f"{answer}"
            ids = tokenizer.encode(text, add_special_tokens=False)[:max_response_length]
            if len(ids) < max_response_length:
                ids = ids + [eos]
            info: dict[str, Any] = {"index": g}
            if multi_turn:
                ok = rng.random() < 0.7
                result = str(a + b) if ok else "Error: calculator: could not parse '{a} ++ {b}'"
                info["messages"] = messages + [
                    {"role": "assistant", "content": f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{a}+{b}"}}}}</tool_call>'},
                    {"role": "tool", "name": "calculator", "content": result},
                    {"role": "assistant", "content": text},
                ]
                info["agent"] = {"turns": [{"sampled": 20, "inserted": 6, "finish_reason": "stop", "tool_calls": ["calculator"],
                                            "tool_results": [{"name": "calculator", "status": "ok" if ok else "error", "text": result, "seconds": 0.01}]},
                                           {"sampled": len(ids), "inserted": 0, "finish_reason": "stop", "tool_calls": []}],
                                 "stop_reason": "no_tool_call", "token_check": None}
            prompts.append(prompt_ids)
            responses.append(ids)
            rewards.append(1.0 if (right and text == f"{answer}") else 0.0)
            messages_col.append(messages)
            infos.append(info)
            uids.append(f"s{step}-g{g}")
            truths.append(str(a + b))
            texts.append(tokenizer.decode(ids, skip_special_tokens=True))
    rows = len(prompts)
    P = max(len(p) for p in prompts)
    R = max_response_length
    prompt_t = torch.full((rows, P), pad, dtype=torch.long)
    resp_t = torch.full((rows, R), pad, dtype=torch.long)
    attn = torch.zeros((rows, P + R), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt_t[i, P - len(p):] = torch.tensor(p)
        resp_t[i, : len(r)] = torch.tensor(r)
        attn[i, P - len(p): P + len(r)] = 1
    mask = attn[:, P:].clone()
    scores = torch.tensor(rewards)
    tensors = {"prompts": prompt_t, "responses": resp_t, "attention_mask": attn, "response_mask": mask,
               "input_ids": torch.cat([prompt_t, resp_t], -1)}
    trainer_lp = None
    if phase == "train":  # GRPO's advantages: the reward's z-score within its group
        grouped = scores.view(groups, n)
        adv_seq = ((grouped - grouped.mean(-1, keepdim=True)) / (grouped.std(-1, keepdim=True) + 1e-6)).view(-1)
        tensors["advantages"] = adv_seq[:, None] * mask
        tensors["token_level_scores"] = torch.zeros((rows, R))
        if log_probs:
            gen = torch.Generator().manual_seed(step)
            rollout_lp = -torch.rand((rows, R), generator=gen) * 3 * mask
            tensors["rollout_log_probs"] = rollout_lp
            trainer_lp = (rollout_lp + torch.randn((rows, R), generator=gen) * 0.02) * mask
            tensors["old_log_probs"] = trainer_lp
    non = {"uid": _obj(uids), "raw_prompt": _obj(messages_col), "extra_info": _obj(infos), "data_source": _obj(["synthetic/add"] * rows),
           "ground_truth": _obj(truths), "response_text": _obj(texts)}
    batch = Batch(tensors, non)
    extras = [{"acc": r} for r in rewards]
    return StepRollouts(step=step, phase=phase, batch=batch, scores=scores, raw_scores=scores, reward_extras=extras if phase == "train" else None,
                        trainer_log_probs=trainer_lp, policy_version=step if phase == "val" else max(step - 1, 0), tokenizer=tokenizer, max_response_length=max_response_length)
