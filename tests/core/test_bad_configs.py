"""Plausible bad configs: each exits 1 from `rlcore check`, `rlcore train --dry-run` and `rlcore train` alike,
with no traceback and a problem naming the key.

Every case runs through all three commands in-process (``rl_core.cli.main.main``): a bad config is refused
before anything is built, so even the full `train` path is fast. A case is either dotted overrides on a good
base config, or a YAML file (for duplicate keys and YAML's own ``.inf`` / ``.nan``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rl_core.cli.main import main

TINY_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"


def base(tmp: Path) -> list[str]:
    return [
        "model.path=Qwen/Qwen2.5-0.5B", f"data.train_files=[{TINY_DATA}]", "data.train_batch_size=4", "rollout.n=2",
        "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2", "trainer.device=cpu",
        "trainer.loggers=[jsonl]", f"trainer.output_dir={tmp / 'out'}", "trainer.total_training_steps=1",
    ]


def _file(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def _rows(tmp: Path, rows: list) -> Path:
    return _file(tmp, "rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


NO_COMPUTE_SCORE = "def score(**kw):\n    return 0.0\n"
WRONG_SIGNATURE = "def compute_score(text):\n    return 0.0\n"
NO_KWARGS = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"

# name: (key the problem must name, overrides; a callable gets tmp_path and returns them)
CASES = {
    # --- the examples
    "negative clip ratio": ("actor.clip_ratio", ["actor.clip_ratio=-0.2"]),
    "gamma above 1": ("algorithm.gamma", ["algorithm.gamma=1.5"]),
    "lam below 0": ("algorithm.lam", ["algorithm.lam=-0.1"]),
    "negative weight decay": ("actor.optim.weight_decay", ["actor.optim.weight_decay=-0.01"]),
    "negative grad clip": ("actor.optim.grad_clip", ["actor.optim.grad_clip=-1"]),
    "warm-up ratio above 1": ("actor.optim.lr_warmup_steps_ratio", ["actor.optim.lr_warmup_steps_ratio=1.5"]),
    "betas of the wrong length": ("actor.optim.betas", ["actor.optim.betas=[0.9]"]),
    "val_n 0": ("rollout.val_n", ["rollout.val_n=0"]),
    "dual-clip c not above 1": ("actor.clip_ratio_c", ["actor.clip_ratio_c=1.0"]),
    "negative KL loss coefficient": ("actor.kl_loss_coef", ["actor.use_kl_loss=true", "actor.kl_loss_coef=-0.001"]),
    "negative KL-in-reward coefficient": ("algorithm.kl_ctrl.kl_coef", ["algorithm.kl_ctrl.kl_coef=-0.1"]),
    "unknown loss_agg_mode": ("actor.loss_agg_mode", ["actor.loss_agg_mode=token_mean"]),
    "unknown kl_penalty": ("algorithm.kl_penalty", ["algorithm.kl_penalty=k4"]),
    "unknown kl_loss_type": ("actor.kl_loss_type", ["actor.kl_loss_type=lowvar_kl"]),
    "logger that does not exist": ("trainer.loggers[1]", ["trainer.loggers=[console,mlflow]"]),
    "reward timeout 0": ("reward.timeout_s", ["reward.timeout_s=0"]),
    "reward workers -1": ("reward.num_workers", ["reward.num_workers=-1"]),
    "max_ckpt_to_keep 0": ("trainer.max_ckpt_to_keep", ["trainer.max_ckpt_to_keep=0"]),
    "lr inf": ("actor.optim.lr", ["actor.optim.lr=.inf"]),
    "lr nan": ("actor.optim.lr", ["actor.optim.lr=nan"]),
    "temperature 0 while sampling": ("rollout.temperature", ["rollout.temperature=0"]),
    "missing data file": ("data.train_files", ["data.train_files=[no/such/train.parquet]"]),
    "unreadable data file": ("data.train_files", lambda t: [f"data.train_files=[{_file(t, 'x.parquet', 'not parquet at all')}]"]),
    "data rows without a prompt": ("data.train_files", lambda t: [f"data.train_files=[{_rows(t, [{'question': 'hi', 'data_source': 'openai/gsm8k'}])}]"]),
    "reward file that does not import": ("reward.custom.path", lambda t: [f"reward.custom.path={_file(t, 'r.py', 'import no_such_module_xyz')}"]),
    "generator package absent": ("data.train_generator.name", ["data.train_generator.name=reasoning_gym", "data.train_generator.dataset=basic_arithmetic"]),
    "empty output_dir": ("trainer.output_dir", ["trainer.output_dir="]),
    "cuda without a GPU": ("trainer.device", ["trainer.device=cuda"]),
    "duplicate key in a section": ("actor.ppo_epochs", lambda t: _file(t, "dup.yaml", "actor:\n  ppo_epochs: 1\n  ppo_epochs: 2\n")),
    "duplicate section": ("actor", lambda t: _file(t, "dup2.yaml", "actor:\n  ppo_epochs: 1\nrollout:\n  n: 2\nactor:\n  clip_ratio: 0.3\n")),
    # --- more that a user could plausibly write
    "wandb logger not installed": ("trainer.loggers", ["trainer.loggers=[console,wandb]"]),
    "top_p 0": ("rollout.top_p", ["rollout.top_p=0"]),
    "top_p above 1": ("rollout.top_p", ["rollout.top_p=1.5"]),
    "top_k -2": ("rollout.top_k", ["rollout.top_k=-2"]),
    "gpu memory fraction above 1": ("rollout.gpu_memory_utilization", ["rollout.gpu_memory_utilization=1.2"]),
    "gpu memory fraction 0": ("rollout.gpu_memory_utilization", ["rollout.gpu_memory_utilization=0"]),
    "lr 0": ("actor.optim.lr", ["actor.optim.lr=0"]),
    "negative lr": ("actor.optim.lr", ["actor.optim.lr=-1e-6"]),
    "adam eps 0": ("actor.optim.eps", ["actor.optim.eps=0"]),
    "beta2 of 1": ("actor.optim.betas[1]", ["actor.optim.betas=[0.9,1.0]"]),
    "beta nan": ("actor.optim.betas[1]", ["actor.optim.betas=[0.9,.nan]"]),
    "min lr ratio 2": ("actor.optim.min_lr_ratio", ["actor.optim.min_lr_ratio=2"]),
    "unknown scheduler": ("actor.optim.lr_scheduler", ["actor.optim.lr_scheduler=cosine_with_restarts"]),
    "kl controller typo": ("algorithm.kl_ctrl.type", ["algorithm.kl_ctrl.type=adaptve"]),
    "target kl 0": ("algorithm.kl_ctrl.target_kl", ["algorithm.kl_ctrl.target_kl=0"]),
    "negative value clip": ("critic.cliprange_value", ["critic.cliprange_value=-0.5"]),
    "critic loss_agg_mode": ("critic.loss_agg_mode", ["critic.loss_agg_mode=mean"]),
    "clip_ratio_high negative": ("actor.clip_ratio_high", ["actor.clip_ratio_high=-0.1"]),
    "clip ratio 1": ("actor.clip_ratio", ["actor.clip_ratio=1.0"]),
    "entropy coefficient nan": ("actor.entropy_coeff", ["actor.entropy_coeff=.nan"]),
    "gamma inf": ("algorithm.gamma", ["algorithm.gamma=.inf"]),
    "save_freq 0": ("trainer.save_freq", ["trainer.save_freq=0"]),
    "test_freq -5": ("trainer.test_freq", ["trainer.test_freq=-5"]),
    "negative validation temperature": ("rollout.val_temperature", ["rollout.val_temperature=-1"]),
    "response length 0": ("data.max_response_length", ["data.max_response_length=0"]),
    "val_max_samples 0": ("data.val_max_samples", ["data.val_max_samples=0"]),
    "0 training steps": ("trainer.total_training_steps", ["trainer.total_training_steps=0"]),
    "0 torch threads": ("trainer.torch_threads", ["trainer.torch_threads=0"]),
    "0 gpus": ("trainer.n_gpus_per_node", ["trainer.n_gpus_per_node=0"]),
    "0 ppo epochs": ("actor.ppo_epochs", ["actor.ppo_epochs=0"]),
    "reward on_error ignore": ("reward.on_error", ["reward.on_error=ignore"]),
    "dtype fp16 spelling": ("model.dtype", ["model.dtype=fp16"]),
    "negative reward timeout": ("reward.timeout_s", ["reward.timeout_s=-3"]),
    "empty experiment name": ("trainer.experiment_name", ["trainer.experiment_name="]),
    "generator size 0": ("data.train_generator.size", ["data.train_generator.name=reasoning_gym", "data.train_generator.dataset=basic_arithmetic", "data.train_generator.size=0"]),
    "generator dataset typo": ("data.train_generator.dataset", ["data.train_generator.name=reasoning_gym", "data.train_generator.dataset=basic_arithmetc"]),
    "generator name typo": ("data.train_generator.name", ["data.train_generator.name=reasoning-gym", "data.train_generator.dataset=basic_arithmetic"]),
    "generator without a dataset": ("data.train_generator.dataset", ["data.train_generator.name=reasoning_gym"]),
    "no training data": ("data.train_files", ["data.train_files=[]"]),
    "prompt_key the rows lack": ("data.train_files", ["data.prompt_key=question"]),
    "reward function missing": ("reward.custom.name", lambda t: [f"reward.custom.path={_file(t, 'r.py', NO_COMPUTE_SCORE)}", "reward.custom.name=compute_score"]),
    "reward function with the wrong signature": ("reward.custom.name", lambda t: [f"reward.custom.path={_file(t, 'r.py', WRONG_SIGNATURE)}"]),
    "reward kwargs the function does not take": ("reward.custom.name", lambda t: [f"reward.custom.path={_file(t, 'r.py', NO_KWARGS)}", "reward.kwargs={method: flexible}"]),
    "output_dir is a file": ("trainer.output_dir", lambda t: [f"trainer.output_dir={_file(t, 'out.txt', 'x')}"]),
    "lr inf in YAML": ("actor.optim.lr", lambda t: _file(t, "inf.yaml", "actor:\n  optim:\n    lr: .inf\n")),
    "reward option the reward rejects": ("reward.kwargs", ["reward.name=gsm8k", "reward.kwargs={method: flexibel}"]),
    "generator option of the wrong type": ("data.train_generator.kwargs.allow_parentheses", ["data.train_generator.name=reasoning_gym", "data.train_generator.dataset=basic_arithmetic", "data.train_generator.kwargs={allow_parentheses: 'no'}"]),
    "generator option misspelt": ("data.train_generator.kwargs.max_term", ["data.train_generator.name=reasoning_gym", "data.train_generator.dataset=basic_arithmetic", "data.train_generator.kwargs={max_term: 3}"]),
    "data file is a folder": ("data.train_files", lambda t: [f"data.train_files=[{t}]"]),
    "hf rollout engine option misspelt": ("rollout.engine_kwargs.static_decod", ["rollout.engine_kwargs.static_decod=false"]),
    "a pool of its own for a critic the run does not have": ("critic.n_gpus_per_node", ["critic.n_gpus_per_node=2", "critic.enable=false"]),
    "model.compile with the megatron backend": ("model.compile", ["train.name=megatron", "model.compile=true"]),
    "hf rollout sleep threshold above 1": ("rollout.engine_kwargs.sleep_threshold", ["rollout.engine_kwargs.sleep_threshold=5"]),
    "estimator option misspelt": ("algorithm.options.norm_adv_by_sd", ["algorithm.options.norm_adv_by_sd=false"]),
    "option of another estimator": ("algorithm.options.whiten", ["algorithm.options.whiten=false"]),
    "policy loss option of another loss": ("actor.policy_loss_options.clip_cov_ratio", ["actor.policy_loss_options.clip_cov_ratio=0.001"]),
    "estimator option value refused": ("algorithm.options.returns", ["algorithm.options.returns=to_go"]),
    "verl ray init key with no counterpart": ("ray_kwargs.ray_init.num_gpus", ["ray_kwargs.ray_init.num_gpus=8"]),
}


@pytest.fixture
def no_generator_package(monkeypatch, request):
    """Simulates a machine without reasoning-gym for the one case that needs it."""
    if request.node.callspec.params["case"] == "generator package absent":
        gens = pytest.importorskip("rl_data.generators", reason="the reasoning_gym generator is rl-data's (without it the name is unknown)")
        real = gens.installed
        monkeypatch.setattr(gens, "installed", lambda m: False if m == "reasoning_gym" else real(m))


@pytest.mark.parametrize("command", ["check", "dry-run", "train"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_config_is_refused_alike(case, command, tmp_path, capsys, no_generator_package):
    key, how = CASES[case]
    if case == "cuda without a GPU":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    got = how(tmp_path) if callable(how) else how
    path, overrides = (str(got), []) if isinstance(got, Path) else (None, got)
    args = [*([path] if path else []), *base(tmp_path), *overrides]
    argv = {"check": ["check", "--quiet"], "dry-run": ["train", "--dry-run", "--no-progress"], "train": ["train", "--no-progress"]}[command]
    code = main([*argv[:1], *args, *argv[1:]])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    lines = [line.strip() for line in err.splitlines()]
    named = [line for line in lines if line.removeprefix("error: ").startswith(f"{key}: ")]
    assert named, f"no problem names {key!r}:\n{err}"
    assert not (tmp_path / "out" / "metrics.jsonl").exists()  # nothing ran


def test_there_are_at_least_50_distinct_cases():
    assert len(CASES) >= 50
    assert len({tuple(v[1]) if isinstance(v[1], list) else k for k, v in CASES.items()}) == len(CASES)
