"""Generated programs never crash the linter (hypothesmith: from the grammar and from libcst's
node types). CI runs a bounded number of examples; `benchmarks/fuzz.py` runs many more."""

from __future__ import annotations

import os
from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptlint.config import Config
from ckptlint.engine import Linter, lint_source

# hypothesmith compiles what it generates, and CPython warns about code like `1()`
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")

EXAMPLES = int(os.environ.get("CKPTLINT_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

# a checkpoint call around generated code, so the region analysis runs on it too
WRAPPED = "from torch.utils.checkpoint import checkpoint\n\n\ndef region(x):\n{body}\n\n\ncheckpoint(region, 1)\n"


def _check(source: str) -> None:
    findings = lint_source(source, "fuzzed.py")
    lines = source.count("\n") + 2
    for finding in findings:
        assert finding.code.startswith("CKP")
        assert 1 <= finding.line <= finding.end_line <= lines + 1


def _indented(source: str) -> str:
    body = "\n".join("    " + line for line in source.splitlines()) or "    pass"
    return body + "\n    return x"


@FUZZ
@given(hypothesmith.from_grammar())
def test_programs_from_the_grammar(source: str) -> None:
    _check(source)
    _check(WRAPPED.format(body=_indented(source)))


@FUZZ
@given(hypothesmith.from_node())
def test_programs_from_libcst_nodes(source: str) -> None:
    _check(source)
    _check(WRAPPED.format(body=_indented(source)))


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes(data: bytes) -> None:
    target = Path.cwd() / "bytes.py"
    result = Linter(Config(root=Path.cwd()), overlays={target: data}).lint_files([target])
    assert all(f.code.startswith("CKP") for f in result.findings)
