"""`rlcore data`: write prompt data in verl's parquet row format.

    rlcore data gsm8k                      # fetched from the Hugging Face hub -> data/gsm8k/train.parquet
    rlcore data gsm8k --split test         # -> data/gsm8k/test.parquet
    rlcore data gsm8k --src train.jsonl --out data/gsm8k/train.parquet    # a local copy (.jsonl or .parquet)
    rlcore data reasoning-gym basic_arithmetic --size 2000 --seed 0 --out data/arith/train.parquet \\
        --system-prompt "Answer with the final number only." --kwargs '{"max_terms": 2}'

Fetching goes through the optional `datasets` package (``pip install 'rl-data[hub]'``);
without a network the error says where to download the files for ``--src``.
Bad input (a missing or binary file, a row without question / answer, an unknown
dataset, ``--out`` naming the source itself) prints one line naming it and the fix, and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from rl_data import convert
from rl_data.convert import DataConvertError
from rl_data.hub import fetch_records


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="convert or generate prompt data (verl's parquet row format)")
    p.set_defaults(func=run, data_command=None, _data_parser=p)
    kinds = p.add_subparsers(dest="data_command", metavar="SOURCE")

    g = kinds.add_parser("gsm8k", help="GSM8K from the Hugging Face hub (needs `datasets`) or a local file -> parquet")
    g.add_argument("--src", default=None, help="a local GSM8K .jsonl ({question, answer} per line) or .parquet; default: fetch openai/gsm8k from the hub")
    g.add_argument("--out", default=None, help="output .parquet file (default: data/gsm8k/<split>.parquet)")
    g.add_argument("--split", default=None, help="train or test (default: train, or the one in --src's file name); also extra_info.split")

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
    try:
        if args.data_command == "gsm8k":
            if args.src is not None:
                args.out = args.out or f"data/gsm8k/{args.split or convert.infer_split(args.src)}.parquet"
                n = convert.convert_gsm8k(args.src, args.out, split=args.split)
            else:
                split = args.split or "train"
                args.out = args.out or f"data/gsm8k/{split}.parquet"
                records = fetch_records("gsm8k", split)
                n = convert.write_parquet(convert.gsm8k_rows(((f"openai/gsm8k {split}, row {i}", r) for i, r in enumerate(records)), split), args.out)
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
