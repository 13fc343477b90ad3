"""The shapes suite (benchmarks/shapes) as the linter sees it: no finding on a safe twin, and the
hazards it misses are exactly those recorded in benchmarks/shapes/misses.txt (a miss found, or a
finding lost, changes the record in the same commit, with the figures in docs/accuracy.md)."""

from __future__ import annotations

from pathlib import Path

from conftest import REPO, load_benchmark

shapes = load_benchmark("shapes")

RECORD = REPO / "benchmarks" / "shapes" / "misses.txt"


def test_every_shape_pair_is_complete() -> None:
    hazards = {p.name for p in (shapes.SHAPES / "hazards").glob("shape_*.py")}
    safe = {p.name for p in (shapes.SHAPES / "safe").glob("shape_*.py")}
    assert hazards == safe and len(hazards) >= 19


def test_safe_twins_are_clean_and_the_misses_are_the_recorded_ones() -> None:
    result = shapes.score()
    assert result["false"] == []
    assert result["missed"] == [line for line in RECORD.read_text(encoding="utf-8").splitlines() if line]
    found = sum(row["tp"] for row in result["codes"].values())
    assert found >= 25  # what the suite found when it was recorded


def test_the_record_names_only_expectations_of_the_suite() -> None:
    expected = {":".join(map(str, key)) for key in shapes.expected()}
    recorded = [line for line in Path(RECORD).read_text(encoding="utf-8").splitlines() if line]
    assert set(recorded) <= expected
