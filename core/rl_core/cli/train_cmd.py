"""`rlcore train`: placeholder until the loop lands."""


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train (not yet available)")
    p.set_defaults(func=lambda args: 1)
