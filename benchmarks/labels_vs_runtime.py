"""Judge the development set's "false" findings by the runtime companion instead of the labels.

The labels of `../shared/realworld/` list, for timm's BatchNorm blocks, only the first running-stat
call of a block (a convention its REVIEW.md names), while the contract reports every call. This
script asks the real-model pass (`benchmarks/real_models.py`) what the replay really did at each
location `score.py --show` calls false: the labelled commit's line is found in the installed
release by its text and the function holding it, and the report's verdict there is taken
(confirmed, contradicted, built another class, or never ran).

    python ../shared/realworld/score.py CORPUS --codes CKP201,...,CKP206 --show > score.txt
    python benchmarks/labels_vs_runtime.py score.txt CORPUS /tmp/real_models/report.json \
        --site-packages /tmp/venv-rm/lib/python3.11/site-packages --repo huggingface/pytorch-image-models
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import re
from pathlib import Path

FALSE = re.compile(r"^\s+false\s+(?P<repo>\S+) (?P<path>\S+):(?P<line>\d+) (?P<code>CKP\d+)")
VERDICTS = ("confirmed", "contradicted", "other_configuration", "unverified")


def enclosing_functions(path: Path) -> tuple[dict[int, str], list[str]]:
    """Line -> qualified name of the innermost def/class holding it, and the file's lines."""
    source = path.read_text(encoding="utf-8")
    holder: dict[int, str] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    holder[line] = name
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return holder, source.splitlines()


def same_lines(labelled: Path, line: int, installed: Path) -> list[int]:
    """The installed file's lines with the labelled line's text, in the function that holds it."""
    if not installed.is_file():
        return []
    holder, lines = enclosing_functions(labelled)
    text, function = lines[line - 1].strip(), holder.get(line)
    installed_holder, installed_lines = enclosing_functions(installed)
    return [n for n, t in enumerate(installed_lines, 1) if t.strip() == text and installed_holder.get(n) == function]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("score", type=Path, help="score.py --show output")
    parser.add_argument("corpus", type=Path, help="the folder prepare.py laid out")
    parser.add_argument("report", type=Path, help="real_models.py report --json output")
    parser.add_argument("--site-packages", type=Path, required=True, help="where the real-model venv installed the library")
    parser.add_argument("--repo", default="huggingface/pytorch-image-models")
    args = parser.parse_args()

    report = json.loads(args.report.read_text())
    verdict_at: dict[tuple[str, int, str], set[str]] = collections.defaultdict(set)
    for verdict in VERDICTS:
        for finding in report.get(verdict, []):
            if "path" in finding:
                verdict_at[(finding["path"], finding["line"], finding["code"])].add(verdict)

    counts: collections.Counter[str] = collections.Counter()
    for raw in args.score.read_text().splitlines():
        match = FALSE.match(raw)
        if not match:
            continue
        if match["repo"] != args.repo:
            counts["other repository"] += 1
            continue
        path, line, code = match["path"], int(match["line"]), match["code"]
        installed = args.site_packages / path
        verdicts: set[str] = set()
        for candidate in same_lines(args.corpus / args.repo.replace("/", "+") / path, line, installed):
            verdicts |= verdict_at.get((str(installed), candidate, code), set())
        judged = ",".join(sorted(verdicts)) or "not in the runtime report"
        counts[judged] += 1
        print(f"{path}:{line} {code} -> {judged}")
    print("false findings by runtime verdict:", dict(counts.most_common()))


if __name__ == "__main__":
    main()
