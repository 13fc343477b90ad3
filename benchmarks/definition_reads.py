"""What an analysis reads of a module it depends on: definitions by name, or the module whole.

    python benchmarks/definition_reads.py PROJECT MODULE [MODULE ...] [--sample N] [--seed S] [--jobs J] [--shared] [--members]

The cache redoes a file when a module among its dependencies changes (engine/worker.py), so
an edit of a module that 650 analyses read redoes 650 files. A dependency keyed by the
module's top-level definitions would redo only the files whose analysis read the edited
definition, as far as analyses reach a module through its names. This script measures how far
that holds, before anyone builds it:

1. lints PROJECT cold (dependency_soundness.ColdRun), which records each file's dependencies;
2. analyses each file that depends on MODULE (or `--sample` of them) alone, in a worker with
   nothing loaded, so that no memo another file filled answers for it; meanwhile it notes
   every lookup of a name at MODULE's top level, and every walk of MODULE whole (its top-level
   bindings listed; its tree, classes, functions, calls or scopes walked) with the analysis
   function that walked it (the engine's own bookkeeping is left out);
3. prints, per MODULE: how many files depend on it, how many of those walk it whole and in
   which functions, and for each top-level definition how many files an edit of it would redo
   under a key per definition (the files that read its name, and every walker), and how many
   read its name at all (what it would redo were each walk keyed by what it found, as long as
   the edit leaves that unchanged); a new definition that nothing names redoes the walkers.

MODULE is a path below PROJECT. Analysing files alone is slow (each loads what it imports):
`--sample` bounds it.

`--shared` measures instead what a key per definition could use without each memo carrying
what it read: a worker's memos answer for many files, so a file's own reads are not known, but
everything its process read so far is (a memo answers only what the process computed before).
It lints PROJECT cold as the CLI does (`--jobs` workers) and notes, for every dependent of
MODULE, the names read and the walks made of MODULE by its process up to the end of that
file's analysis; every dependent counts, and the process's own analysis of MODULE is among
what its later files are charged with.

`--members` notes too each member of one of MODULE's top-level classes looked up (in the class's
namespace, or as the method a class indexes by name) and prints what a key per function and
method would redo for an edit on a line drawn at random among them, each walk keyed by what it
found: the files that read the edited function by name, or looked the edited method up (or,
in the first figure, listed its class's members).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

from ckptlint import classes, symbols
from ckptlint.config import load_config
from ckptlint.engine import worker
from ckptlint.engine.cache import EntryKind
from ckptlint.engine.linter import Linter
from ckptlint.engine.run import Run

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dependency_soundness import ColdRun  # noqa: E402 - a sibling script, imported as a module

WALKED = ("classes", "functions", "calls", "tree")  # ModuleSymbols attributes that list the whole module
BOOKKEEPING = os.sep + os.path.join("ckptlint", "engine") + os.sep  # the engine reads modules to record them


@dataclass
class Reads:
    """What one analysis read of one module."""

    names: set[str] = field(default_factory=set)
    walkers: set[str] = field(default_factory=set)  # functions that walked the module whole


class _Noted:
    """The reads of the modules watched, by the file being analysed."""

    def __init__(self) -> None:
        self.reads: dict[str, Reads] = {}

    def name(self, module: str, name: str) -> None:
        self.reads.setdefault(module, Reads()).names.add(name)

    def listing(self, module: str, owner: str, depth: int) -> None:
        """A class's members listed (`--members`): all of them read."""
        if _analysis_caller(depth + 1) is not None:
            self.name(module, f"{owner}.*")

    def walk(self, module: str, depth: int) -> None:
        frame = _analysis_caller(depth + 1)
        if frame is not None:
            where = f"{Path(frame.f_code.co_filename).stem}.{frame.f_code.co_name}"
            self.reads.setdefault(module, Reads()).walkers.add(where)


