"""A comment edited in a dependency leaves its dependents' analyses standing: an analysis reads
other modules through their syntax trees and their comment-free text (code_text.py), so only
their code can change it. Editing a hub module's comment on transformers re-analysed every
model that imported it; now it re-analyses the hub alone. A code edit, or a comment line that
moves the code below it, still redoes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import lint_project

MODEL = """\
from torch.utils.checkpoint import checkpoint

from blocks import block


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
"""
OTHER_MODEL = MODEL.replace("def forward", "def other_forward")
RANDOM_BLOCK = "import random\n\n\ndef block(x):\n    return x * random.random()\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "other.py").write_text(OTHER_MODEL)
    (tmp_path / "blocks.py").write_text(RANDOM_BLOCK)
    return tmp_path


_lint = lint_project


def _dicts(result) -> list[dict]:
    return [finding.to_dict() for finding in result.findings]


FILES = ("model.py", "other.py", "blocks.py")


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text + "\n# edited by hand\n",  # appended
        lambda text: text.replace("random.random()", "random.random()  # torch.compile(model)  self.x.flag = 1"),  # trailing
        lambda text: text.replace("def block", "# save_on_cpu torch.compile(block)\ndef block").replace("\n\n\n#", "\n\n#"),
    ],
    ids=["appended", "trailing", "replacing-a-blank-line"],
)
def test_a_comment_edit_in_a_dependency_reanalyses_no_dependent(project: Path, edit) -> None:
    cold = _lint(project, *FILES)
    assert cold.analysed == 2 and [(f["path"], f["code"], f["line"]) for f in _dicts(cold)] == [("blocks.py", "CKP201", 5)]
    blocks = project / "blocks.py"
    blocks.write_text(edit(blocks.read_text()))
    warm = _lint(project, *FILES)
    assert warm.analysed == 0
    assert _dicts(warm) == _dicts(_lint(project, *FILES, cache=False)) == _dicts(cold)
    assert _lint(project, *FILES).analysed == 0  # the entries were renewed with the new digest


def test_an_entry_stays_after_a_second_comment_edit(project: Path) -> None:
    """The edges table carries the dependency's code digest under each new content digest."""
    _lint(project, *FILES)
    blocks = project / "blocks.py"
    for number in range(3):
        blocks.write_text(blocks.read_text() + f"# note {number}\n")
        assert _lint(project, "model.py").analysed == 0


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text.replace("x * random.random()", "x + random.random()"),  # code
        lambda text: "# a new first line moves every line below it\n" + text,
        lambda text: text + "\nEXTRA = 1\n",  # code appended
    ],
    ids=["code", "a-comment-line-inserted", "code-appended"],
)
def test_a_code_edit_or_moved_lines_redo_the_dependents(project: Path, edit) -> None:
    _lint(project, *FILES)
    blocks = project / "blocks.py"
    blocks.write_text(edit(blocks.read_text()))
    warm = _lint(project, *FILES)
    assert warm.analysed == 2
    assert _dicts(warm) == _dicts(_lint(project, *FILES, cache=False))


def test_the_edited_file_itself_is_always_reanalysed(project: Path) -> None:
    """Its own fixes quote its text, comments included: its own digest decides for it."""
    _lint(project, *FILES)
    (project / "model.py").write_text(MODEL + "# a comment\n")
    assert _lint(project, *FILES).analysed == 1


def test_a_comment_spelling_a_compile_call_makes_no_context_file(tmp_path: Path) -> None:
    """Whether a file compiles what it checkpoints is read from its code: the same findings with
    `torch.compile(model)` in a comment as without, warm or cold."""
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "blocks.py").write_text(RANDOM_BLOCK)
    (tmp_path / "train.py").write_text("import model\n\nx = 1\n")
    before = _dicts(_lint(tmp_path, "model.py", "blocks.py", "train.py"))
    (tmp_path / "train.py").write_text("import model\n\n# torch.compile(model.forward)\nx = 1\n")
    assert _dicts(_lint(tmp_path, "model.py", "blocks.py", "train.py")) == before
    assert _dicts(_lint(tmp_path, "model.py", "blocks.py", "train.py", cache=False)) == before
