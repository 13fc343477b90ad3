"""Every module an analysis reads is one of the dependencies the cache records for its file.

A cached result is redone only when a recorded dependency changes, so a module read but not
recorded is a warm run that can differ from a cold one. Memos shared between the files of a
worker hide reads, so the check is against a fresh worker: what a file's analysis loads there
is what it reads (findings do not depend on what a worker analysed before). The holes this
found in the fixtures (28 of 395 files) are the cache tests on the side-effect flag, context
files and a builder's sites beside it; timm's (a memoised answer read beside a module) is the
two-model test here."""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES, load_benchmark


def test_no_fixture_analysis_reads_a_module_its_cached_result_does_not_depend_on() -> None:
    found = load_benchmark("dependency_soundness").check(FIXTURES, sample=10_000, jobs=1)
    assert found.analysed > 350
    assert found.unrecorded == {}
    assert len(found.recorded) == found.analysed


def test_what_a_memoised_answer_read_beside_a_module_is_read_by_every_file_that_uses_it(tmp_path: Path) -> None:
    """Two models build the same builder. The first analysis works out the builder's sites from
    the files beside it (`user.py`, and each model) and records them; the second took the
    answer from the type memos and recorded none of them (timm's mobilenetv5 and
    efficientnet.py). What is read beside a module is now an edge from that module, followed
    as its imports are."""
    from test_construction import BUILDER, BUILT_MODEL

    (tmp_path / "pyproject.toml").write_text("")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "builder.py").write_text(BUILDER)
    (package / "model_a.py").write_text(BUILT_MODEL.format(arguments=""))
    (package / "model_b.py").write_text(BUILT_MODEL.format(arguments="").replace("class Net", "class OtherNet"))
    (package / "user.py").write_text("from torch import nn\n\nfrom pkg.builder import Builder\n\nBLOCK = Builder(norm_layer=nn.LayerNorm).block()\n")
    found = load_benchmark("dependency_soundness").check(package, sample=100, jobs=1)
    assert found.analysed == 2 and found.unrecorded == {}
