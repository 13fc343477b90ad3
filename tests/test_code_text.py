"""code_text: comments are what Python's tokenizer calls comments, nothing else; where the scan
cannot be sure (Python 3.12's nested f-string quotes) it says so."""

from __future__ import annotations

import ast
import io
import tokenize

import pytest

from ckptlint.code_text import code_digest, strip_comments, strip_comments_bytes
from conftest import FIXTURES

SAMPLES = [
    "x = 1  # one\n",
    "s = '#not a comment'  # a comment\n",
    's = "a \\" # still a string"  # comment\n',
    "doc = '''\n# inside a docstring\n'''  # after\n",
    'doc = """a\\""" # still"""\n# a line\n',
    "f = f'{x!r:#>10}'  # format spec with a hash\n",
    "f = rf'{x}\\d#'  # raw f-string\n",
    "b = rb'#' + br\"#\"  # bytes\n",
    "if'a'=='#':  # keyword then string\n    pass\n",
    "t = (1,  # inside brackets\n     2)\n",
    "x = 1 \\\n    + 2  # continued\n",
    "s = 'a\\\n#b'  # escaped newline inside a string\n",
    "x = 1\r\n# crlf\r\ny = 2  # end\r\n",
    "# only a comment",
    "",
]


def _tokenizer_comments(text: str) -> list[str]:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]


@pytest.mark.parametrize("text", SAMPLES)
def test_what_is_stripped_is_what_the_tokenizer_calls_comments(text: str) -> None:
    stripped = strip_comments(text)
    assert stripped is not None
    assert _tokenizer_comments(stripped) == []
    assert stripped.count("\n") == text.count("\n")  # lines kept: positions do not move
    assert ast.dump(ast.parse(stripped), include_attributes=True) == ast.dump(ast.parse(text), include_attributes=True)
    assert len(text) - len(stripped) >= sum(len(c) for c in _tokenizer_comments(text))
    assert strip_comments_bytes(text.encode()) == stripped.encode()


def test_every_fixture_keeps_its_syntax_tree_and_lines() -> None:
    checked = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        stripped = strip_comments(text)
        if stripped is None:
            continue
        assert ast.dump(ast.parse(stripped), include_attributes=True) == ast.dump(tree, include_attributes=True), path
        assert stripped.count("\n") == text.count("\n"), path
        checked += 1
    assert checked > 300


@pytest.mark.parametrize("text", ['d = {"k": 1}\ns = f"{d["k"]}"  # 3.12\n', "s = f'{x['#']}'  # 3.12\n"])
def test_nested_fstring_quotes_are_not_guessed(text: str) -> None:
    assert strip_comments(text) is None
    assert strip_comments_bytes(text.encode()) == text.encode()


def test_the_digest_ignores_comments_and_trailing_blank_lines_only() -> None:
    base = "import random\n\n\ndef block(x):\n    return x * random.random()\n"
    same = [base + "\n# end\n\n", base.replace("random()\n", "random()  # why\n"), base.replace("\n\n\ndef", "\n\n# block\ndef")]
    other = ["# top\n" + base, base.replace("x *", "x +"), base + "y = 1\n"]
    digest = code_digest(strip_comments(base) or "")
    assert all(code_digest(strip_comments(text) or "") == digest for text in same)
    assert all(code_digest(strip_comments(text) or "") != digest for text in other)
