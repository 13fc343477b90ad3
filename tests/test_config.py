"""`[tool.ckptlint]`: discovery, every key, CLI precedence, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import json_findings, run_cli

HAZARD = (
    "from torch.utils.checkpoint import checkpoint\n"
    "\n"
    "def forward(block, x):\n"
    "    return checkpoint(block, x, preserve_rng_state=False)\n"
)


def _write(root: Path, config: str) -> None:
    (root / "pyproject.toml").write_text(config)
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "model.py").write_text(HAZARD)
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_model.py").write_text(HAZARD)


def _codes(root: Path, *args: str, cwd: Path | None = None) -> list[tuple[str, str]]:
    completed = run_cli(*args, "--format", "json", cwd=cwd or root)
    assert completed.returncode in (0, 1), completed.stderr
    return [(f["path"], f["code"]) for f in json_findings(completed)]


def test_config_is_found_walking_up_and_applies(tmp_path: Path) -> None:
    _write(
        tmp_path,
        '[tool.ckptlint]\nignore = ["CKP102"]\nper-file-ignores = { "tests/*" = ["CKP1"] }\n',
    )
    assert _codes(tmp_path, ".") == [("src/model.py", "CKP101")]
    # run from a subdirectory: the configuration above is still found, paths stay relative to the cwd
    assert _codes(tmp_path, "model.py", cwd=tmp_path / "src") == [("model.py", "CKP101")]


def test_cli_flags_beat_config(tmp_path: Path) -> None:
    _write(tmp_path, '[tool.ckptlint]\nselect = ["CKP101"]\n')
    assert _codes(tmp_path, "src") == [("src/model.py", "CKP101")]
    assert _codes(tmp_path, "src", "--select", "CKP102") == [("src/model.py", "CKP102")]
    assert _codes(tmp_path, "src", "--extend-select", "CKP102") == [("src/model.py", "CKP101"), ("src/model.py", "CKP102")]


def test_exclude_and_extend_exclude(tmp_path: Path) -> None:
    _write(tmp_path, '[tool.ckptlint]\nextend-exclude = ["tests"]\n')
    assert {p for p, _ in _codes(tmp_path, ".")} == {"src/model.py"}
    _write(tmp_path, '[tool.ckptlint]\nexclude = ["src/*.py"]\n')
    assert {p for p, _ in _codes(tmp_path, ".")} == {"tests/test_model.py"}


def test_pyproject_without_table_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.ckptlint]\nignore = ["CKP101"]\n')
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "inner"\n')
    (inner / "m.py").write_text(HAZARD)
    assert _codes(inner, "m.py") == [("m.py", "CKP102")]


def test_explicit_config_file(tmp_path: Path) -> None:
    _write(tmp_path, "[tool.ckptlint]\n")
    (tmp_path / "ckptlint.toml").write_text('select = ["CKP102"]\n')
    assert _codes(tmp_path, "src", "--config", "ckptlint.toml") == [("src/model.py", "CKP102")]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('[tool.ckptlint]\nselekt = ["CKP1"]\n', "[tool.ckptlint] selekt: unknown key (expected one of: select, ignore,"),
        ('[tool.ckptlint]\nselect = "CKP101"\n', "[tool.ckptlint] select: expected a list of strings"),
        ('[tool.ckptlint]\nignore = ["E501"]\n', "[tool.ckptlint] ignore: 'E501' is not a rule code or prefix"),
        ('[tool.ckptlint]\nper-file-ignores = ["x"]\n', "[tool.ckptlint] per-file-ignores: expected a table"),
        (
            '[tool.ckptlint]\ncheckpoint-functions = { "a.b" = { mode = "sometimes" } }\n',
            '[tool.ckptlint] checkpoint-functions."a.b": mode must be one of argument, reentrant, non-reentrant, unknown',
        ),
        ('[tool.ckptlint]\ncheckpoint-functions = ["not a name"]\n', "checkpoint-functions.not a name: expected a qualified name"),
        ("[tool.ckptlint\n", "invalid TOML"),
    ],
)
def test_bad_config_is_one_line_naming_file_and_key(tmp_path: Path, config: str, message: str) -> None:
    _write(tmp_path, config)
    if "[tool.ckptlint\n" == config:
        # an unparsable pyproject.toml with our table name in it is still reported
        (tmp_path / "pyproject.toml").write_text("[tool.ckptlint\nselect=[\n")
    completed = run_cli("src", cwd=tmp_path)
    assert completed.returncode == 2
    lines = completed.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"ckptlint: error: {tmp_path / 'pyproject.toml'}: ")
    assert message in lines[0]


def test_checkpoint_functions_list_form(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.ckptlint]\ncheckpoint-functions = ["mylib.ckpt.run"]\n')
    (tmp_path / "m.py").write_text(
        "from mylib.ckpt import run\n\ndef f(block, x):\n    return run(block, x, preserve_rng_state=False)\n"
    )
    completed = run_cli("calls", "m.py", cwd=tmp_path)
    assert completed.stdout.decode() == (
        'm.py:4:12: mylib.ckpt.run region=block mode=unknown source="mode not configured (checkpoint-functions)"\n'
    )
