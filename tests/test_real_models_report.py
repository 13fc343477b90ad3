"""benchmarks/realmodels/report.py's figures: strict precision counts confirmed findings against
those the replay contradicted or that concern a class the configuration did not build; findings
whose line never ran or that need a GPU are unverified, counted and listed apart."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from realmodels import report  # noqa: E402


def _judged(verdict: str, why: str = "", code: str = "CKP204") -> dict[str, object]:
    return {"library": "timm", "code": code, "path": "m.py", "line": 1, "column": 1, "message": "m", "verdict": verdict, "why": why}


def test_strict_precision_leaves_unverified_findings_out_and_counts_other_classes_against() -> None:
    judged = [
        *[_judged("confirmed") for _ in range(9)],
        _judged("contradicted", "ran, no divergence"),
        _judged("other configuration", report.OTHER_CLASS),
        *[_judged("unverified", report.NOT_RUN) for _ in range(5)],
        _judged("unverified", report.NEEDS_GPU, "CKP205"),
    ]
    figures = report._figures({"tried": 1, "run": 1, "architectures": 1, "failed": {}}, set(), [], judged)
    assert figures["precision"] == round(9 / 11, 3)
    assert (figures["confirmed"], figures["contradicted"], figures["other_configuration"], figures["unverified"]) == (9, 1, 1, 6)
    assert figures["unverified_by"] == {report.NOT_RUN: 5, report.NEEDS_GPU: 1}


def test_no_verified_finding_gives_no_precision() -> None:
    figures = report._figures({"tried": 0, "run": 0, "architectures": 0, "failed": {}}, set(), [], [_judged("unverified", report.NOT_RUN)])
    assert figures["precision"] is None and figures["unverified"] == 1
