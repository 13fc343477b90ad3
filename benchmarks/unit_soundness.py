"""Whether an analysis can change when a function or method it never looked up changes: the
claim a dependency keyed per function and method would rest on, checked before it is built.

    python benchmarks/unit_soundness.py PROJECT [--sample N] [--seed S] [--jobs J] [--module PATH ...]
    python benchmarks/unit_soundness.py --summaries MODULE [MODULE ...]

`definition_reads.py --members` measures what such keys would save: what each analysis looks
up of a module (names at its top level, members of its classes) and which summaries of the
module it walks whole. A key per function and method is sound only if an analysis reads a
module through those two doors alone, with each summary keyed by what it found. This script
tries to break that:

1. lints PROJECT cold (dependency_soundness.ColdRun), which records each file's dependencies;
2. for `--sample` analysed files (or the dependents of each `--module`), analyses each alone in
   a fresh worker while noting what it looks up of each project module it depends on, and
   keeps its findings;
3. for every function and method of such a module that the analysis did not look up (a method
   whose class's members it listed counts as looked up), changes every constant of its body
   (`use_reentrant=False` becomes `True`, `p=0.1` becomes `p=1.1`), keeping every line where it
   was, and analyses the file again with the edited module as an editor's buffer;
4. counts an edit whose findings equal the first ones as kept, one that changes a summary of
   the module that a keyed walk would compare (`SUMMARIES`: what the module's and its classes'
   walks find) as skipped (a key would redo the file), and any other change as a break: a door
   the keys would not watch. Each break names the walks the analysis made of the module, those
   outside `SUMMARIES` first suspects.

Exit status 1 when a break was found.

`--summaries` asks instead how often a summary keyed by all it found would change: for each
function and method of each MODULE, its body is emptied (lines kept) and the summaries
compared, and the count of edits that change each is printed. A body edit usually adds or
drops a call, which most summaries list (by the name it spells, or all of them); a key that
compared whole summaries would redo every file that walked one.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ckptlint import symbols
from ckptlint.analysis.regions import mutability
from ckptlint.analysis.semantics.modules import _SpellingIndex
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.engine import worker
from ckptlint.engine.cache import EntryKind
from ckptlint.passed_arguments import calls_of
from ckptlint.project import Project
from ckptlint.source import SourceFile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from definition_reads import Reads, function_units, noting  # noqa: E402 - a sibling script, imported as a module
from dependency_soundness import ColdRun  # noqa: E402

# the walks of a module whole whose results the summaries below hold (definition_reads' names)
SUMMARIZED_WALKS = frozenset(
    {
        "mutability.walked_attributes",
        "mutability._called_from_forwards",
        "mutability.mutable_globals",
        "mutability._called_only_at_construction",
        "passed_arguments.calls_of",
        "modules.__init__",
    }
)


@dataclass
class Check:
    files: int = 0  # analysed alone
    pairs: int = 0  # (file, project module it depends on, read or not)
    unreadable: int = 0  # of those, modules that do not decode or parse here
    kept: int = 0  # edits of a unit not looked up that left the findings as they were
    skipped: int = 0  # edits that changed a summary (a keyed walk would redo the file)
    looked_up: int = 0  # units the analysis looked up (not edited)
    breaks: list[dict[str, Any]] = field(default_factory=list)
    unlisted: Counter[str] = field(default_factory=Counter)  # walks outside SUMMARIZED_WALKS, by pair


def summaries(path: str, text: str) -> Any:
    """What the walks a key would compare find in the module `text`, positions and names only."""
    tree = ast.parse(text)
    module = symbols.ModuleSymbols(Path(path).stem, SourceFile(path, path, text), tree)
    found: dict[str, Any] = {
        "walked_attributes": mutability.walked_attributes(module),
        "called_from_forwards": mutability._called_from_forwards(module),
        "construction_only": mutability._called_only_at_construction(module),
        "mutable_globals": mutability.Mutability(ClassIndex(Project())).mutable_globals(module),
        "calls_of": {scope.qualname: list(calls_of(module, scope)) for _, scope in ((f, module.scope_of[id(f)]) for f, _ in module.functions)},
        "spellings": vars(_SpellingIndex(module)),
    }
    for node, _ in module.classes:
        info = ClassInfo(module, module.scope_of[id(node)])
        found[f"class {info.scope.qualname}"] = (
            mutability._own_mutable_attributes(info),
            mutability._own_tensor_attributes(info),
            info._scan,
            sorted(info._methods_by_name),
            info.class_level_annotations,
            info.class_level_defaults,
        )
    return _canonical(found)


def _canonical(value: Any) -> Any:
    """`value` with syntax nodes as their kind and line (a constant with its value: the edits
    keep every line where it was and change constants), scopes as their qualified names."""
    if isinstance(value, ast.Constant):
        return ("Constant", value.lineno, repr(value.value))
    if isinstance(value, ast.AST):
        return (type(value).__name__, getattr(value, "lineno", None), getattr(value, "end_lineno", None))
    if isinstance(value, symbols.Scope):
        return ("scope", value.qualname)
    if isinstance(value, ClassInfo):
        return ("class", value.scope.qualname)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(_canonical(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, dict):
        return ("dict", sorted((repr(_canonical(k)), _canonical(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return ("set", sorted(repr(_canonical(v)) for v in value))
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    return value


def edits(text: str) -> list[tuple[str, str]]:
    """(unit, edited text) for each function at the module's top level and each method of a
    class there (`Class.method`) that holds a constant to change: every boolean of its body
    flipped, every number one more, every string one letter longer (f-strings, bytes and `None`
    left as they are). Every line stays where it was; columns move."""
    lines = _lines(text)
    found: list[tuple[str, str]] = []
    for name, node in function_units(ast.parse(text)):
        in_fstrings = {id(n) for s in node.body for j in ast.walk(s) if isinstance(j, ast.JoinedStr) for n in ast.walk(j)}
        constants = [
            c
            for s in node.body
            for c in ast.walk(s)
            if isinstance(c, ast.Constant) and id(c) not in in_fstrings and c.lineno == c.end_lineno and _changed(c.value) is not None
        ]
        if not constants:
            continue
        edited = list(lines)
        for constant in sorted(constants, key=lambda c: (c.lineno, c.col_offset), reverse=True):
            line = edited[constant.lineno - 1].encode()  # offsets are UTF-8 bytes
            start, end = constant.col_offset, constant.end_col_offset or constant.col_offset
            edited[constant.lineno - 1] = (line[:start] + str(_changed(constant.value)).encode() + line[end:]).decode()
        text_after = "".join(edited)
        try:
            ast.parse(text_after)
        except SyntaxError:
            continue
        found.append((name, text_after))
    return found


def emptied(text: str) -> list[tuple[str, str]]:
    """(unit, edited text) for each function and method `edits` would consider, its body
    replaced by `pass` lines (every line kept)."""
    lines = _lines(text)
    found: list[tuple[str, str]] = []
    for name, node in function_units(ast.parse(text)):
        first, last = node.body[0].lineno, node.end_lineno or node.lineno
        if first == node.lineno:
            continue
        indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        found.append((name, "".join([*lines[: first - 1], *[f"{indent}pass\n"] * (last - first + 1), *lines[last:]])))
    return found


def summary_changes(path: str) -> tuple[int, Counter[str]]:
    """How many of the module's functions and methods there are to empty, and per summary how
    many of those edits change it (a class's summaries count as one, `class`)."""
    text = Path(path).read_text()
    before = dict(summaries(path, text)[1])
    changed: Counter[str] = Counter()
    units = emptied(text)
    for _, edited in units:
        after = dict(summaries(path, edited)[1])
        differ = {key.strip("'").split()[0] for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
        changed.update(differ | ({"any"} if differ else set()))
    return len(units), changed


def _lines(text: str) -> list[str]:
    """The lines as the parser numbers them (`str.splitlines` also splits at form feeds)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def _changed(value: object) -> str | None:
    """The source of another constant of the same kind, or None to leave it."""
    if isinstance(value, bool):
        return repr(not value)
    if isinstance(value, (int, float)):
        return repr(value + 1)
    if isinstance(value, str):
        return repr(value + "x")
    return None


def findings_alone(cold: ColdRun, path: str, overlays: tuple[tuple[str, str], ...] = ()) -> tuple[str, ...]:
    """The file's findings, analysed alone in a fresh worker (with `overlays` as editor buffers)."""
    worker.forget()
    try:
        outcomes, _ = worker.run_job(replace(cold.settings, overlays=overlays), cold.names, cold.roots, [path], [])
    finally:
        worker.forget()
    (outcome,) = outcomes
    if outcome.internal_error is not None:
        return ("internal error: " + outcome.internal_error.strip().splitlines()[-1],)
    return tuple(sorted(json.dumps(f.to_dict(), sort_keys=True) for f in outcome.findings))


def check(
    project: Path,
    sample: int,
    seed: int = 0,
    jobs: int = 2,
    modules: list[Path] | None = None,
    progress: Callable[[str], None] | None = None,
    members: bool = True,
) -> Check:
    """Lint `project` cold, then edit what each sampled file's analysis did not look up (without
    `members`, a member looked up in its class does not count: the door a test closes to see a
    break found)."""
    cold = ColdRun.of(project, jobs)
    analysed = {path: entry for path, entry in cold.index.entries.items() if entry.kind == EntryKind.ANALYSED}
    if modules:
        wanted = {os.fspath(m.resolve()) for m in modules}
        candidates = sorted(path for path, entry in analysed.items() if wanted & (entry.deps.keys() - {path}))
    else:
        wanted = None
        candidates = sorted(analysed)
    chosen = random.Random(seed).sample(candidates, min(sample, len(candidates)))
    result = Check()
    for path in chosen:
        depended = sorted(m for m in analysed[path].deps if m != path and m.startswith(os.fspath(cold.root)) and (wanted is None or m in wanted))
        with noting(set(depended), members) as noted:
            first = findings_alone(cold, path)
        result.files += 1
        for module in depended:
            reads = noted.reads.get(module, Reads())  # none: reached through imports, never read
            result.pairs += 1
            unlisted = sorted(reads.walkers - SUMMARIZED_WALKS)
            result.unlisted.update(unlisted)
            try:
                text = Path(module).read_text()
                before, units = summaries(module, text), edits(text)
            except (SyntaxError, UnicodeDecodeError, ValueError):
                result.unreadable += 1  # the analysis reported it as CKP000; nothing to edit
                continue
            for unit, edited in units:
                owner = unit.partition(".")[0] if "." in unit else None
                if unit in reads.names or (owner is not None and f"{owner}.*" in reads.names):
                    result.looked_up += 1
                    continue
                if summaries(module, edited) != before:
                    result.skipped += 1
                    continue
                if findings_alone(cold, path, ((module, edited),)) == first:
                    result.kept += 1
                    continue
                result.breaks.append(
                    {"file": os.path.relpath(path, cold.root), "module": os.path.relpath(module, cold.root), "unit": unit, "walks": sorted(reads.walkers)}
                )
                if progress is not None:
                    progress(f"BREAK {result.breaks[-1]}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("project", type=Path, nargs="?")
    parser.add_argument("--summaries", type=Path, nargs="+", default=[], help="how often emptying a body changes each summary of these modules")
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--module", type=Path, nargs="+", default=[], help="check only the dependents of these modules, and only these")
    args = parser.parse_args(argv)
    for module in args.summaries:
        count, changed = summary_changes(os.fspath(module))
        by = ", ".join(f"{name} {n}" for name, n in changed.most_common() if name != "any")
        print(f"{module}: {changed['any']} of {count} emptied bodies change a summary ({by or 'none'})")
    if args.project is None:
        return 0
    found = check(args.project, args.sample, args.seed, args.jobs, args.module, progress=print)
    print(
        f"{found.files} files analysed alone, {found.pairs} (file, project module it depends on) pairs: of the functions and methods each did not "
        f"look up, {found.kept} edits kept the findings, {found.skipped} changed a summary (redone), {len(found.breaks)} broke; "
        f"{found.looked_up} looked up (not edited)"
    )
    if found.unreadable:
        print(f"{found.unreadable} pairs left out: the module does not decode or parse here")
    if found.unlisted:
        print("walks outside the summaries, by pair:", ", ".join(f"{name} {count}" for name, count in found.unlisted.most_common()))
    return 1 if found.breaks else 0


if __name__ == "__main__":
    sys.exit(main())
