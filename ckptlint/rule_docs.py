"""Write docs/rules/CODE.md from the rules themselves: `python -m ckptlint.rule_docs docs/rules`.

A test checks the committed pages are current, so docs and `ckptlint rules CODE` never drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ckptlint.rules import ALL_RULES


def index() -> str:
    lines = ["# Rules", "", "| code | name | flags |", "| --- | --- | --- |"]
    for rule in ALL_RULES:
        lines.append(f"| [{rule.code}]({rule.code}.md) | {rule.name} | {rule.summary} |")
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    files = {f"{rule.code}.md": rule.document() for rule in ALL_RULES}
    files["README.md"] = index()
    return files


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "docs/rules")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (folder / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
