"""Print the README's fenced code block that follows a ``<!-- ci:NAME -->`` marker.

    python3 .ci/readme_block.py setup      # the set-up commands, as the README shows them
    python3 .ci/readme_block.py test       # the test command

`.ci/run` runs exactly these blocks (README and CI cannot drift apart). Exits 2,
naming the marker, when it or its fenced block is missing. Standard library only:
it runs before any venv exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
MARKERS = ("setup", "test")


def block(name: str, text: str | None = None) -> str:
    """The body of the first fenced block after ``<!-- ci:<name> -->`` (only blank lines between)."""
    text = README.read_text() if text is None else text
    marker = f"<!-- ci:{name} -->"
    at = text.find(marker)
    if at < 0:
        raise LookupError(f"README.md has no {marker} marker")
    m = re.match(r"\s*```[a-z]*\n(.*?)\n```", text[at + len(marker):], re.S)
    if m is None:
        raise LookupError(f"README.md's {marker} is not followed by a fenced code block")
    return m.group(1).strip() + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in MARKERS:
        print(f"usage: readme_block.py {{{','.join(MARKERS)}}}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(block(argv[0]))
    except LookupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
