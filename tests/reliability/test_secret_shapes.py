"""Secrets recognised by their shape under ordinary key names: masked in printouts, config.yaml and logger configs."""

from __future__ import annotations

import pytest
from rl_core.cli.main import main
from rl_core.config.load import config_to_dict, load_config
from rl_core.problems import Problem
from rl_core.util.secrets import mask_text
from rl_core.trainer.outputs import write_config

from tests.reliability import tally

SHAPES = {
    "URL with user:password": ("https://alice:hunter2pass@judge.example.com/v1", "hunter2pass", "https://alice:***@judge.example.com/v1"),
    "Bearer token": ("Bearer abcdef0123456789xyz", "abcdef0123456789xyz", "Bearer ***"),
    "sk- key": ("sk-proj-AbCdEf0123456789", "AbCdEf0123456789", "***"),
    "hf_ token": ("hf_AbCdEfGhIjKlMnOpQrStUv", "hf_AbCdEfGhIjKlMnOpQrStUv", "***"),
    "AWS access key id": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "***"),
    "GitHub token in a URL": ("https://ghp_0123456789abcdefghijABCDEFGHIJ@github.com/o/r.git", "ghp_0123456789", "https://***@github.com/o/r.git"),
    "token in a query string": ("https://api.example.com/score?model=x&api_key=0123secret", "0123secret", "https://api.example.com/score?model=x&api_key=***"),
    "JWT": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz", "c2lnbmF0dXJlMTIz", "***"),
}
PLAIN = ["Qwen/Qwen2.5-0.5B", "https://huggingface.co/datasets/openai/gsm8k", "outputs/run", "max_tokens", "risk-averse",
         "/home/user/data/train.jsonl", "Bearer", "http://localhost:8000/v1", "sk-8"]


@pytest.mark.parametrize("name", list(SHAPES))
def test_shape_is_masked(name):
    value, secret, masked = SHAPES[name]
    assert mask_text(value) == masked
    assert secret not in mask_text(f"endpoint={value} and more")


def test_plain_values_stay():
    for value in PLAIN:
        assert mask_text(value) == value


def test_secrets_under_ordinary_names_never_reach_config_yaml_printouts_or_trackers(tmp_path, capsys):
    values = {f"k{i}": v for i, (v, _, _) in enumerate(SHAPES.values())}
    flow = "{" + ", ".join(f"{k}: '{v}'" for k, v in values.items()) + "}"
    cfg = load_config(None, [f"reward.kwargs={flow}", "model.path=https://bob:s3cretpw@models.example.com/m"])
    assert cfg.reward.kwargs == values  # the run itself keeps the real values
    d = config_to_dict(cfg)  # what config.yaml, TensorBoard's config text and wandb.init(config=...) get
    write_config(str(tmp_path), d)
    saved = (tmp_path / "config.yaml").read_text()
    text = Problem(key="model.path", what=f"{cfg.model.path!r} does not exist").render()
    code = main(["check", "model.path=https://bob:s3cretpw@models.example.com/m", f"reward.kwargs={flow}"])
    out = capsys.readouterr()
    printed = out.out + out.err
    for name, (_, secret, _) in SHAPES.items():
        ok = secret not in saved and secret not in printed and secret not in str(d)
        tally.record("secrets", name, ok)
        assert ok, name
    assert "s3cretpw" not in saved + text + printed and "https://bob:***@models.example.com/m" in saved
    assert code != 0  # the model does not exist: the error names it, masked
