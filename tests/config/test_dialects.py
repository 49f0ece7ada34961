"""Core's side of dialects (rl_core.config.dialect): a native launch is read by core alone; a key, an option or a
grammar that only a dialect plugin reads is an error naming the distribution to install when none is installed."""

from __future__ import annotations

import pytest

from rl_core.config import load
from rl_core.config.dialect import Launch, grammar_of, is_ours, parse_override
from rl_core.config.load import load_report
from rl_core.problems import errors


@pytest.fixture
def no_dialect(monkeypatch):
    monkeypatch.setattr(load, "dialects", lambda: [])


def test_rl_cores_own_override_form():
    assert parse_override("actor.optim.lr=1e-6")[:2] == ("actor.optim.lr", 1e-6)
    assert parse_override("data.train_files=['a.parquet', b.parquet]")[:2] == ("data.train_files", ["a.parquet", "b.parquet"])
    assert parse_override("trainer.output_dir=/tmp/x/~y")[:2] == ("trainer.output_dir", "/tmp/x/~y")
    assert parse_override("reward.kwargs.url=http://h:1/p?q=1")[:2] == ("reward.kwargs.url", "http://h:1/p?q=1")
    key, _, problem = parse_override("data.train_batch_size=[1,")
    assert key == "data.train_batch_size" and "not valid YAML" in problem.what
    assert parse_override("no_equals")[2] is not None
    assert grammar_of("+a.b=1") and grammar_of("~a.b") and grammar_of("actor@x.y=z") and not grammar_of("a.b=x@y")


def test_is_ours():
    assert is_ours("model.lora_rank") and is_ours("async.max_staleness") and is_ours("reward.kwargs.anything")
    assert not is_ours("actor_rollout_ref.model.lora_rank") and not is_ours("rollout.nn") and not is_ours("profile")


def test_a_native_launch_needs_no_dialect(no_dialect):
    loaded = load_report("examples/quickstart.yaml", ["model.lora_rank=8", "async.max_staleness=0"])
    assert not errors(loaded.problems) and loaded.config.model.lora_rank == 8 and loaded.profile == "rl-core"
    (p,) = errors(load_report(None, ["rollout.temprature=0.5"]).problems)  # a typo stays a typo, with its hint
    assert p.key == "rollout.temprature" and "looks like a typo" in p.what


def test_without_the_dialect_its_spelling_names_the_plugin(no_dialect):
    (p,) = errors(load_report("examples/quickstart.yaml", ["actor_rollout_ref.model.lora_rank=8"]).problems)
    assert p.key == "actor_rollout_ref.model.lora_rank" and "pip install rl-verl" in p.fix
    (p,) = errors(load_report(None, ["+trainer.total_epochs=2"]).problems)
    assert p.key == "+trainer.total_epochs" and "Hydra's override grammar" in p.what and "pip install rl-verl" in p.fix
    (p,) = errors(load_report(None, [], config_name="ppo_trainer").problems)
    assert p.key == "--config-name" and "pip install rl-verl" in p.fix


def test_the_cli_names_the_plugin_of_an_option(no_dialect, capsys):
    from rl_core.cli.main import main

    with pytest.raises(SystemExit):
        main(["check", "--config-name", "ppo_trainer"])
    assert "pip install rl-verl" in capsys.readouterr().err


def test_a_launch_is_a_plain_record():
    launch = Launch(data={"a": 1}, overrides=["b=2"], options={"config_name": None})
    assert launch.overrides == ("b=2",) and launch.options == {"config_name": None}


def test_plugin_commands_join_the_cli_and_never_replace_cores(monkeypatch, capsys):
    from rl_core.cards import CommandCard, Provider
    from rl_core.cli import main as cli
    from rl_core.plugins import Registry

    def add_parser(sub):
        p = sub.add_parser("hello-test", help="says hello")
        p.set_defaults(func=lambda args: print("hello") or 0)

    registry = Registry()
    for card in (CommandCard(name="hello-test", factory=add_parser), CommandCard(name="check", factory=add_parser)):
        registry.add(card, Provider(distribution="thirdparty-test"))
    monkeypatch.setattr("rl_core.plugins.get_registry", lambda **kw: registry)
    assert cli.main(["hello-test"]) == 0
    out = capsys.readouterr()
    assert "hello" in out.out and "the command 'check' of thirdparty-test is left out" in out.err


def test_a_first_party_command_not_installed_names_its_distribution(monkeypatch, capsys):
    from rl_core.cli import main as cli
    from rl_core.plugins import Registry

    monkeypatch.setattr("rl_core.plugins.get_registry", lambda **kw: Registry())  # no plugin installed
    assert cli.main(["data", "gsm8k", "--src", "train.jsonl"]) == 1
    err = capsys.readouterr().err
    assert "`rlcore data` comes with the distribution rl-data, which is not installed: pip install rl-data" in err
    assert "Traceback" not in err
    assert cli.main(["traces", "out"]) == 1 and "pip install rl-traces" in capsys.readouterr().err
