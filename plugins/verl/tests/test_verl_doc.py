"""docs/migrating-from-verl.md is generated from the rule table and must be current."""

from pathlib import Path

from rl_verl import keys as vk
from rl_verl.doc import render

DOC = Path(__file__).resolve().parents[3] / "docs" / "migrating-from-verl.md"


def test_the_doc_is_current():
    assert DOC.read_text() == render(), "docs/migrating-from-verl.md is stale: python -m rl_verl.doc > docs/migrating-from-verl.md"


def test_every_rule_is_a_row_and_every_refusal_says_where_to_go():
    text = DOC.read_text()
    for rule in vk.RULES:
        assert f"`{rule.pattern}`" in text.replace("\\|", "|"), rule.pattern
        if rule.kind in (vk.REFUSE, vk.SAME):
            assert rule.note and (rule.nearest or rule.kind == vk.SAME), rule.pattern
