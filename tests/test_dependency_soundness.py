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

# a model whose region runs `{helper}` of `pkg.ops` (a function)
HELPER_MODEL = (
    "from torch import nn\nfrom torch.utils.checkpoint import checkpoint\n\nfrom pkg.ops import {helper}\n\n\n"
    "class {name}(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n\n"
    "    def block(self, x):\n        return {helper}(self.fc(x))\n\n"
    "    def forward(self, x):\n        return checkpoint(self.block, x, use_reentrant=False)\n"
)
# a model whose region runs `pkg.ops.Jitter` (a module)
JITTER_MODEL = (
    "from torch import nn\nfrom torch.utils.checkpoint import checkpoint\n\nfrom pkg.ops import Jitter\n\n\n"
    "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.jitter = Jitter()\n\n"
    "    def forward(self, x):\n        return checkpoint(self.jitter, x, use_reentrant=False)\n"
)


def _package(tmp_path: Path, **modules: str) -> Path:
    """`tmp_path/pkg` holding `modules` (stem -> text) and an empty `__init__.py`, under a `pyproject.toml`."""
    (tmp_path / "pyproject.toml").write_text("")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for stem, text in modules.items():
        (package / f"{stem}.py").write_text(text)
    return package


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

    package = _package(
        tmp_path,
        builder=BUILDER,
        model_a=BUILT_MODEL.format(arguments=""),
        model_b=BUILT_MODEL.format(arguments="").replace("class Net", "class OtherNet"),
        user="from torch import nn\n\nfrom pkg.builder import Builder\n\nBLOCK = Builder(norm_layer=nn.LayerNorm).block()\n",
    )
    found = load_benchmark("dependency_soundness").check(package, sample=100, jobs=1)
    assert found.analysed == 2 and found.unrecorded == {}


def test_definition_reads_tells_a_name_read_from_a_module_walked_whole(tmp_path: Path) -> None:
    """benchmarks/definition_reads.py, which sizes a dependency keyed by definitions: a model
    whose region runs a helper of `ops.py` reads the helper by name and the other function not
    at all; the block's module, whose classes' attributes the mutability analysis gathers from
    every statement of it, is walked whole. Each count is one the benchmark prints."""
    package = _package(
        tmp_path,
        ops="import random\n\n\ndef jitter(x):\n    return x * random.random()\n\n\ndef unused(x):\n    return x\n",
        model=HELPER_MODEL.format(helper="jitter", name="Net"),
    )
    benchmark = load_benchmark("definition_reads")
    (found,) = benchmark.measure(package, [package / "ops.py"], sample=10, jobs=1)
    (reads,) = found.measured.values()
    assert found.dependents == 1
    assert "jitter" in reads.names and "unused" not in reads.names
    lines = benchmark.report(found, package)
    assert lines[0].startswith("ops.py: 1 dependents, 1 analysed alone; 1 read it")


def test_definition_reads_shared_charges_a_file_with_what_its_process_read_before(tmp_path: Path) -> None:
    """`--shared`: in one worker the second model's analysis may take the first's memos, so a
    file is charged with every name its process read of the module up to its end. Two models
    each run one helper of `ops.py` in their region: whichever is analysed second is charged
    with both helpers, the first with its own only."""
    package = _package(
        tmp_path,
        ops="import random\n\n\ndef jitter(x):\n    return x * random.random()\n\n\ndef scale(x):\n    return x * 2\n\n\ndef unused(x):\n    return x\n",
        model_a=HELPER_MODEL.format(helper="jitter", name="NetA"),
        model_b=HELPER_MODEL.format(helper="scale", name="NetB"),
    )
    benchmark = load_benchmark("definition_reads")
    (found,) = benchmark.measure_shared(package, [package / "ops.py"], jobs=1)
    assert found.dependents == 2
    charged = {Path(path).name: reads.names & {"jitter", "scale", "unused"} for path, reads in found.measured.items()}
    assert charged["model_a.py"] >= {"jitter"} and charged["model_b.py"] >= {"scale"}
    assert sorted(len(names) for names in charged.values()) == [1, 2]
    assert "unused" not in set().union(*charged.values())
    assert benchmark.report(found, package)[0].startswith("ops.py: 2 dependents, 2 in its process's shared state; 2 read it")


