"""Credential-like config values are masked wherever the config is printed or saved."""

from __future__ import annotations

from pathlib import Path

from rl_core.cli.main import main
from rl_core.config.load import MASK, config_to_dict, load_config, looks_secret, mask_secrets

TINY_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"
SECRETS = ["reward.kwargs={api_key: sk-live-123, judge: {password: hunter2}, max_tokens: 64, timeout: 5}",
           "rollout.engine_kwargs={hf_token: hf_abc, seed: 3}", "algorithm.options={clientSecret: s3cr3t}"]


def test_names_that_look_like_credentials():
    for name in ("api_key", "apiKey", "OPENAI_API_KEY", "hf_token", "token", "password", "db_password", "clientSecret", "key", "auth"):
        assert looks_secret(name), name
    for name in ("max_tokens", "monkey", "keyword", "prompt", "tokenizer_path", "seed"):
        assert not looks_secret(name), name


def test_config_to_dict_masks_free_form_values_only():
    cfg = load_config(None, SECRETS)
    d = config_to_dict(cfg)
    assert d["reward"]["kwargs"] == {"api_key": MASK, "judge": {"password": MASK}, "max_tokens": 64, "timeout": 5}
    assert d["rollout"]["engine_kwargs"] == {"hf_token": MASK, "seed": 3}
    assert d["algorithm"]["options"] == {"clientSecret": MASK}
    assert d["data"]["prompt_key"] == "prompt"  # a schema field, not a credential
    # the run itself keeps the real values; unmasked on request
    assert cfg.reward.kwargs["api_key"] == "sk-live-123"
    assert config_to_dict(cfg, mask=False)["reward"]["kwargs"]["api_key"] == "sk-live-123"
    assert mask_secrets([{"token": ""}, {"token": "x"}]) == [{"token": ""}, {"token": MASK}]


def test_check_never_prints_them(capsys):
    base = ["check", "model.path=Qwen/Qwen2.5-0.5B", f"data.train_files=[{TINY_DATA}]", "trainer.device=cpu", "data.train_batch_size=4",
            "rollout.n=2", "actor.ppo_mini_batch_size=4"]
    code = main([*base, SECRETS[0]])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "api_key: '***'" in out.out
    # the hf rollout takes neither hf_token nor seed, grpo reads no clientSecret: refused by name, the value never shown
    code = main([*base, *SECRETS])
    out2 = capsys.readouterr()
    assert code == 1 and "rollout.engine_kwargs.hf_token: is not an argument" in out2.err, out2.err
    assert "algorithm.options.clientSecret: is not an option of the estimator 'grpo'" in out2.err
    for secret in ("sk-live-123", "hunter2", "hf_abc", "s3cr3t"):
        assert secret not in out.out + out.err + out2.out + out2.err


def test_a_real_run_saves_the_config_masked_and_uses_the_real_value(tmp_path, capsys):
    from tests.e2e.helpers import write_tiny_run

    cfg = write_tiny_run(tmp_path, steps=1, reward__kwargs={"api_key": "sk-live-123"})
    reward = tmp_path / "reward.py"  # the scorer sees the real key
    reward.write_text(reward.read_text() + "\n\ndef checked(data_source, solution_str, ground_truth, extra_info=None, api_key=None, **kw):\n"
                      "    assert api_key == 'sk-live-123'\n    return compute_score(data_source, solution_str, ground_truth, extra_info)\n")
    assert main(["train", str(cfg), "reward.custom.name=checked", "--no-progress"]) == 0, capsys.readouterr().err
    saved = (tmp_path / "out" / "config.yaml").read_text()
    assert "api_key: '***'" in saved and "sk-live-123" not in saved
    out = capsys.readouterr()
    assert "sk-live-123" not in out.out + out.err


def test_the_saved_and_tracked_config_is_masked():
    # the trainer writes config_to_dict(cfg) to output_dir/config.yaml and hands the same dict to the trackers
    import inspect

    from rl_core.trainer import loop

    src = inspect.getsource(loop)  # the config.yaml write and the trackers' config (both in the trainer module)
    assert src.count("config_to_dict(cfg)") + src.count("config_to_dict(self.config)") == 2
    assert "mask=False" not in src
