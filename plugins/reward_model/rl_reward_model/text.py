"""Text in, tokens out, for model-based rewards: the reward model's own tokenizer and chat template."""

from __future__ import annotations

import os
from typing import Any, Sequence

from rl_core.rewards.scoring import RewardConfigError


def chat_template_text(value: str | None) -> str | None:
    """``reward_model.model.chat_template``: Jinja text, or the path of a file holding it (read, never run as code)."""
    if not value:
        return None
    path = os.path.expanduser(value)
    if "{" not in value and (value.endswith((".jinja", ".j2", ".txt")) or os.path.isfile(path)):
        if not os.path.isfile(path):
            raise RewardConfigError(f"reward_model.model.chat_template: the file {value!r} does not exist; give Jinja text or the path of a .jinja file")
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    return value


def load_scorer_tokenizer(cfg: Any, *, padding_side: str):
    """The reward model's tokenizer (``reward_model.model.tokenizer_path`` or its ``path``), its template override applied."""
    from rl_core.modeling import load_tokenizer

    m = cfg.model
    key = "reward_model.model.tokenizer_path" if m.tokenizer_path else "reward_model.model.path"
    tok = load_tokenizer(m.tokenizer_path or m.path, trust_remote_code=m.trust_remote_code, key=key)
    template = chat_template_text(m.chat_template)
    if template is not None:
        tok.chat_template = template
    tok.padding_side = padding_side
    return tok


def render_chat(tokenizer: Any, messages: Sequence[dict[str, str]], *, apply_chat_template: bool, generation_prompt: bool) -> str:
    """The messages as the model's input text: its chat template, or the contents one per line."""
    if not apply_chat_template:
        return "\n".join(m["content"] for m in messages)
    if not getattr(tokenizer, "chat_template", None):
        raise RewardConfigError(
            "the reward model's tokenizer has no chat template; set reward_model.model.chat_template (Jinja text or a "
            ".jinja file) or reward_model.apply_chat_template=false"
        )
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)


def scorer_dtype(config: Any, device: str) -> str:
    """``reward_model.model.dtype`` (null: ``model.dtype``), ``auto`` resolved for ``device``."""
    from rl_core.util.precision import resolve_dtype

    requested = config.reward_model.model.dtype or config.model.dtype
    return resolve_dtype(requested, "cpu" if device == "cpu" else "cuda")[0] if requested == "auto" else requested
