"""Library versions decide Hugging Face's helper's mode: transformers 4.x reentrant, 5.x
non-reentrant, diffusers non-reentrant; from target-versions, else the environment's
metadata (a stand-in interpreter naming a site-packages the test writes), else the pins.
Nothing here is installed: every METADATA file is written by the test."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ckptlint.catalogue import DEFAULT_CATALOGUE
from ckptlint.config import ConfigError, load_config
from ckptlint.engine import Linter
from ckptlint.versions import ENVIRONMENT, environment_versions, pin, pinned_versions, resolve_versions
from conftest import FIXTURES, run_cli

TRANSFORMERS_STYLE = (FIXTURES / "regions" / "hazards" / "hf_helper_grad_branch.py").read_text()
DIFFUSERS_STYLE = (FIXTURES / "regions" / "safe" / "hf_helper_grad_branch.py").read_text()
BRANCH = ("model.py", "CKP206", 20, 12)  # `if torch.is_grad_enabled() and self.gradient_checkpointing:` in Stage.forward
HELPER = DEFAULT_CATALOGUE.by_attribute("_gradient_checkpointing_func")


def install(site: Path, name: str, version: str) -> None:
    """A distribution's metadata as pip leaves it (nothing importable)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA description: Version: 0.0\n")


def make_project(tmp_path: Path, model: str = TRANSFORMERS_STYLE, installed: dict[str, str] | None = None, extra: str = "") -> Path:
    """A project whose interpreter (a script, as fixtures/bin/python) names a site-packages
    holding only the `installed` distributions' metadata."""
    site = tmp_path / "env" / "lib" / "site-packages"
    site.mkdir(parents=True)
    for name, version in (installed or {}).items():
        install(site, name, version)
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\nprintf '%s\\n' '{json.dumps([os.fspath(site)])}'\n")
    python.chmod(0o755)
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text(f'[tool.ckptlint]\npython = "{python}"\n{extra}')
    (root / "model.py").write_text(model)
    return root


def lint(project: Path, cache: bool = False):
    config = load_config(project / "pyproject.toml", project)
    linter = Linter(config, base=project, cache_dir=project / ".ckptlint_cache" if cache else None)
    return linter.lint_files([project / "model.py"], project_root=project)


def found(result) -> list[tuple[str, str, int, int]]:
    return [(f.path, f.code, f.line, f.column) for f in result.findings]


def modes(result) -> list[tuple[int, str, str]]:
    return [(c["line"], c["mode"], c["mode_source"]) for c in result.calls]


# -- the environment's metadata ------------------------------------------------------


def test_transformers_4_in_the_environment_makes_the_helper_reentrant(tmp_path: Path) -> None:
    result = lint(make_project(tmp_path, installed={"transformers": "4.57.0"}))
    assert found(result) == [BRANCH]
    assert "(this call is reentrant: transformers 4.57.0 from the environment)" in result.findings[0].summary
    assert modes(result) == [(21, "reentrant", "transformers 4.57.0 from the environment"),
                             (37, "reentrant", "transformers 4.57.0 from the environment")]


def test_transformers_5_in_the_environment_makes_the_helper_non_reentrant(tmp_path: Path) -> None:
    result = lint(make_project(tmp_path, installed={"transformers": "5.2.1"}))
    assert found(result) == []
    assert modes(result)[1] == (37, "non-reentrant", "transformers 5.2.1 from the environment")


def test_no_version_known_keeps_the_conservative_reentrant_default_and_says_so(tmp_path: Path) -> None:
    result = lint(make_project(tmp_path, installed={"accelerate": "1.0.0"}))
    assert found(result) == [BRANCH]
    assert "reentrant: transformers version unknown, so its default before 5.0" in result.findings[0].summary


def test_the_diffusers_helper_is_non_reentrant_even_beside_transformers_4(tmp_path: Path) -> None:
    """The class derives from diffusers' ModelMixin: diffusers' helper, whatever transformers is."""
    result = lint(make_project(tmp_path, DIFFUSERS_STYLE, installed={"transformers": "4.57.0", "diffusers": "0.42.1"}))
    assert found(result) == []
    assert modes(result)[1] == (37, "non-reentrant", "diffusers 0.42.1 from the environment")


