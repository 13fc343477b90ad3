"""CKP303-CKP305, CKP403-CKP405: each hazard fixture yields exactly its marked findings, each safe twin none,
and the fixes edit the right call."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import pytest

from ckptlint.config import Config, find_config, load_config
from ckptlint.engine import Linter
from conftest import FIXTURES, REPO, expectations, fixture_files, lint_fixture

HAZARDS = FIXTURES / "composition" / "hazards"
SAFE = FIXTURES / "composition" / "safe"
CODES = {"CKP303", "CKP304", "CKP305", "CKP403", "CKP404", "CKP405", "CKP502", "CKP503", "CKP505"}


def _cases(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".py" or p.is_dir())


def _lint(path: Path):
    """A cold lint, without the tests' shared cache (tests/conftest.py lint_fixture): what a run builds."""
    return Linter(load_config(find_config(path), REPO), base=REPO).lint_paths([path], project_root=FIXTURES)


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_every_hazard_has_a_safe_twin() -> None:
    assert _cases(HAZARDS) == _cases(SAFE)
    assert len(_cases(HAZARDS)) >= 4


@pytest.mark.parametrize("name", _cases(HAZARDS))
def test_hazard_fixture_yields_its_marked_findings(name: str) -> None:
    path = HAZARDS / name
    files = [path] if path.is_file() else fixture_files(path)
    result = lint_fixture(path)
    expected = {(_relative(f), *e) for f in files for e in expectations(f)[0]}
    actual = {(f.path, f.code, f.line, f.column) for f in result.findings}
    assert actual == expected
    assert {code for _, code, _, _ in expected} & CODES


@pytest.mark.parametrize("name", _cases(SAFE))
def test_safe_twin_is_silent(name: str) -> None:
    result = lint_fixture(SAFE / name)
    assert [(f.path, f.line, f.code) for f in result.findings] == []


def test_ddp_finding_names_the_model_and_the_checkpoint_call_in_another_file() -> None:
    result = lint_fixture(HAZARDS / "ddp_project")
    [finding] = [f for f in result.findings if f.code == "CKP303"]
    assert finding.path == "fixtures/composition/hazards/ddp_project/launch.py"
    assert "wraps Encoder, which checkpoints reentrantly" in finding.message
    assert [(s.path, s.line) for s in finding.sites] == [("fixtures/composition/hazards/ddp_project/blocks.py", 12)]
    assert finding.fixes == ()  # the checkpoint call is in another file


def _findings(source: str, code: str):
    base = Path.cwd()
    target = base / "example.py"
    linter = Linter(Config(root=base, libraries=False), overlays={target: textwrap.dedent(source)}, base=base, want_fixes=True)
    return [f for f in linter.lint_files([target]).findings if f.code == code]


def test_ckp303_fix_makes_the_checkpoint_call_non_reentrant_and_is_unsafe() -> None:
    source = """
        import torch
        from torch.nn.parallel import DistributedDataParallel
        from torch.utils.checkpoint import checkpoint

        class Net(torch.nn.Module):
            def forward(self, x):
                return checkpoint(self.block, x)

        ddp = DistributedDataParallel(Net(), find_unused_parameters=True)
    """
    [finding] = _findings(source, "CKP303")
    [fix] = finding.fixes
    assert fix.applicability == "unsafe"
    [edit] = fix.edits
    assert (edit.line, edit.content) == (8, "checkpoint(self.block, x, use_reentrant=False)")


def test_ckp304_fix_edits_the_checkpoint_call_not_the_grad_call() -> None:
    source = """
        import torch
        from torch.utils.checkpoint import checkpoint

        def penalty(block, x):
            y = checkpoint(block, x, use_reentrant=True)
            return torch.autograd.grad(y.sum(), x)
    """
    [finding] = _findings(source, "CKP304")
    assert (finding.line, finding.column) == (7, 12)
    [edit] = finding.fixes[0].edits
    assert (edit.line, edit.content) == (6, "checkpoint(block, x, use_reentrant=False)")


def test_ckp304_torch_func_has_no_use_reentrant_fix() -> None:
    source = """
        from torch.func import grad
        from torch.utils.checkpoint import checkpoint

        def per_sample(block, x):
            return grad(lambda v: checkpoint(block, v, use_reentrant=False).sum())(x)
    """
    [finding] = _findings(source, "CKP304")
    assert "either mode" in finding.message and finding.fixes == ()


def test_ckp305_fix_adds_non_reentrant_kwargs_and_is_safe() -> None:
    source = """
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained("m")
        model = get_peft_model(model, LoraConfig(r=8))
        model.gradient_checkpointing_enable()
    """
    [finding] = _findings(source, "CKP305")
    assert "transformers version unknown, so its default before 5.0" in finding.message
    [fix] = finding.fixes
    assert fix.applicability == "safe"
    [edit] = fix.edits
    assert edit.content == 'model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})'


def test_ckp305_explicit_reentrant_kwargs_get_no_fix() -> None:
    source = """
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        model = get_peft_model(AutoModelForCausalLM.from_pretrained("m"), LoraConfig(r=8))
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    """
    [finding] = _findings(source, "CKP305")
    assert "use_reentrant=True in gradient_checkpointing_kwargs" in finding.message and finding.fixes == ()


