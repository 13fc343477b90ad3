"""What README.md and docs/ say about the command line holds for the command line itself.

Each claim is read from the doc and checked against a real run: the options table against
`ckptlint check --help`, code ranges and fixable rules against `ckptlint rules`, the fixes
each rule offers against `--format json` on the rule's own bad example, the JSON example
against what `--format json` prints for it, and every git ref the README pins against this
repository. A doc that drifts from the tool fails here, not in a user's terminal.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_cli

README = REPO / "README.md"
DOCS = REPO / "docs"


def _help_of_check() -> str:
    completed = run_cli("check", "--help")
    assert completed.returncode == 0, completed.stderr.decode()
    return completed.stdout.decode()


def _rules_listing() -> list[str]:
    completed = run_cli("rules")
    assert completed.returncode == 0, completed.stderr.decode()
    return [line for line in completed.stdout.decode().splitlines() if re.match(r"CKP\d{3}\b", line)]


def _table_after(text: str, header: str) -> list[list[str]]:
    """The body rows of the markdown table whose header line starts with `header`, as cells."""
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows


def _section(text: str, heading: str) -> str:
    """From `heading` up to the next heading of the same level."""
    start = text.index(heading + "\n")
    level = heading.split(" ")[0]
    end = text.find("\n" + level + " ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def _long_options(text: str) -> set[str]:
    return set(re.findall(r"--[a-z][a-z-]*", text))


def test_readme_options_table_lists_every_option_of_check() -> None:
    help_text = _help_of_check()
    in_help = set(re.findall(r"^  (?:-\w, )?(--[a-z][a-z-]*)", help_text, re.M))
    assert len(in_help) >= 20, help_text  # the parse found the options, not nothing
    table = _table_after(README.read_text(encoding="utf-8"), "| option | meaning |")
    in_table = set().union(*(_long_options(row[0]) for row in table))

    assert sorted(in_help - in_table) == [], "options of `ckptlint check` missing from README's options table"
    assert sorted(in_table - in_help) == [], "README's options table names options `ckptlint check` does not have"


_RANGE = re.compile(r"`?CKP(\d{3})`?\s*(?:to|through|–|—|-)\s*`?(?:CKP)?(\d{3})\b")


def test_code_ranges_in_the_docs_are_codes_ckptlint_has() -> None:
    """A range starting at the first code claims every code, so it must end at the last."""
    codes = [line.split()[0] for line in _rules_listing()]
    first, last = codes[0], codes[-1]
    pages = [README, *sorted(DOCS.glob("*.md")), *sorted((DOCS / "rules").glob("*.md"))]
    ranges = [(page.relative_to(REPO), f"CKP{low}", f"CKP{high}") for page in pages for low, high in _RANGE.findall(page.read_text(encoding="utf-8"))]
    assert any(low == first for _, low, _ in ranges), "no doc states the range of codes any more; this test reads docs/json-output.md's"

    for page, low, high in ranges:
        assert low in codes and high in codes, f"{page}: {low} to {high} names a code `ckptlint rules` does not list"
        if low == first:
            assert high == last, f"{page}: {low} to {high}, but `ckptlint rules` goes to {last}"


def _fix_table() -> dict[str, tuple[str, str]]:
    """docs/outputs.md's table of fixes: rule -> (safe fix, unsafe fix), "—" for none."""
    fixes = _section((DOCS / "outputs.md").read_text(encoding="utf-8"), "## Fixes")
    return {row[0]: (row[1], row[2]) for row in _table_after(fixes, "| rule |") if re.fullmatch(r"CKP\d{3}", row[0])} if "| rule |" in fixes else {}


def _bad_example(code: str) -> str:
    page = (DOCS / "rules" / f"{code}.md").read_text(encoding="utf-8")
    block = re.search(r"## Bad\n\n```python\n(.*?)```", page, re.S)
    assert block is not None, code
    return block.group(1)


@pytest.fixture(scope="module")
def offered_fixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Per fixable rule, the applicabilities `--format json` gives its findings on the rule's own bad example."""
    fixable = [line.split()[0] for line in _rules_listing() if line.rstrip().endswith("(fixable)")]
    folder = tmp_path_factory.mktemp("bad_examples")
    for code in fixable:
        (folder / f"{code.lower()}.py").write_text(_bad_example(code), encoding="utf-8")
    completed = run_cli("--format", "json", "--no-project", "--no-cache", "--exit-zero", *(f"{code.lower()}.py" for code in fixable), cwd=folder)
    assert completed.returncode == 0, completed.stderr.decode()
    offered: dict[str, set[str]] = {code: set() for code in fixable}
    for finding in json.loads(completed.stdout)["findings"]:
        if finding["code"] in offered and finding["path"] == f"{finding['code'].lower()}.py":
            offered[finding["code"]] |= {fix["applicability"] for fix in finding["fixes"]}
    return offered


