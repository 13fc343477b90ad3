"""Whether the cache's dependency sets hold what each analysis reads, and how coarse they are.

    python benchmarks/dependency_soundness.py PROJECT [--sample N] [--seed S] [--jobs J]

A file's cached result is redone when one of its dependencies changes (engine/worker.py): the
modules reachable from it through imports, among those its worker had loaded. Memos are
shared between the files a worker analyses, so that set is an over-approximation that nobody
traces. This script checks it against the one set that is exact: the modules a worker with
nothing loaded loads while it analyses the file alone (findings do not depend on what a
worker analysed before, so what the file's analysis reads is what that fresh worker loads).

1. lints PROJECT cold, as the CLI does (`--jobs`, its own cache directory), which records
   every analysed file's dependencies;
2. for `--sample` analysed files chosen at random, analyses each alone in a fresh worker with
   the run's names and settings, and lists the modules it loaded;
3. prints, per file and in sum, the modules loaded but not recorded (each one a result the
   cache could keep after that module changed: must be none) and the recorded count against
   the loaded count (what an edit of a dependency costs in files redone, and what a dependency
   set made of reads would save).

PROJECT is a directory under a `pyproject.toml` (its project root), e.g. a copy of
transformers' package folder with an empty `pyproject.toml` above it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from ckptlint.config import load_config
from ckptlint.context_prefilter import context_files
from ckptlint.engine import worker
from ckptlint.engine.worker import Settings
from ckptlint.engine.cache import EntryKind, Index
from ckptlint.engine.linter import Linter
from ckptlint.engine.run import Run
from ckptlint.prefilter import Names


@dataclass
class Check:
    analysed: int  # files the cold run analysed
    unrecorded: dict[str, list[str]]  # sampled file -> modules its fresh analysis loaded that its dependencies lack
    recorded: list[int]  # per sampled file: dependencies recorded
    loaded: list[int]  # per sampled file: modules its fresh analysis loaded


@dataclass
class ColdRun:
    """A project linted cold as the CLI does, and what analysing one of its files alone needs:
    the run's names and settings (the files that compile or hook, found as the run found them)."""

    root: Path
    index: Index
    settings: Settings
    names: Names
    roots: list[str]

    @classmethod
    def of(cls, project: Path, jobs: int) -> ColdRun:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), worker.RECURSION_LIMIT))
        project = project.resolve()
        root = next((d for d in (project, *project.parents) if (d / "pyproject.toml").is_file()), project)
        files = sorted(os.fspath(p) for p in project.rglob("*.py") if "__pycache__" not in p.parts)
        cache_dir = Path(tempfile.mkdtemp(prefix="ckptlint-dependency-soundness-"))
        try:
            Run(Linter(load_config(None, root), base=root, jobs=jobs, cache_dir=cache_dir), files, []).execute()
            recorded = Run(Linter(load_config(None, root), base=root, jobs=1, cache_dir=cache_dir), files, [])
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
        index = recorded.reuse.index
        names = Names.of(recorded.linter.catalogue)
        names.update(index.names.thawed())
        found, _ = context_files(files, recorded.mentions, recorded.workspace.data, recorded.workspace.digest, index.compile_calls)
        return cls(root, index, replace(recorded.settings, context_files=found), names, recorded.roots)

    def analyse_alone(self, path: str) -> set[str]:
        """Analyse `path` in a worker with nothing loaded: the modules it loaded."""
        worker.forget()
        try:
            worker.run_job(self.settings, self.names, self.roots, [path], [])
            state = worker._STATE  # noqa: SLF001 - the fresh state is what is measured
            assert state is not None
            return {os.fspath(module.path) for module in state.project.loaded()}
        finally:
            worker.forget()


def check(project: Path, sample: int, seed: int = 0, jobs: int = 2) -> Check:
    """Lint `project` cold, then analyse `sample` of its analysed files alone (all of them when
    `sample` is larger) and compare what each loads with what the cache recorded."""
    cold = ColdRun.of(project, jobs)
    index, root = cold.index, cold.root
    analysed = sorted(path for path, entry in index.entries.items() if entry.kind == EntryKind.ANALYSED)
    chosen = random.Random(seed).sample(analysed, min(sample, len(analysed)))
    result = Check(len(analysed), {}, [], [])
    for path in chosen:
        loaded = cold.analyse_alone(path)
        deps = set(index.entries[path].deps)
        missing = sorted(loaded - deps)
        if missing:
            result.unrecorded[os.path.relpath(path, root)] = [os.path.relpath(m, root) for m in missing]
        result.recorded.append(len(deps))
        result.loaded.append(len(loaded))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("project", type=Path)
    parser.add_argument("--sample", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    found = check(args.project, args.sample, args.seed, args.jobs)
    for path, missing in found.unrecorded.items():
        print(f"UNRECORDED {path}: {len(missing)} loaded modules not in its dependencies ({', '.join(missing[:5])})")
    ratios = [recorded / max(1, loaded) for recorded, loaded in zip(found.recorded, found.loaded)]
    print(
        f"{len(found.recorded)} of {found.analysed} analysed files: {len(found.unrecorded)} with a module loaded but not recorded; "
        f"dependencies recorded median {statistics.median(found.recorded):.0f} (max {max(found.recorded)}), "
        f"modules a fresh analysis loads median {statistics.median(found.loaded):.0f} (max {max(found.loaded)}), "
        f"recorded / loaded median {statistics.median(ratios):.1f}x"
    )
    return 1 if found.unrecorded else 0


if __name__ == "__main__":
    sys.exit(main())
