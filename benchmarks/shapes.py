"""Score ckptlint on the runnable shapes suite (benchmarks/shapes): per code, precision and recall.

Each shape is a hazard file and its safe twin of the same name under `hazards/` and `safe/`,
written apart from the analysis, and run on real torch by tests/test_shapes_*_runtime.py (the
hazard fails or diverges, the twin does not). Expected findings are the `# expect: CODE@col`
comments of the hazard files, at the lines the contract names; a safe twin expects none. Only the
codes the suite is written for are scored (CKP102, CKP3xx, CKP4xx): a finding of another family
(a CKP504 on a router's top-k) is neither true nor false here.

    python benchmarks/shapes.py            # the table, every miss and every false finding
    python benchmarks/shapes.py --json     # the same as data (tests/test_shapes.py reads it)
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHAPES = REPO / "benchmarks" / "shapes"
SCORED = re.compile(r"^CKP(102|3\d\d|4\d\d)$")
EXPECT = re.compile(r"expect:\s*((?:CKP\d{3}@\d+[\s,]*)+)")

Key = tuple[str, str, int, int]  # path relative to the repository, code, line, column


def expected() -> set[Key]:
    found: set[Key] = set()
    for path in sorted(SHAPES.glob("*/shape_*.py")):
        relative = path.relative_to(REPO).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = EXPECT.search(line)
            if match:
                for item in re.split(r"[\s,]+", match.group(1).strip()):
                    code, _, column = item.partition("@")
                    found.add((relative, code, number, int(column)))
    return found


def reported() -> set[Key]:
    completed = subprocess.run(
        [sys.executable, "-m", "ckptlint", "--no-cache", "--format", "json", "--exit-zero", "benchmarks/shapes"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(completed.stdout)
    findings = data if isinstance(data, list) else data["findings"]
    return {(f["path"], f["code"], f["line"], f["column"]) for f in findings}


def score() -> dict[str, object]:
    want = {k for k in expected() if SCORED.match(k[1])}
    got = {k for k in reported() if SCORED.match(k[1])}
    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for key in want:
        per[key[1]]["tp" if key in got else "fn"] += 1
    for key in got - want:
        per[key[1]]["fp"] += 1
    codes = {
        code: {
            **{k: counts[k] for k in ("tp", "fp", "fn")},
            "precision": round(counts["tp"] / (counts["tp"] + counts["fp"]), 3) if counts["tp"] + counts["fp"] else 1.0,
            "recall": round(counts["tp"] / (counts["tp"] + counts["fn"]), 3) if counts["tp"] + counts["fn"] else 1.0,
        }
        for code, counts in sorted(per.items())
    }
    return {
        "codes": codes,
        "missed": sorted(":".join(map(str, k)) for k in want - got),
        "false": sorted(":".join(map(str, k)) for k in got - want),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = score()
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{'code':8} {'tp':>3} {'fp':>3} {'fn':>3} {'prec':>6} {'recall':>6}")
    for code, row in result["codes"].items():  # type: ignore[union-attr]
        print(f"{code:8} {row['tp']:3} {row['fp']:3} {row['fn']:3} {row['precision']:6.3f} {row['recall']:6.3f}")
    for kind in ("missed", "false"):
        for item in result[kind]:  # type: ignore[union-attr]
            print(f"  {kind:6} {item}")


if __name__ == "__main__":
    main()
