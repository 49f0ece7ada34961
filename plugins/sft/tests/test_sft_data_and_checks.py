"""SFT rows -> token ids and loss masks (chat, multi-turn, tool turns, no template), and `rlcore check`'s SFT errors."""

from __future__ import annotations

import json

import pytest
from rl_core_testing.tiny_model import build_tokenizer
from rl_sft.data import SFTDataError, build_examples, conversation, encode
from rl_sft.options import SFTOptions
from sft_helpers import report, sft_rows, write_rows, write_sft_run


def trained_text(tok, row, chat=True):
    messages, trained, tools = conversation(row, "row", "prompt", SFTOptions())
    ids, mask = encode(tok, messages, trained, tools, chat=chat, template_kwargs={}, where="row")
    assert len(ids) == len(mask)
    pieces, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            pieces.append(tok.decode(cur))
            cur = []
    if cur:
        pieces.append(tok.decode(cur))
    return tok.decode(ids), pieces


def test_prompt_response_row_trains_on_the_answer_and_its_end_of_turn():
    full, pieces = trained_text(build_tokenizer(), {"prompt": "1+2=", "response": "3"})
    assert full == "<|im_start|>user\n1+2=<|im_end|>\n<|im_start|>assistant\n3<|im_end|>\n"
    assert pieces == ["3<|im_end|>\n"]


def test_multi_turn_and_tool_turns_train_only_the_assistant_turns_not_switched_off():
    rows = sft_rows()
    assert trained_text(build_tokenizer(), rows[-2])[1] == ["4<|im_end|>\n", "6<|im_end|>\n"]
    full, pieces = trained_text(build_tokenizer(), rows[-1])  # assistant "call" has loss: false; the tool turn is never trained
    assert "call" in full and "<|im_start|>tool\n5" in full
    assert pieces == ["5<|im_end|>\n"]


def test_without_a_chat_template_the_response_ends_with_eos():
    _, pieces = trained_text(build_tokenizer(), {"prompt": "1+2=", "response": "3"}, chat=False)
    assert pieces == ["3<|im_end|>"]


def test_verl_style_keys_and_a_string_prompt():
    opts = SFTOptions(response_key="answer")
    messages, trained, _ = conversation({"question": "hi", "answer": "yo"}, "row", "question", opts)
    assert messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}] and trained == [False, True]


def test_a_row_cut_to_nothing_trained_is_refused_when_encoded(tmp_path):
    from types import SimpleNamespace

    cfg = SimpleNamespace(data=SimpleNamespace(prompt_key="prompt", max_prompt_length=8, max_response_length=2, apply_chat_template=True,
                                               chat_template_kwargs={}))
    row = [("r0", {"prompt": "a long prompt here", "response": "x"})]
    with pytest.raises(SFTDataError, match="over the limit"):
        build_examples(row, build_tokenizer(), cfg, SFTOptions())
    with pytest.raises(SFTDataError, match="loss mask is empty"):
        build_examples(row, build_tokenizer(), cfg, SFTOptions(truncation="right"))


@pytest.mark.parametrize(
    "rows, key, words",
    [
        ([{"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": "1"}}], "data.train_files", "no response"),
        ([{"prompt": "q", "response": "  "}], "data.train_files", "is empty"),
        ([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "loss": False}]}], "data.train_files", "loss mask is empty"),
        ([{"messages": [{"role": "user", "content": "q"}]}], "data.train_files", "loss mask is empty"),
    ],
    ids=["no-response", "empty-response", "loss-switched-off", "no-assistant-turn"],
)
def test_check_names_the_row_without_anything_to_train_on(tmp_path, rows, key, words):
    cfg = write_sft_run(tmp_path)
    write_rows(tmp_path / "sft.jsonl", sft_rows() + rows)
    rep = report(cfg)
    assert rep.plan is None
    bad = [p for p in rep.errors if p.key == key]
    assert bad and words in bad[0].what and "row 14" in bad[0].what, [str(p) for p in rep.errors]


@pytest.mark.parametrize(
    "override, key, words",
    [
        ("rollout.n=4", "rollout.n", "one sequence"),
        ("actor.use_kl_loss=true", "actor.use_kl_loss", "no reference"),
        ("trainer.kind_options.respons_key=answer", "trainer.kind_options.respons_key", "response_key"),
        ("trainer.kind=sfx", "trainer.kind", "sfx"),
        ("actor.policy_loss=gspo", "actor.policy_loss", "trainer.kind=sft"),
    ],
)
def test_check_refuses_what_sft_cannot_honour(tmp_path, override, key, words):
    rep = report(write_sft_run(tmp_path), override)
    assert rep.plan is None
    assert any(p.key == key and words in (p.what + p.fix) for p in rep.errors), [f"{p.key}: {p.what}" for p in rep.errors]


def test_a_good_sft_config_resolves_without_a_rollout_and_with_the_sft_loss(tmp_path):
    rep = report(write_sft_run(tmp_path))
    assert rep.plan is not None, [str(p) for p in rep.errors]
    assert rep.plan.config.actor.policy_loss == "sft" and not rep.plan.needs_rollout and rep.plan.run_kind.name == "sft"


def test_verls_sft_keys_map_onto_the_sft_run(tmp_path):
    pytest.importorskip("rl_verl", reason="needs the rl-verl plugin (pip install -e plugins/verl)")
    rows = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(8)]
    cfg = write_sft_run(tmp_path, rows=rows)
    rep = report(cfg, "data.prompt_key=question", "data.response_key=answer", "data.max_length=99", "optim.lr=0.5",
                 "data.micro_batch_size_per_gpu=1", f"model.partial_pretrain={tmp_path / 'model'}", "data.multiturn.enable=false")
    assert rep.plan is not None, [str(p) for p in rep.errors]
    c = rep.plan.config
    assert c.trainer.kind_options == {"response_key": "answer", "max_length": 99}
    assert c.actor.optim.lr == 0.5 and c.actor.ppo_micro_batch_size_per_gpu == 1 and c.data.prompt_key == "question"


def test_generated_rows_train_on_their_answers_and_need_no_reward(tmp_path):
    pytest.importorskip("reasoning_gym", reason="needs reasoning-gym (rl-reward-rule[reasoning-gym])")
    from rl_sft.data import split_rows

    gen = ["data.train_files=[]", "data.val_files=[]", "data.train_generator.name=reasoning_gym", "data.train_generator.dataset=basic_arithmetic",
           "data.train_generator.size=8", "data.train_generator.system_prompt=Answer with the final number only."]
    rep = report(write_sft_run(tmp_path), *gen)
    assert rep.plan is not None, [str(p) for p in rep.errors]  # no reward is asked for
    from rl_data.generators import generate_rows

    generated_rows = rep.plan.features.get("generated_data")  # rl-data's feature object, loaded once by the plan
    rows = split_rows(rep.plan.config, "train", generated_rows=generated_rows)
    generated = generate_rows(rep.plan.config.data.train_generator, "train")
    assert [r["response"] for _, r in rows] == [g["ground_truth"] for g in generated] and len(rows) == 8
    assert [r["prompt"] for _, r in rows] == [g["prompt"] for g in generated]
    for _, row in rows:  # the worked answer, checked independently: the expression in the question evaluates to it
        expr = json.loads(next(g for g in generated if g["prompt"] == row["prompt"])["extra_info"]["entry"])["metadata"]["expression"]
        assert abs(eval(expr, {"__builtins__": {}}) - float(row["response"])) < 1e-9  # noqa: S307 - arithmetic made by the test's generator
