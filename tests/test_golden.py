"""The JSON report on the shipped fixtures and examples, byte for byte.

A guard for changes meant to keep behaviour (refactors, speed work): any difference in a
finding, its position or its wording fails here. When a change is meant to alter the
output, regenerate the files and review the diff:

    ckptlint fixtures --format json --no-cache > tests/data/golden/fixtures.json
    ckptlint examples --format json --no-cache > tests/data/golden/examples.json
"""

from __future__ import annotations

import pytest

from conftest import REPO, run_cli

GOLDEN = REPO / "tests" / "data" / "golden"


@pytest.mark.parametrize("folder", ["fixtures", "examples"])
def test_json_report_is_unchanged(folder: str) -> None:
    completed = run_cli(folder, "--format", "json", "--no-cache")
    assert completed.returncode == 1, completed.stderr.decode()
    expected = (GOLDEN / f"{folder}.json").read_bytes()
    assert completed.stdout.decode().splitlines() == expected.decode().splitlines()