def test_ckp305_trainer_from_the_command_line_names_the_flag_and_offers_no_fix() -> None:
    """The Trainer enables checkpointing from parsed arguments: the finding says which flag turns
    it on and where the function reads it; there is no keyword to add at the Trainer call."""
    source = """
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

        def main():
            (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            model = get_peft_model(AutoModelForCausalLM.from_pretrained("m"), LoraConfig(r=8))
            model.config.use_cache = not args.gradient_checkpointing
            Trainer(model, args).train()
    """
    [finding] = _findings(source, "CKP305")
    assert finding.line == 9
    assert "Trainer(args=args), which enables gradient checkpointing when args.gradient_checkpointing (read at line 8) is set" in finding.message
    assert "wrapped by get_peft_model at line 7" in finding.message and finding.fixes == ()


def test_ckp305_trainer_is_silent_when_the_flag_is_never_read() -> None:
    """Every Trainer has the flag; a function that never looks at it gives no sign that
    checkpointing is meant, so nothing is reported (precision over a guess)."""
    source = """
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

        def main():
            (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            model = get_peft_model(AutoModelForCausalLM.from_pretrained("m"), LoraConfig(r=8))
            Trainer(model=model, args=args).train()
    """
    assert _findings(source, "CKP305") == []


def test_a_training_script_without_checkpoint_words_is_analysed_for_its_ddp_wrapper(tmp_path: Path) -> None:
    (tmp_path / "blocks.py").write_text(
        "import torch\nfrom torch.utils.checkpoint import checkpoint\n\n"
        "class Block(torch.nn.Module):\n    def forward(self, x):\n        return checkpoint(self.f, x, use_reentrant=True)\n"
    )
    (tmp_path / "train.py").write_text(
        "from torch.nn.parallel import DistributedDataParallel\nfrom blocks import Block\n\n"
        "model = DistributedDataParallel(Block(), find_unused_parameters=True)\n"
    )
    config = Config(root=tmp_path, libraries=False)
    result = Linter(config, base=tmp_path).lint_paths([tmp_path / "train.py"], project_root=tmp_path)
    assert [(f.path, f.code, f.line) for f in result.findings] == [("train.py", "CKP303", 4)]


@pytest.mark.parametrize(("version", "reported"), [("4.57.0", True), ("5.2.0", False), (None, True)])
def test_ckp305_follows_the_transformers_version(tmp_path: Path, version: str | None, reported: bool) -> None:
    """transformers 5.x checkpoints non-reentrantly when not told: no CKP305 there; 4.x and an
    unknown version (the conservative default) are reentrant, and the message says which."""
    from conftest import run_cli

    table = f'[tool.ckptlint]\ntarget-versions = {{ transformers = "{version}" }}\n' if version else "[tool.ckptlint]\n"
    (tmp_path / "pyproject.toml").write_text(table)
    (tmp_path / "train.py").write_text((HAZARDS / "hf_peft_reentrant.py").read_text())
    completed = run_cli("train.py", "--select", "CKP305", "--no-cache", "--no-libraries", cwd=tmp_path)
    found = [line for line in completed.stdout.decode().splitlines() if "CKP305" in line]
    explicit = [line for line in found if "use_reentrant=True in gradient_checkpointing_kwargs" in line]
    lines = [line for line in found if line not in explicit]  # the mode left to the version
    assert len(explicit) == 1, found  # an explicit use_reentrant=True is reentrant in every version
    assert bool(lines) == reported, completed.stdout.decode() + completed.stderr.decode()
    if version == "4.57.0":
        assert "reentrant: transformers 4.57.0 from target-versions" in lines[0], lines[0]
    if version is None:
        assert "transformers version unknown" in lines[0], lines[0]


def _freed_without_the_cyclic_collector(monkeypatch: pytest.MonkeyPatch, modules: list[object], name: str, parts: Callable[[object], list[object]]) -> bool:
    """Lint a project with the cyclic collector off, recording each `name` object the run makes
    (patched in `modules`) and `parts` of it: whether all of them were freed by reference counts."""
    import gc
    import weakref

    made: list[weakref.ref[object]] = []
    base = getattr(modules[0], name)

    class Recorded(base):  # type: ignore[misc, valid-type]  # a subclass of the class under test
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            made.extend(weakref.ref(part) for part in (self, *parts(self)))

    for module in modules:
        monkeypatch.setattr(module, name, Recorded)
    enabled = gc.isenabled()
    gc.disable()
    try:
        _lint(HAZARDS / "fsdp2_project")
        return bool(made) and all(ref() is None for ref in made)
    finally:
        if enabled:
            gc.enable()


def test_each_modules_composition_is_freed_without_the_cyclic_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis runs with the cyclic garbage collector off: a Composition that its own parts
    point back to (a bound method held by Shardings) would keep every module it read alive."""
    from ckptlint.analysis import session

    assert _freed_without_the_cyclic_collector(monkeypatch, [session], "Composition", lambda composition: [])


def test_a_runs_analyses_are_freed_without_the_cyclic_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the session and the type evaluator assembled from its mixins: no part of a
    run's analyses points back to what owns it (analysis/session.py, semantics/protocol.py)."""
    from ckptlint.analysis import session
    from ckptlint.engine import worker

    assert _freed_without_the_cyclic_collector(monkeypatch, [session, worker], "Analyses", lambda analyses: [analyses.inference])  # type: ignore[attr-defined]
