"""rl-hf-decode's ``rollout.engine_kwargs`` keys in `rlcore check`: core's check of the hf rollout's keys takes them
because its feature card lists them (:mod:`rl_hf_decode.keys`), its own check refuses a value the decoder does not
take (:mod:`rl_hf_decode.checks`), and without the package each is a problem naming the install."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rl_core.cli.main import main
from rl_core.config.schema import RolloutConfig, RunConfig
from rl_core.plugins import get_registry
from rl_core_testing.blocked_plugins import blocked_plugins
from rl_core_testing.tiny_run import write_tiny_run

from rl_hf_decode.checks import RULES, value_problems
from rl_hf_decode.keys import KEYS

GOOD = ["static_decode=true", "cuda_graph=false", "compile=false", "pack_projections=true", "check_every=4", "decode_chunk=0",
        "decode_attention=sdpa", "decode_sampler=torch"]
BAD = {  # override -> the problem's line and the start of its fix
    "decode_chunk=-1": ("decode_chunk: must be a whole number of cache slots >= 0, got -1", "e.g. rollout.engine_kwargs.decode_chunk=1024"),
    "decode_attention=flash": ("decode_attention: must be auto, triton or sdpa, got 'flash'", "e.g. rollout.engine_kwargs.decode_attention=auto"),
    "decode_sampler=fast": ("decode_sampler: must be auto, triton or torch, got 'fast'", "e.g. rollout.engine_kwargs.decode_sampler=auto"),
    "check_every=0": ("check_every: must be a whole number of decode steps >= 1, got 0", "e.g. rollout.engine_kwargs.check_every=16"),
    "cuda_graph=1": ("cuda_graph: must be true or false, got 1", "e.g. rollout.engine_kwargs.cuda_graph=false"),
    "compile=maybe": ("compile: must be true or false, got 'maybe'", "e.g. rollout.engine_kwargs.compile=false"),
    "pack_projections=0": ("pack_projections: must be true or false, got 0", "e.g. rollout.engine_kwargs.pack_projections=false"),
    "static_decode=sometimes": ("static_decode: must be true or false, got 'sometimes'", "e.g. rollout.engine_kwargs.static_decode=false"),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return write_tiny_run(tmp_path_factory.mktemp("run"))


@pytest.fixture
def check(run, capsys):
    def check(*overrides: str) -> tuple[int, str]:
        code = main(["check", "--quiet", "--skip-device-check", str(run), *(f"rollout.engine_kwargs.{o}" for o in overrides)])
        return code, capsys.readouterr().err

    return check


@pytest.fixture
def without_the_package():
    with blocked_plugins("rl-hf-decode"):
        yield


def test_every_key_has_a_value_check():
    assert set(RULES) == set(KEYS) and "decode_sampler" in KEYS


def test_the_card_and_check_modules_are_light():
    """What the registry and `rlcore check` import of the package pulls no torch (the decoder's modules do)."""
    code = "import sys, rl_hf_decode.plugin, rl_hf_decode.checks\nassert 'torch' not in sys.modules, 'torch imported'\n"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_good_values_pass(check):
    code, err = check(*GOOD)
    assert code == 0, err


def test_each_bad_value_is_refused_naming_the_key_the_value_and_a_good_one(check):
    code, err = check(*BAD)
    assert code == 1
    for line, fix in BAD.values():
        assert f"rollout.engine_kwargs.{line}\n" in err and f"fix: {fix}" in err, (line, err)


def test_a_misspelt_key_is_a_typo_naming_the_key_meant(check):
    code, err = check("decode_chunks=512")
    assert code == 1
    assert "rollout.engine_kwargs.decode_chunks: is not an argument of the installed hf rollout (did you mean 'decode_chunk'?)" in err, err
    assert "fix: fix or remove rollout.engine_kwargs.decode_chunks\n" in err and "pip install" not in err, err


def test_only_the_hf_rollout_is_checked():
    given = {"decode_sampler": "fast", "decode_chunk": -1}
    assert len(value_problems(RunConfig(rollout=RolloutConfig(engine_kwargs=given)))) == 2
    assert value_problems(RunConfig(rollout=RolloutConfig(name="vllm", engine_kwargs=given))) == []


def test_without_the_package_its_keys_name_the_install(check, without_the_package):
    assert "hf_decode" not in get_registry().cards["feature"]
    code, err = check("decode_chunk=512", "decode_sampler=fast")
    assert code == 1
    for key in ("decode_chunk", "decode_sampler"):  # the key refused, not its value: no installed package reads it
        assert f"rollout.engine_kwargs.{key}: is not an argument of the installed hf rollout" in err, err
    assert err.count("if it is a key of the hf rollout's GPU decoder: pip install rl-hf-decode") == 2, err
    assert "got 'fast'" not in err
    assert check("static_decode=false")[0] == 0  # core's own switch: the plain loop
