"""`rlcore check` probes for model-based rewards: pure functions returning problems, loading no model.

- :func:`reward_model_problems` ``(config, registry)``: the check this plugin registers
  (a :class:`rl_core.cards.CheckCard`, stage ``rules``): the reward model's folder (any reward-model card's,
  ``reward_model.model.path``), then the judge's engine (not registered or not installed), which needs the
  registry;
- :func:`classifier_problems` (the ``classifier`` card's check): a model without a sequence-classification
  head, more than one label, a tokenizer without a chat template;
- :func:`judge_problems` (the ``judge`` card's check): a missing prompt budget, a template with unknown
  fields, a score pattern that does not compile, a bad score range, a classifier as the judge, no chat template.

``reward.weights`` and a rule reward the model's score replaces are checked by
:func:`rl_reward_model.mixing.mixing_problems` (the resolver runs it through the feature); the card's checks run with
the other cards' (the resolver).
The parts that read the reward model's files run only when its folder is there (the probe names it otherwise).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from rl_core.plan.probes import folder_problems
from rl_core.problems import Problem

CLASSIFIER_SUFFIX = "ForSequenceClassification"


def _hf_json(folder: str, name: str) -> dict[str, Any] | None:
    """``name`` (config.json, tokenizer_config.json) of a local folder or a hub name's cached snapshot."""
    candidates = [os.path.join(os.path.expanduser(folder), name)]
    if not folder.startswith(("/", ".", "~")):
        from rl_core.plan.memory import hub_config

        hub = hub_config(folder)
        if hub:
            candidates.append(os.path.join(os.path.dirname(hub), name))
    for cand in candidates:
        try:
            with open(cand, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            continue
    return None


def _has_folder(path: str) -> bool:
    return os.path.isdir(os.path.expanduser(path)) or _hf_json(path, "config.json") is not None


def _folder_ok(config: Any) -> bool:
    """Whether the reward model's folder can be read (the probe names the problem when it cannot)."""
    path = config.reward_model.model.path
    return bool(path) and _has_folder(path)


def reward_model_problems(config: Any, registry: Any) -> list[Problem]:
    """The reward model's folder, then the judge's engine: the probe ``rlcore check`` runs (this plugin registers it)."""
    rm = config.reward_model
    out: list[Problem] = []
    if not rm.enable:
        return out
    if not rm.model.path:
        out.append(Problem(key="reward_model.model.path", what="is required with reward_model.enable=true",
                           fix="point it at a folder (or hub name) of a sequence-classification reward model, or a chat model with reward_model.name=judge"))
        return out
    if not _has_folder(rm.model.path):
        out.append(Problem(key="reward_model.model.path", what=f"{rm.model.path!r} is neither a folder nor a model in the Hugging Face cache",
                           fix="download it first (e.g. `huggingface-cli download NAME --local-dir DIR`) and point reward_model.model.path at DIR"))
        return out
    if rm.model.tokenizer_path is not None and not (rm.model.tokenizer_path and _has_folder(rm.model.tokenizer_path)):
        out.append(Problem(key="reward_model.model.tokenizer_path", what=f"{rm.model.tokenizer_path!r} is not a folder",
                           fix="point it at the reward model's tokenizer folder, or remove it (null) to use reward_model.model.path's"))
        return out
    # its files as the reward model's workers will load them: config, weights, tokenizer and vocabulary
    out += folder_problems("reward_model.model.path", rm.model.path, tokenizer_key="reward_model.model.tokenizer_path",
                           tokenizer_path=rm.model.tokenizer_path, trust_remote_code=bool(rm.model.trust_remote_code))
    if rm.name == "judge" and registry is not None:
        out.extend(judge_engine_problems(config, registry))
    return out


def judge_engine_problems(config: Any, registry: Any) -> list[Problem]:
    """``reward_model.judge.engine``: a registered rollout card whose engine is installed."""
    from rl_core.engine_versions import engine_version_problem
    from rl_core.plugins import UnknownCardError

    engine = config.reward_model.judge.engine
    try:
        card = registry.get("rollout", engine)
    except UnknownCardError as exc:
        return [Problem(key="reward_model.judge.engine", what=str(exc), fix=f"set reward_model.judge.engine to one of: {', '.join(registry.names('rollout'))}")]
    p = engine_version_problem(card, "reward_model.judge.engine")
    return [p] if p is not None else []


def chat_template_problem(config: Any) -> Problem | None:
    """A reward-model tokenizer without a chat template while one is to be applied."""
    rm = config.reward_model
    if not rm.apply_chat_template or rm.model.chat_template or not _folder_ok(config):
        return None
    folder = rm.model.tokenizer_path or rm.model.path
    tok_cfg = _hf_json(folder, "tokenizer_config.json") or {}
    local = os.path.expanduser(folder)
    if tok_cfg.get("chat_template") or any(os.path.isfile(os.path.join(local, f)) for f in ("chat_template.jinja", "chat_template.json")):
        return None
    return Problem(key="reward_model.model.chat_template", what=f"the reward model's tokenizer ({folder}) has no chat template to render the (prompt, response) chat",
                   fix="set reward_model.model.chat_template to the template the reward model was trained with (Jinja text or a .jinja file), "
                       "or reward_model.apply_chat_template=false to score the plain prompt and response text")


def classifier_problems(config: Any) -> list[Problem]:
    """The ``classifier`` card's check."""
    rm = config.reward_model
    out: list[Problem] = []
    cfg = _hf_json(rm.model.path, "config.json") if _folder_ok(config) else None
    if cfg is not None:
        archs = cfg.get("architectures") or []
        if archs and not any(a.endswith(CLASSIFIER_SUFFIX) for a in archs):
            out.append(Problem(key="reward_model.model.path",
                               what=f"{rm.model.path!r} is a {archs[0]}, a model without a sequence-classification head (a reward model is a *{CLASSIFIER_SUFFIX})",
                               fix="use a reward-model checkpoint (AutoModelForSequenceClassification, one label), or reward_model.name=judge to ask this model for a score"))
        labels = cfg.get("num_labels") or len(cfg.get("id2label") or {}) or 1
        if labels != 1:
            out.append(Problem(key="reward_model.model.path", severity="warning",
                               what=f"the reward model has {labels} labels; rl-core takes the first logit as the score",
                               fix="use a reward model with one label (num_labels=1)"))
    if (p := chat_template_problem(config)) is not None:
        out.append(p)
    return out


def judge_problems(config: Any) -> list[Problem]:
    """The ``judge`` card's check (its engine needs the registry: :func:`judge_engine_problems`, in the probe)."""
    from rl_reward_model.judge import TEMPLATE_FIELDS, template_fields

    rm = config.reward_model
    j = rm.judge
    out: list[Problem] = []
    if rm.max_length is None:
        out.append(Problem(key="reward_model.max_length", what="is null (the model's whole context), but the judge needs a budget for its prompt",
                           fix="set reward_model.max_length to the judge prompt's token budget, e.g. 4096"))
    try:
        unknown = sorted(set(template_fields(j.template)) - set(TEMPLATE_FIELDS))
        if unknown:
            out.append(Problem(key="reward_model.judge.template", what=f"uses {', '.join('{' + u + '}' for u in unknown)}, which the judge does not fill",
                               fix=f"use only {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)} (write {{{{ and }}}} for literal braces)"))
        if "response" not in template_fields(j.template):
            out.append(Problem(key="reward_model.judge.template", what="has no {response}: the judge would never see the response", fix="put {response} in the template"))
    except ValueError as exc:
        out.append(Problem(key="reward_model.judge.template", what=f"is not a valid template: {exc}", fix="write {{ and }} for literal braces"))
    try:
        groups = re.compile(j.score_pattern).groups
        if groups > 1:
            out.append(Problem(key="reward_model.judge.score_pattern", what=f"has {groups} groups; the score is read from the first", severity="warning",
                               fix="use (?:...) for the other groups"))
    except re.error as exc:
        out.append(Problem(key="reward_model.judge.score_pattern", what=f"is not a regular expression: {exc}", fix=r"e.g. (\d+(?:\.\d+)?)"))
    if not j.score_min < j.score_max:
        out.append(Problem(key="reward_model.judge.score_max", what=f"must be above score_min ({j.score_min:g}), got {j.score_max:g}", fix="e.g. score_min=0, score_max=10"))
    cfg = _hf_json(rm.model.path, "config.json") if _folder_ok(config) else None
    archs = (cfg or {}).get("architectures") or []
    if archs and any(a.endswith(CLASSIFIER_SUFFIX) for a in archs):
        out.append(Problem(key="reward_model.model.path", what=f"{rm.model.path!r} is a {archs[0]}: a classifier cannot write an answer for the judge",
                           fix="use reward_model.name=classifier for it, or a chat model for the judge"))
    if (p := chat_template_problem(config)) is not None:
        out.append(p)
    return out