def test_definition_reads_members_tells_the_method_looked_up_from_the_others(tmp_path: Path) -> None:
    """`--members`: a region that runs one method of a helper class looks that method up in its
    class, not the class's other method; a key per function and method would redo the model for
    an edit of the one and not the other."""
    package = _package(
        tmp_path,
        ops="import random\n\nfrom torch import nn\n\n\nclass Jitter(nn.Module):\n    def forward(self, x):\n        return x * random.random()\n\n"
        "    def describe(self):\n        return 'jitter'\n",
        model=JITTER_MODEL,
    )
    benchmark = load_benchmark("definition_reads")
    (found,) = benchmark.measure(package, [package / "ops.py"], sample=10, jobs=1, members=True)
    (reads,) = found.measured.values()
    assert "Jitter.forward" in reads.names and "Jitter.describe" not in reads.names
    assert benchmark.units(str(package / "ops.py")) == [("Jitter.forward", 2), ("Jitter.describe", 2)]
    listed, keyed = benchmark.report_members(found)
    assert listed.endswith("read by none 1 (2 lines)") and keyed.endswith("read by none 1 (2 lines)")


def test_unit_soundness_finds_an_edit_of_a_method_looked_up_but_not_noted(tmp_path: Path) -> None:
    """benchmarks/unit_soundness.py edits the functions and methods an analysis did not look up
    and checks that its findings stay. A region runs `Jitter.forward`, whose `if True:` guards
    a Python random draw: noted as a member looked up, only `describe` is edited (kept); with
    the member door closed, `forward` is edited too and the finding goes: a break, named."""
    package = _package(
        tmp_path,
        ops="import random\n\nfrom torch import nn\n\n\nclass Jitter(nn.Module):\n    def forward(self, x):\n        if True:\n"
        "            return x * random.random()\n        return x\n\n    def describe(self):\n        return 'jitter'\n",
        model=JITTER_MODEL,
    )
    benchmark = load_benchmark("unit_soundness")
    assert [unit for unit, _ in benchmark.edits((package / "ops.py").read_text())] == ["Jitter.forward", "Jitter.describe"]
    found = benchmark.check(package, sample=10, jobs=1)
    assert (found.kept, found.skipped, found.breaks) == (1, 0, [])
    closed = benchmark.check(package, sample=10, jobs=1, members=False)
    assert closed.kept == 1 and [(b["file"], b["unit"]) for b in closed.breaks] == [("pkg/model.py", "Jitter.forward")]


def test_no_fixture_analysis_changes_with_a_function_or_method_it_did_not_look_up() -> None:
    """What a key per function and method would rest on, over every fixture: an edit of the
    constants of a function or method that an analysis neither looked up nor summarised leaves
    its findings as they were."""
    found = load_benchmark("unit_soundness").check(FIXTURES, sample=10_000, jobs=1)
    assert found.files > 350 and found.kept > 100
    assert found.breaks == []


def test_unit_soundness_counts_the_summaries_an_emptied_body_changes(tmp_path: Path) -> None:
    """`--summaries`: emptying the one function that makes a call changes the module's calls by
    spelling and the calls of the called function; emptying the others changes no summary."""
    module = tmp_path / "ops.py"
    module.write_text("def g(x):\n    return x\n\n\ndef caller(x):\n    return g(x)\n\n\ndef plain(x):\n    y = x\n    return y\n")
    count, changed = load_benchmark("unit_soundness").summary_changes(str(module))
    assert count == 3
    assert changed == {"any": 1, "spellings": 1, "calls_of": 1}