def _analysis_caller(depth: int) -> FrameType | None:
    """The frame `depth` levels above the caller, unless it is the engine's bookkeeping (which
    reads modules to record them, not to analyse)."""
    frame = sys._getframe(depth + 1)
    return None if BOOKKEEPING in frame.f_code.co_filename else frame


class _NotingBindings(dict):  # type: ignore[type-arg]  # a scope's bindings, as symbols.Scope keeps them
    """A module scope's bindings that note each name looked up, and each listing of them all; a
    top-level class's (`--members`) note `Class.name`, and a listing as `Class.*`."""

    def __init__(self, bindings: dict[str, Any], module: str, noted: _Noted, owner: str = "") -> None:
        super().__init__(bindings)
        self.module = module
        self.noted = noted
        self.prefix = f"{owner}." if owner else ""

    def _listed(self) -> None:
        if self.prefix:
            self.noted.listing(self.module, self.prefix[:-1], 2)
        else:
            self.noted.walk(self.module, 2)

    def get(self, key: str, default: Any = None) -> Any:
        self.noted.name(self.module, self.prefix + key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.noted.name(self.module, self.prefix + key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.noted.name(self.module, self.prefix + str(key))
        return super().__contains__(key)

    def items(self) -> Any:
        self._listed()
        return super().items()

    def values(self) -> Any:
        self._listed()
        return super().values()

    def keys(self) -> Any:
        self._listed()
        return super().keys()

    def __iter__(self) -> Any:
        self._listed()
        return super().__iter__()


@contextmanager
def noting(watched: set[str], members: bool = False) -> Iterator[_Noted]:
    """Note the reads of the `watched` modules (paths) while the block runs; with `members`, also
    each lookup of a member of one of their top-level classes (`Class.name`)."""
    noted = _Noted()
    cls = symbols.ModuleSymbols
    original_init, original_scopes, original_method = cls.__init__, cls.iter_scopes, classes.ClassInfo.method

    def init(self: symbols.ModuleSymbols, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        path = os.fspath(self.source.path) if self.source is not None and self.source.path is not None else ""
        if path in watched:
            self.__dict__["_noted_path"] = path
            self.scope.bindings = _NotingBindings(self.scope.bindings, path, noted)
            for child in self.scope.children if members else ():
                if child.kind == symbols.CLASS:
                    child.bindings = _NotingBindings(child.bindings, path, noted, owner=child.qualname)

    def method(self: classes.ClassInfo, name: str) -> Any:  # the methods a class indexes by name
        path = self.module.__dict__.get("_noted_path")
        if path is not None and self.scope.parent is self.module.scope:
            noted.name(path, f"{self.scope.qualname}.{name}")
        return original_method(self, name)

    def walked(attribute: str) -> property:
        stored = "_noted_" + attribute

        def get(self: symbols.ModuleSymbols) -> Any:
            path = self.__dict__.get("_noted_path")
            if path is not None:
                noted.walk(path, 1)
            return self.__dict__[stored]

        def put(self: symbols.ModuleSymbols, value: Any) -> None:
            self.__dict__[stored] = value

        return property(get, put)

    def iter_scopes(self: symbols.ModuleSymbols) -> Any:
        path = self.__dict__.get("_noted_path")
        if path is not None:
            noted.walk(path, 1)
        return original_scopes(self)

    cls.__init__ = init  # type: ignore[method-assign]
    cls.iter_scopes = iter_scopes  # type: ignore[method-assign]
    if members:
        classes.ClassInfo.method = method  # type: ignore[method-assign]
    for attribute in WALKED:
        setattr(cls, attribute, walked(attribute))
    try:
        yield noted
    finally:
        cls.__init__ = original_init  # type: ignore[method-assign]
        cls.iter_scopes = original_scopes  # type: ignore[method-assign]
        classes.ClassInfo.method = original_method  # type: ignore[method-assign]
        for attribute in WALKED:
            delattr(cls, attribute)


def top_level_definitions(path: str) -> list[str]:
    """The names a module's top-level statements bind (defs, classes, assignments)."""
    tree = ast.parse(Path(path).read_bytes())
    found: list[str] = []
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(statement.name)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            found.extend(t.id for t in targets if isinstance(t, ast.Name))
    return list(dict.fromkeys(found))


@dataclass
class ModuleReads:
    module: str
    dependents: int  # analysed files that record the module among their dependencies
    measured: dict[str, Reads]  # dependent analysed alone -> what it read of the module (its process, `--shared`)
    how: str = "analysed alone"


def measure(project: Path, modules: list[Path], sample: int, seed: int = 0, jobs: int = 2, members: bool = False) -> list[ModuleReads]:
    cold = ColdRun.of(project, jobs)
    watched = {os.fspath(m.resolve()) for m in modules}
    analysed = {path: entry for path, entry in cold.index.entries.items() if entry.kind == EntryKind.ANALYSED}
    results: list[ModuleReads] = []
    for module in sorted(watched):
        dependents = sorted(path for path, entry in analysed.items() if module in entry.deps and path != module)
        chosen = random.Random(seed).sample(dependents, min(sample, len(dependents)))
        measured: dict[str, Reads] = {}
        for path in chosen:
            with noting({module}, members) as noted:
                cold.analyse_alone(path)
            measured[path] = noted.reads.get(module, Reads())
        results.append(ModuleReads(module, len(dependents), measured))
    return results


def measure_shared(project: Path, modules: list[Path], jobs: int = 2, members: bool = False) -> list[ModuleReads]:
    """Lint `project` cold with `jobs` workers; for each file that depends on a module of
    `modules`, what its process had read of the module when the file's analysis ended."""
    project = project.resolve()
    root = next((d for d in (project, *project.parents) if (d / "pyproject.toml").is_file()), project)
    watched = {os.fspath(m.resolve()) for m in modules}
    files = sorted(os.fspath(p) for p in project.rglob("*.py") if "__pycache__" not in p.parts)
    scratch = Path(tempfile.mkdtemp(prefix="ckptlint-definition-reads-"))
    original = worker.WorkerState._analyse_here
    try:
        with noting(watched, members) as noted:

            def analyse_here(state: worker.WorkerState, path: str) -> worker.Outcome:
                outcome = original(state, path)
                seen = {}
                for module in watched & outcome.dependencies.keys() - {path}:
                    reads = noted.reads.get(module, Reads())
                    seen[module] = {"names": sorted(reads.names), "walkers": sorted(reads.walkers)}
                with open(scratch / f"{os.getpid()}.jsonl", "a") as log:  # a line per file, from each worker
                    log.write(json.dumps([path, seen]) + "\n")
                return outcome

            worker.WorkerState._analyse_here = analyse_here  # type: ignore[method-assign, assignment]  # the workers fork with it
            Run(Linter(load_config(None, root), base=root, jobs=jobs, cache_dir=scratch / "cache"), files, []).execute()
        measured: dict[str, dict[str, Reads]] = {module: {} for module in watched}
        for log in scratch.glob("*.jsonl"):
            for line in log.read_text().splitlines():
                path, seen = json.loads(line)
                for module, reads in seen.items():
                    measured[module][path] = Reads(set(reads["names"]), set(reads["walkers"]))
    finally:
        worker.WorkerState._analyse_here = original  # type: ignore[method-assign]
        shutil.rmtree(scratch, ignore_errors=True)
    return [ModuleReads(module, len(measured[module]), measured[module], "in its process's shared state") for module in sorted(watched)]


def report(found: ModuleReads, root: Path) -> list[str]:
    reads = list(found.measured.values())
    walkers = [r for r in reads if r.walkers]
    by_function = Counter(function for r in reads for function in r.walkers)
    lines = [
        f"{os.path.relpath(found.module, root)}: {found.dependents} dependents, {len(reads)} {found.how}; "
        f"{sum(1 for r in reads if r.names or r.walkers)} read it, {len(walkers)} walk it whole "
        f"({', '.join(f'{f} {n}' for f, n in by_function.most_common(4))})"
    ]
    definitions = top_level_definitions(found.module)
    redone = sorted(((sum(1 for r in reads if r.walkers or name in r.names), name) for name in definitions), reverse=True)
    if redone:
        counts = [count for count, _ in redone]
        lines.append(
            f"  an edit of one of its {len(definitions)} top-level definitions would redo, of {len(reads)}: "
            f"max {counts[0]} ({redone[0][1]}), median {statistics.median(counts):g}, min {counts[-1]} ({redone[-1][1]}); "
            f"a new definition nothing names: {len(walkers)}"
        )
        by_name = sorted(((sum(1 for r in reads if name in r.names), name) for name in definitions), reverse=True)
        counts = [count for count, _ in by_name]
        lines.append(
            f"  were each walk keyed by what it found instead, an edit that leaves that unchanged would redo the files "
            f"that read the definition's name: max {counts[0]} ({by_name[0][1]}), median {statistics.median(counts):g}; "
            f"most read: {', '.join(f'{name} {count}' for count, name in by_name[:5])}"
        )
    return lines


def function_units(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(name, node) of each function at the module's top level and each method of a class there
    (`Class.method`): what a key per function and method would key."""
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for statement in tree.body:
        if isinstance(statement, functions):
            found.append((statement.name, statement))
        elif isinstance(statement, ast.ClassDef):
            found.extend((f"{statement.name}.{method.name}", method) for method in statement.body if isinstance(method, functions))
    return found


def units(path: str) -> list[tuple[str, int]]:
    """(name, lines) of each of the module's `function_units`."""
    tree = ast.parse(Path(path).read_bytes())
    return [(name, (node.end_lineno or node.lineno) - node.lineno + 1) for name, node in function_units(tree)]


def report_members(found: ModuleReads) -> list[str]:
    """`--members`: for an edit on a line drawn at random among the module's functions and
    methods, how many of the measured files would be redone under a key per function and method,
    each walk keyed by what it found: the files that looked the edited one up (a method looked up
    in its class), or, in the first figure, that listed its class's members."""
    reads = list(found.measured.values())
    drawn = units(found.module)
    lines: list[str] = []
    for listings in (True, False):
        readers = []
        for name, count in drawn:
            owner = name.partition(".")[0] if "." in name else None
            read = sum(1 for r in reads if name in r.names or (listings and owner is not None and f"{owner}.*" in r.names))
            readers.append((read, name, count))
        weighted = sorted(read for read, _, count in readers for _ in range(count))
        unread = [(name, count) for read, name, count in readers if read == 0]
        how = "a listing of its class counted as a read" if listings else "listings keyed by what they found too"
        lines.append(
            f"  by function and method ({len(drawn)}, {len(weighted)} lines; {how}): an edit on a random line redoes, of {len(reads)}, "
            f"median {statistics.median(weighted) if weighted else 0:g}, p90 {weighted[int(0.9 * len(weighted))] if weighted else 0}, "
            f"max {weighted[-1] if weighted else 0}; read by none {len(unread)} ({sum(count for _, count in unread)} lines)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("project", type=Path)
    parser.add_argument("modules", type=Path, nargs="+")
    parser.add_argument("--sample", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--shared", action="store_true", help="what each dependent's process read, in a cold run as the CLI does it")
    parser.add_argument("--members", action="store_true", help="also the members of top-level classes looked up, and a key per function and method")
    args = parser.parse_args(argv)
    root = args.project.resolve()
    if args.shared:
        measured = measure_shared(args.project, args.modules, args.jobs, args.members)
    else:
        measured = measure(args.project, args.modules, args.sample, args.seed, args.jobs, args.members)
    for found in measured:
        print("\n".join(report(found, root) + (report_members(found) if args.members else [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
