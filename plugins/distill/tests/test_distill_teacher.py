"""The teacher role: log-probs equal a plain HF forward computed here; another tokenizer is refused naming both models."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from rl_core.config.schema import AlgorithmConfig, ModelConfig, RunConfig, TrainerConfig
from rl_core_testing.tiny_model import build_tokenizer, make_tiny_model_dir
from rl_distill.checks import distill_problems
from rl_distill.teacher import Teacher, TeacherError


def _config(student, teacher, **options) -> RunConfig:
    opts = {"teacher_path": str(teacher) if teacher else None, **options}
    return RunConfig(model=ModelConfig(path=str(student)), algorithm=AlgorithmConfig(adv_estimator="distill", options=opts),
                     trainer=TrainerConfig(device="cpu"))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    student = make_tiny_model_dir(root / "student", seed=0)
    teacher = make_tiny_model_dir(root / "teacher", seed=1)
    # the same architecture and vocabulary size, but two byte tokens swap ids: another tokenizer
    other = root / "other"
    shutil.copytree(teacher, other)
    tj = json.loads((other / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    a, b = [k for k, v in vocab.items() if v in (3 + ord("a"), 3 + ord("b"))]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tj))
    return student, teacher, other


def _batch(rows: int = 5, prompt: int = 6, resp: int = 4):
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 200, (rows, prompt), generator=g)
    responses = torch.randint(3, 200, (rows, resp), generator=g)
    attn = torch.ones(rows, prompt + resp, dtype=torch.long)
    attn[0, :2] = 0  # a left-padded prompt
    attn[1, prompt + 2 :] = 0  # a short response
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": torch.cat([prompts, responses], -1), "attention_mask": attn, "position_ids": pos, "responses": responses}


def test_teacher_log_probs_equal_a_plain_forward(models):
    from transformers import AutoModelForCausalLM

    student, teacher, _ = models
    role = Teacher(_config(student, teacher, teacher_dtype="float32", teacher_micro_batch_size=2), build_tokenizer())
    x = _batch()
    got = role.log_probs(x, temperature=0.7)
    model = AutoModelForCausalLM.from_pretrained(teacher, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=x["input_ids"], attention_mask=x["attention_mask"], position_ids=x["position_ids"]).logits
    R = x["responses"].shape[1]
    ref = torch.log_softmax(logits[:, -R - 1 : -1].float() / 0.7, -1).gather(-1, x["responses"].unsqueeze(-1)).squeeze(-1)
    mask = x["attention_mask"][:, -R:].bool()
    torch.testing.assert_close(got[mask], ref[mask], atol=1e-5, rtol=1e-5)
    assert got.shape == (5, R) and got.dtype == torch.float32


def test_another_tokenizer_is_refused_at_check_and_at_build(models):
    student, _, other = models
    problems = distill_problems(_config(student, other))
    assert len(problems) == 1 and problems[0].severity == "error"
    assert str(student) in problems[0].what and str(other) in problems[0].what and "other ids" in problems[0].what
    with pytest.raises(TeacherError, match="student .* and the teacher .*other"):
        Teacher(_config(student, other), build_tokenizer())


def test_missing_teacher_is_a_check_error(models, tmp_path):
    student, teacher, _ = models
    (p,) = distill_problems(_config(student, None))
    assert p.key == "algorithm.options.teacher_path" and "no teacher" in p.what
    (p,) = distill_problems(_config(student, tmp_path / "nowhere"))
    assert "does not exist" in p.what
    (tmp_path / "empty").mkdir()
    (p,) = distill_problems(_config(student, tmp_path / "empty"))
    assert "without a config.json" in p.what
    assert distill_problems(_config(student, teacher)) == []
    with pytest.raises(TeacherError, match="needs a teacher"):
        Teacher(_config(student, None), build_tokenizer())
