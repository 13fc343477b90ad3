"""`# noqa` as flake8 reads it, plus file-level `# ckptlint: noqa`."""

from __future__ import annotations

from pathlib import Path

from ckptlint.config import Config
from ckptlint.engine import Linter

HEADER = "from torch.utils.checkpoint import checkpoint\n\n\ndef f(b, x):\n"


def _findings(tmp_path: Path, body: str) -> list[tuple[int, str]]:
    (tmp_path / "m.py").write_text(HEADER + body)
    result = Linter(Config(root=tmp_path), base=tmp_path).lint_paths([tmp_path / "m.py"])
    return [(f.line, f.code) for f in result.findings]


def test_bare_noqa_silences_the_line(tmp_path: Path) -> None:
    assert _findings(tmp_path, "    return checkpoint(b, x, preserve_rng_state=False)  # noqa\n") == []


def test_noqa_with_codes_and_prefixes(tmp_path: Path) -> None:
    line = "    return checkpoint(b, x, preserve_rng_state=False)"
    assert _findings(tmp_path, line + "  # noqa: CKP101\n") == [(5, "CKP102")]
    assert _findings(tmp_path, line + "  # noqa:CKP102,CKP101\n") == []
    assert _findings(tmp_path, line + "  # NOQA: CKP1\n") == []
    assert _findings(tmp_path, line + "  # noqa: CKP2\n") == [(5, "CKP101"), (5, "CKP102")]
    assert _findings(tmp_path, line + "  # noqa: E501 CKP102\n") == [(5, "CKP101")]


def test_noqa_in_a_string_is_not_a_comment(tmp_path: Path) -> None:
    assert _findings(tmp_path, '    return checkpoint(b, "# noqa")\n') == [(5, "CKP101")]


def test_noqa_on_any_line_of_a_multiline_call(tmp_path: Path) -> None:
    body = "    return checkpoint(\n        b,\n        x,  # noqa: CKP101\n    )\n"
    assert _findings(tmp_path, body) == []
    body = "    y = checkpoint(b, x)\n    return checkpoint(\n        b,\n        x,\n    )  # noqa: CKP101\n"
    assert _findings(tmp_path, body) == [(5, "CKP101")]


def test_file_level_noqa(tmp_path: Path) -> None:
    body = "    return checkpoint(b, x, preserve_rng_state=False)\n"
    (tmp_path / "m.py").write_text("# ckptlint: noqa\n" + HEADER + body)
    assert Linter(Config(root=tmp_path), base=tmp_path).lint_paths([tmp_path / "m.py"]).findings == []
    (tmp_path / "m.py").write_text("# ckptlint: noqa: CKP101\n" + HEADER + body)
    assert [f.code for f in Linter(Config(root=tmp_path), base=tmp_path).lint_paths([tmp_path / "m.py"]).findings] == ["CKP102"]
    # not on its own line: an ordinary comment, nothing silenced
    (tmp_path / "m.py").write_text(HEADER + body.rstrip("\n") + "  # ckptlint: noqa\n")
    assert len(Linter(Config(root=tmp_path), base=tmp_path).lint_paths([tmp_path / "m.py"]).findings) == 2
