"""Teacher and student must share a tokenizer: the teacher scores the student's token ids as they are."""

from __future__ import annotations

from typing import Any


def tokenizer_mismatch(student: Any, teacher: Any, *, student_name: str, teacher_name: str) -> str | None:
    """A sentence saying how the two tokenizers differ (vocabulary, ids, end-of-sequence), or None when they agree."""
    sv, tv = student.get_vocab(), teacher.get_vocab()
    who = f"the student ({student_name}) and the teacher ({teacher_name})"
    if sv != tv:
        if len(sv) != len(tv):
            return f"{who} have different vocabularies: {len(sv)} vs {len(tv)} tokens"
        diff = sorted(set(sv.items()) ^ set(tv.items()), key=lambda kv: kv[1])[:3]
        return f"{who} have vocabularies of {len(sv)} tokens that map tokens to other ids, e.g. {diff}"
    if student.eos_token_id != teacher.eos_token_id:
        return f"{who} end sequences with different tokens: id {student.eos_token_id} vs {teacher.eos_token_id}"
    return None


TOKENIZER_FIX = ("distill from a teacher with the student's tokenizer (the same model family, or a checkpoint trained from "
                 "the student); rl-distill scores the student's token ids with the teacher as they are and does not map "
                 "one vocabulary onto another")