def test_outputs_fix_table_names_the_fixable_rules_and_their_kinds_of_fix(offered_fixes: dict[str, set[str]]) -> None:
    assert len(offered_fixes) >= 2 and all(offered_fixes.values()), offered_fixes  # each bad example gets a fix
    table = _fix_table()

    assert sorted(table) == sorted(offered_fixes), "docs/outputs.md's fixes table against the (fixable) marks of `ckptlint rules`"
    for code, (safe, unsafe) in table.items():
        documented = {kind for kind, text in (("safe", safe), ("unsafe", unsafe)) if text not in ("—", "-", "")}
        assert documented == offered_fixes[code], f"{code}: docs/outputs.md says {sorted(documented)}, --format json gives {sorted(offered_fixes[code])}"


def test_fix_options_help_names_the_rules_each_applies(offered_fixes: dict[str, set[str]]) -> None:
    help_text = _help_of_check()

    def codes_in_help(option: str) -> set[str]:
        start = help_text.index(f"  {option} ")
        end = re.compile(r"^  -", re.M).search(help_text, start + 1)
        return set(re.findall(r"CKP\d{3}", help_text[start : end.start() if end else len(help_text)]))

    assert codes_in_help("--fix") == {code for code, kinds in offered_fixes.items() if "safe" in kinds}
    assert codes_in_help("--unsafe-fixes") == {code for code, kinds in offered_fixes.items() if "unsafe" in kinds}


def test_json_output_example_is_what_ckptlint_prints(tmp_path: Path) -> None:
    page = (DOCS / "json-output.md").read_text(encoding="utf-8")
    source = re.search(r"this `(\w+\.py)`:\n\n```python\n(.*?)```", page, re.S)
    assert source, "docs/json-output.md no longer shows the file its example lints"
    command = re.search(r"`ckptlint (--format json [^`]*)` prints", page[source.end() :])
    shown = re.search(r"```json\n(.*?)```", page[source.end() :], re.S)
    assert command and shown, "docs/json-output.md no longer shows the command after the file, and its output"
    (tmp_path / source.group(1)).write_text(source.group(2), encoding="utf-8")

    completed = run_cli(*command.group(1).split(), cwd=tmp_path, env={"CKPTLINT_CACHE_DIR": str(tmp_path / "cache")})

    printed, documented = json.loads(completed.stdout), json.loads(shown.group(1))
    documented["tool"]["version"] = printed["tool"]["version"]  # a release bump is not a doc error
    assert printed == documented
    assert completed.returncode == (2 if documented["problems"] else 1)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


def _pinned_refs(readme: str) -> set[str]:
    """Every ref a README command pins: `git+URL@REF` and pre-commit's `rev: REF`."""
    refs = set(re.findall(r"git\+[a-z]+://[^\s'\"@]+@([\w./-]+)", readme))
    refs |= set(re.findall(r"^\s*rev:\s*['\"]?([^\s'\"#]+)", readme, re.M))
    refs |= set(re.findall(r"`rev:\s+([^`\s]+)`", readme))
    return refs


def test_every_ref_the_readme_pins_exists_in_this_repository() -> None:
    top = _git("rev-parse", "--show-toplevel") if shutil.which("git") else None
    if top is None or top.returncode != 0 or Path(top.stdout.strip()).resolve() != REPO:
        pytest.skip("not a git checkout of ckptlint (an sdist, or a copy inside another repository)")
    refs = _pinned_refs(README.read_text(encoding="utf-8"))
    assert refs, "README pins no ref any more; this test reads its install, pre-commit and CI lines"
    remote_branches = set(_git("for-each-ref", "--format=%(refname:lstrip=3)", "refs/remotes").stdout.split())

    for ref in sorted(refs):
        exists = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").returncode == 0 or ref in remote_branches
        assert exists, f"README pins `{ref}`, which is no tag, branch or commit of this repository (git tag: {_git('tag').stdout.split()})"
