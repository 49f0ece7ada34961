"""`rlcore data`: write prompt data in verl's parquet row format.

    rlcore data gsm8k --src ../shared/data/gsm8k/train.jsonl --out data/gsm8k/train.parquet
    rlcore data reasoning-gym basic_arithmetic --size 2000 --seed 0 --out data/arith/train.parquet \\
        --system-prompt "Answer with the final number only." --kwargs '{"max_terms": 2}'

Bad input (a missing file, a row without question / answer, an unknown
dataset) prints one line naming it and the fix, and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from rl_core.data.convert import DataConvertError


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="convert or generate prompt data (verl's parquet row format)")
    p.set_defaults(func=run, data_command=None, _data_parser=p)
    kinds = p.add_subparsers(dest="data_command", metavar="SOURCE")

    g = kinds.add_parser("gsm8k", help="GSM8K jsonl ({question, answer} per line) -> parquet")
    g.add_argument("--src", required=True, help="GSM8K jsonl file")
    g.add_argument("--out", required=True, help="output .parquet file")
    g.add_argument("--split", default=None, help="extra_info.split (default: 'train' / 'test' from the file name)")

    r = kinds.add_parser("reasoning-gym", help="generate a reasoning-gym dataset offline -> parquet")
    r.add_argument("name", help="reasoning-gym dataset name, e.g. basic_arithmetic")
    r.add_argument("--size", type=int, default=1000, help="number of items (default 1000)")
    r.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    r.add_argument("--out", required=True, help="output .parquet file")
    r.add_argument("--system-prompt", default=None, help="a system message put before each question")
    r.add_argument("--kwargs", default=None, help='dataset options as a JSON object, e.g. \'{"max_terms": 2}\'')
    r.add_argument("--split", default="train", help="extra_info.split (default train)")


def _kwargs(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise DataConvertError(f"--kwargs is not valid JSON ({exc}); give an object, e.g. '{{\"max_terms\": 2}}'") from None
    if not isinstance(value, dict):
        raise DataConvertError(f"--kwargs must be a JSON object, got {type(value).__name__}; e.g. '{{\"max_terms\": 2}}'")
    return value


def run(args: argparse.Namespace) -> int:
    from rl_core.data import convert

    try:
        if args.data_command == "gsm8k":
            n = convert.convert_gsm8k(args.src, args.out, split=args.split)
        elif args.data_command == "reasoning-gym":
            rows = convert.generate_reasoning_gym_rows(
                args.name, args.size, args.seed, _kwargs(args.kwargs), args.system_prompt, split=args.split
            )
            n = convert.write_parquet(rows, args.out)
        else:
            args._data_parser.print_help(sys.stderr)
            return 2
    except (DataConvertError, OSError) as exc:
        msg = str(exc) if isinstance(exc, DataConvertError) else f"{exc.filename or args.out}: {exc.strerror or exc}"
        print(f"error: {msg}", file=sys.stderr)
        return 1
    print(f"wrote {n} rows to {args.out}")
    return 0