def test_the_diffusers_helper_needs_no_version(tmp_path: Path) -> None:
    result = lint(make_project(tmp_path, DIFFUSERS_STYLE))
    assert found(result) == []
    assert modes(result)[1] == (37, "non-reentrant", "the diffusers helper, the same in every release (version unknown)")


def test_an_ambiguous_helper_follows_the_one_library_the_environment_has(tmp_path: Path) -> None:
    """No class, package or import says whose helper it is: the only candidate installed decides."""
    model = TRANSFORMERS_STYLE.replace("from transformers import PreTrainedModel\n", "PreTrainedModel = nn.Module\n")
    assert found(lint(make_project(tmp_path / "a", model, installed={"diffusers": "0.42.1"}))) == []
    assert found(lint(make_project(tmp_path / "b", model))) == [BRANCH]  # neither: the conservative default


def test_metadata_is_read_in_import_order_and_only_for_tracked_libraries(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    install(first, "transformers", "5.0.0")
    install(second, "transformers", "4.57.0")
    install(second, "torch", "2.13.0+cpu")
    install(second, "requests", "2.0.0")
    found_versions = list(environment_versions([os.fspath(first), os.fspath(second), os.fspath(tmp_path / "missing")]))
    assert [(v.name, v.text, v.low) for v in found_versions] == [("transformers", "5.0.0", (5,)), ("torch", "2.13.0+cpu", (2, 13))]
    assert {v.source for v in found_versions} == {ENVIRONMENT}


# -- target-versions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("installed", "target", "expected"),
    [("4.57.0", "5.0", []), ("5.2.1", "4.57", [BRANCH])],
    ids=["5.0 over an installed 4.57", "4.57 over an installed 5.2"],
)
def test_target_versions_beat_the_environment(tmp_path: Path, installed: str, target: str, expected: list) -> None:
    project = make_project(tmp_path, installed={"transformers": installed}, extra=f'target-versions = {{ transformers = "{target}" }}\n')
    result = lint(project)
    assert found(result) == expected
    assert modes(result)[1][2] == f"transformers {target} from target-versions"


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("target-versions", '{ transfomers = "4.57" }', "'transfomers' is not a library whose version ckptlint uses (expected one of: torch, transformers"),
        ("target-versions", '{ transformers = 4.57 }', 'transformers: expected a version string like "4.57" or "4.57.1", not 4.57'),
        ("target-versions", '{ transformers = "latest" }', "not 'latest'"),
        ("target-versions", '"4.57"', "expected a table like"),
        ("library-modes", '{ deepspeed = "reentrant" }', "'deepspeed' has no checkpointing switch ckptlint reads (expected one of: transformers, diffusers, timm)"),
        ("library-modes", '{ timm = "sometimes" }', "timm: expected \"reentrant\" or \"non-reentrant\", not 'sometimes'"),
        ("library-modes", '{ timm = true }', "not True"),
        ("library-modes", '"reentrant"', "expected a table like"),
    ],
)
def test_bad_library_tables_are_one_line_errors_naming_the_key(tmp_path: Path, key: str, value: str, problem: str) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text(f"[tool.ckptlint]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as error:
        load_config(config, tmp_path)
    message = str(error.value)
    assert "\n" not in message and f"[tool.ckptlint] {key}" in message and problem in message


# -- library-modes: the libraries' own switches ---------------------------------------------

TIMM_STYLE = """\
import torch
from timm.models._manipulate import checkpoint, checkpoint_seq


class Net(torch.nn.Module):
    def forward(self, x):
        x = checkpoint_seq(self.stages, x)
        x = checkpoint_seq(self.stages, x, use_reentrant=False)
        return checkpoint(self.head, x)
"""


@pytest.mark.parametrize(
    ("installed", "mode", "expected"),
    [("5.2.1", "reentrant", [BRANCH]), ("4.57.0", "non-reentrant", [])],
    ids=["reentrant over transformers 5", "non-reentrant over transformers 4"],
)
def test_library_modes_beat_the_release_default(tmp_path: Path, installed: str, mode: str, expected: list) -> None:
    """`gradient_checkpointing_kwargs={"use_reentrant": ...}` passed where the linter cannot see it."""
    project = make_project(tmp_path, installed={"transformers": installed}, extra=f'library-modes = {{ transformers = "{mode}" }}\n')
    result = lint(project)
    assert found(result) == expected
    assert modes(result)[1] == (37, mode, f"transformers switched to {mode} by library-modes")


def test_library_modes_switch_timm_calls_that_leave_use_reentrant_to_timm(tmp_path: Path) -> None:
    project = make_project(tmp_path, TIMM_STYLE, extra='library-modes = { timm = "reentrant" }\n')
    assert modes(lint(project)) == [(7, "reentrant", "timm switched to reentrant by library-modes"),
                                    (8, "non-reentrant", "use_reentrant=False"),
                                    (9, "reentrant", "timm switched to reentrant by library-modes")]
    plain = make_project(tmp_path / "plain", TIMM_STYLE)
    assert modes(lint(plain))[0] == (7, "non-reentrant", "timm's default use_reentrant=False")


def test_the_diffusers_switch_leaves_transformers_helpers_alone(tmp_path: Path) -> None:
    project = make_project(tmp_path, installed={"transformers": "5.2.1"}, extra='library-modes = { diffusers = "reentrant" }\n')
    assert found(lint(project)) == []
    assert modes(lint(project))[1] == (37, "non-reentrant", "transformers 5.2.1 from the environment")


def test_a_changed_library_mode_changes_the_cached_result(tmp_path: Path) -> None:
    project = make_project(tmp_path, installed={"transformers": "5.2.1"})
    assert found(lint(project, cache=True)) == []
    config = project / "pyproject.toml"
    config.write_text(config.read_text() + 'library-modes = { transformers = "reentrant" }\n')
    assert found(lint(project, cache=True)) == [BRANCH]


# -- the project's pins ------------------------------------------------------------------


def test_a_requirements_pin_decides_when_the_environment_does_not_say(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project / "requirements.txt").write_text("# training\ntorch>=2.1\ntransformers==4.57.1  # pinned\n")
    result = lint(project)
    assert found(result) == [BRANCH]
    assert "reentrant: transformers ==4.57.1 from requirements.txt" in result.findings[0].summary
    (project / "requirements.txt").write_text("transformers~=5.1\n")
    assert found(lint(project)) == []


def test_a_pin_that_spans_both_modes_keeps_the_default_and_says_why(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["transformers>=4.40"]\n' + text)
    result = lint(project)
    assert found(result) == [BRANCH]
    assert "transformers >=4.40 from pyproject.toml, which spans releases of either mode, so its default before 5.0" in result.findings[0].summary


def test_the_environment_beats_the_pins(tmp_path: Path) -> None:
    project = make_project(tmp_path, installed={"transformers": "5.0.0"})
    (project / "requirements.txt").write_text("transformers==4.57.1\n")
    assert found(lint(project)) == []


def test_a_changed_pin_changes_the_cached_result(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project / "requirements.txt").write_text("transformers==5.0.0\n")
    assert found(lint(project, cache=True)) == []
    (project / "requirements.txt").write_text("transformers==4.57.1\n")
    assert found(lint(project, cache=True)) == [BRANCH]


@pytest.mark.parametrize(
    ("requirement", "low", "high"),
    [
        ("transformers==4.57.1", (4, 57, 1), (4, 57, 1)),
        ("Transformers[torch] >= 5.1 ; python_version > '3.9'", (5, 1), None),
        ("transformers~=4.57", (4, 57), (5,)),
        ("transformers~=4.57.1", (4, 57, 1), (4, 58)),
        ("transformers==4.57.*", (4, 57), (4, 58)),
        ("transformers>=4.40,<5,!=4.41.0", (4, 40), (5,)),
        ("transformers<=4.57", None, (4, 58)),
    ],
)
def test_simple_specifiers_are_read_as_ranges(requirement: str, low: tuple | None, high: tuple | None) -> None:
    version = pin(requirement, "requirements.txt")
    assert version is not None and (version.name, version.low, version.high) == ("transformers", low, high)


@pytest.mark.parametrize(
    "requirement",
    ["transformers", "transformers @ https://example.invalid/t.whl", "transformers===4.57.1", "requests==2.0", "transformers>=x"],
)
def test_other_requirement_forms_are_ignored(requirement: str) -> None:
    assert pin(requirement, "requirements.txt") is None


def test_pins_come_from_dependencies_then_optional_ones_then_requirement_files(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n[project.optional-dependencies]\nhf = ["transformers<5", "peft==0.13.2"]\n'
    )
    (tmp_path / "requirements-dev.txt").write_text("-r requirements.txt\ntransformers==4.57.1\ndeepspeed==0.16.0\n")
    assert [(v.name, v.text, v.source) for v in pinned_versions(tmp_path)] == [
        ("torch", ">=2.1", "pyproject.toml"),
        ("transformers", "<5", "pyproject.toml"),
        ("peft", "==0.13.2", "pyproject.toml"),
        ("deepspeed", "==0.16.0", "requirements-dev.txt"),
    ]


def test_versions_come_from_the_first_source_that_has_each(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    install(site, "transformers", "4.57.0")
    install(site, "torch", "2.13.0")
    (tmp_path / "requirements.txt").write_text("torch==2.5.0\npeft==0.13.2\n")
    versions = resolve_versions({"transformers": "5.1"}, [os.fspath(site)], tmp_path)
    assert versions.describe() == (
        "torch 2.13.0 from the environment; transformers 5.1 from target-versions; peft ==0.13.2 from requirements.txt"
    )


# -- the catalogue -------------------------------------------------------------------------


def test_the_catalogue_records_the_helpers_mode_per_release_range() -> None:
    assert HELPER is not None
    assert [(r.library, r.since, r.until, r.mode) for r in HELPER.versioned] == [
        ("transformers", None, "5.0", "reentrant"),
        ("transformers", "5.0", None, "non-reentrant"),
        ("diffusers", None, None, "non-reentrant"),
    ]


# -- `ckptlint calls` ----------------------------------------------------------------------


def test_calls_shows_the_mode_and_what_decided_it_in_text_and_json(tmp_path: Path) -> None:
    project = make_project(tmp_path, installed={"transformers": "4.57.0"})
    (project / "train.py").write_text(
        "from torch.utils.checkpoint import checkpoint\n\n\ndef run(block, x):\n    return checkpoint(block, x)\n"
    )
    text = run_cli("calls", "model.py", "train.py", "--no-cache", cwd=project)
    assert text.returncode == 0, text.stderr
    assert text.stdout.decode().splitlines() == [
        'model.py:21:22: ._gradient_checkpointing_func region=self.scaled mode=reentrant source="transformers 4.57.0 from the environment"',
        'model.py:37:16: ._gradient_checkpointing_func region=self.stage mode=reentrant source="transformers 4.57.0 from the environment"',
        'train.py:5:12: torch.utils.checkpoint.checkpoint region=block mode=reentrant (default) '
        'source="use_reentrant not passed: torch falls back to reentrant"',
    ]
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + 'target-versions = { transformers = "5.0" }\n')
    described = json.loads(run_cli("calls", "model.py", "--format", "json", "--no-cache", cwd=project).stdout)
    assert [(c["line"], c["mode"], c["mode_defaulted"], c["mode_source"]) for c in described] == [
        (21, "non-reentrant", False, "transformers 5.0 from target-versions"),
        (37, "non-reentrant", False, "transformers 5.0 from target-versions"),
    ]
