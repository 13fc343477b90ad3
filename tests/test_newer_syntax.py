"""Code for a newer Python than the running one is analysed, at its own positions; only real
syntax errors are CKP000 (newer_syntax.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ckptlint.newer_syntax import lower
from ckptlint.source import SourceFile
from ckptlint.syntax import parse
from conftest import REPO, json_findings, run_cli

# A Python 3.12-3.14 training module: every construct that Python 3.11 cannot parse.
NEWER = '''\
import random

from torch.utils.checkpoint import checkpoint

type Pair[T] = tuple[T, T]


class Block[T](object):
    def forward[U = int](self, x: U) -> U:
        return x


def step[M: Block](model: M, x, names):
    tag = f"{names["kind"]}-{len(names)}"
    try:
        return checkpoint(model.forward, x)
    except ValueError, TypeError:
        return None
'''

# (source, what each call in it reads as): every call survives the rewriting, in place.
CASES = {
    "generic function over lines": ("def f[\n    T,  # a comment\n](x: T) -> T:\n    return g(x)\n", ["g(x)"]),
    "generic class with bounds and defaults": ("class A[T: int = int, *Ts, **P](B):\n    y = h()\n", ["h()"]),
    "type alias": ("type Ä[T] = dict[str, T]; z = k()\n", ["k()"]),
    "soft keyword type stays a name": ("type = 3\nprint(type)\ndef f[T](): pass\n", ["print(type)"]),
    "f-string with nested quotes, conversion, spec": ('x = f"é{d["k"]!r:>{w()}} {y()=}" \'abc\' f\'{z()}\'\n', ["w()", "y()", "z()"]),
    "f-string inside an f-string": ('x = f"{f"{random.random()}"}" + q()\n', ["random.random()", "q()"]),
    "comment and line break in a replacement field": ('x = f"{a(  # why\n    1)}"\ny = r()\n', ["a(  # why\n    1)", "r()"]),
    "backslash in a replacement field": ('x = f"{"\\n".join(s())}"\n', ['"\\n".join(s())', "s()"]),
    "no line break at the end": ("def f[T](x):\n    return g(x)", ["g(x)"]),
    "whitespace libcst does not reproduce": (
        'def f[T]():\n    try:\n        x = f"{d["k"]!s  }" + g()\n    except (A, B) :\n        h()\n',
        ["g()", "h()"],
    ),
    "template string": ('x = t"step {random.randint(0, 9)!r:>4}"\n', ["random.randint(0, 9)"]),
    "except without parentheses": (
        "try:\n    pass\nexcept A, B, C:\n    e()\ntry:\n    pass\nexcept* D, E,:\n    f()\n",
        ["e()", "f()"],
    ),
}


def _segment(text: str, node: ast.expr) -> str:
    """The node's text in `text`, from the byte offsets `ast` gives (as SourceFile.column reads them)."""
    lines = text.split("\n")
    first = lines[node.lineno - 1].encode()
    if node.end_lineno == node.lineno:
        return first[node.col_offset : node.end_col_offset].decode()
    last = lines[node.end_lineno - 1].encode()  # type: ignore[index]
    middle = lines[node.lineno : node.end_lineno - 1]  # type: ignore[operator]
    return "\n".join([first[node.col_offset :].decode(), *middle, last[: node.end_col_offset].decode()])


@pytest.mark.parametrize("name", CASES)
def test_rewritten_text_parses_and_keeps_every_call_in_place(name: str) -> None:
    source, calls = CASES[name]
    lowered = lower(source)
    assert lowered is not None
    assert lowered.count("\n") == source.count("\n")
    tree = ast.parse(lowered)
    found = sorted(_segment(source, node) for node in ast.walk(tree) if isinstance(node, ast.Call))
    assert found == sorted(calls)


def test_type_alias_becomes_an_assignment_of_its_name() -> None:
    tree = ast.parse(lower("x = 1\n    \ntype Pair[T] = tuple[T, T]\n") or "")
    [_, assign] = tree.body
    assert isinstance(assign, ast.Assign)
    assert [(t.id, t.lineno, t.col_offset) for t in assign.targets if isinstance(t, ast.Name)] == [("Pair", 3, 0)]
    assert ast.unparse(assign.value) == "tuple[T, T]" and assign.value.col_offset == 15


def test_strings_the_running_grammar_reads_are_left_alone() -> None:
    source = 'def f[T](x):\n    return f"{x!r}" "tail", b"bytes"\n'
    lowered = lower(source)
    assert lowered is not None and lowered.splitlines()[1] == source.splitlines()[1]


@pytest.mark.parametrize("module", ["syntax.py", "newer_syntax.py", "engine/run.py"])
def test_text_the_running_grammar_reads_comes_back_unchanged(module: str) -> None:
    text = (REPO / "ckptlint" / module).read_text(encoding="utf-8")
    assert lower(text) == text


def test_what_libcst_rejects_is_not_rewritten() -> None:
    assert lower("def f[T](x)\n    pass\n") is None


@pytest.mark.parametrize(
    "source",
    [
        "def forward(block, x)\n    return x\n",  # an error in any Python
        "def f[T](x):\n    return x\n\ndef g(x)\n    return x\n",  # newer syntax and a real error
        "print 'hello'\n",
    ],
)
def test_real_syntax_error_keeps_the_running_grammars_message_and_position(source: str) -> None:
    with pytest.raises(SyntaxError) as raised:
        ast.parse(source)
    finding = parse(SourceFile("broken.py", "broken.py", source))
    assert not isinstance(finding, ast.Module)
    assert (finding.code, finding.line, finding.column) == ("CKP000", raised.value.lineno, raised.value.offset)
    assert finding.message.startswith(f"syntax error: {raised.value.msg} (Python ")


@pytest.mark.parametrize("layout", ["as written", "CRLF, no final line break"])
def test_cli_checks_a_newer_python_file(tmp_path: Path, layout: str) -> None:
    text = NEWER if layout == "as written" else NEWER.rstrip("\n").replace("\n", "\r\n")
    (tmp_path / "train.py").write_bytes(text.encode("utf-8"))
    completed = run_cli("train.py", "--format", "json", "--no-cache", cwd=tmp_path)
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr == b""
    assert [(f["code"], f["line"], f["column"]) for f in json_findings(completed)] == [("CKP101", 16, 16)]


def test_fix_round_trip_on_a_newer_python_file(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(NEWER, encoding="utf-8")
    completed = run_cli("--fix", "train.py", "--no-cache", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert path.read_text(encoding="utf-8") == NEWER.replace(
        "checkpoint(model.forward, x)", "checkpoint(model.forward, x, use_reentrant=True)"
    )
    assert run_cli("train.py", "--no-cache", cwd=tmp_path).returncode == 0


def test_add_noqa_round_trip_on_a_newer_python_file(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(NEWER, encoding="utf-8")
    assert run_cli("--add-noqa", "train.py", "--no-cache", cwd=tmp_path).returncode == 0
    assert "return checkpoint(model.forward, x)  # noqa: CKP101\n" in path.read_text(encoding="utf-8")
    assert run_cli("train.py", "--no-cache", cwd=tmp_path).returncode == 0
