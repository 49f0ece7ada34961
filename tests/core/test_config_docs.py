"""docs/config.md's key table is the schema's own: each documented key's type, default and allowed values.

Keys added to the schema but not yet in the table do not fail here (several people add keys at once);
regenerate the table with ``python -m tests.config.keytable``.
"""

from __future__ import annotations

from pathlib import Path

from tests.config.keytable import key_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _rows(lines) -> dict[str, str]:
    return {line.split("`")[1]: line for line in lines if line.startswith("| `") and line.count("|") >= 5 and "." in line.split("`")[1]}


def test_the_documented_keys_match_the_schema():
    documented = _rows(DOC.read_text().split("## Every key", 1)[1].split("\n## ", 1)[0].splitlines())
    generated = _rows(key_table().splitlines())
    assert len(documented) > 100
    stale = [row for key, row in documented.items() if generated.get(key) != row]
    assert not stale, "docs/config.md is out of date; regenerate its table with `python -m tests.config.keytable`:\n" + "\n".join(stale)
