"""Running the analysis in a process pool, largest files first, or in this process when the
work is too small to pay for starting workers (about 0.3 s each)."""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from ckptlint.engine import worker
from ckptlint.engine.cache import ModuleEdges
from ckptlint.prefilter import Names
from ckptlint.engine.worker import Outcome, Settings

MIN_FILES_PER_WORKER = 8  # below this, workers cost more than they save
CHUNK = 6  # files per job: small enough to balance two workers, large enough to share state


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class Workers:
    """The processes of one run, kept for all its rounds (run.py): a round that starts once
    more names turned up reuses the modules the earlier rounds parsed (worker.run_job)."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None
        self._in_process = False

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        if self._in_process:
            worker.forget()
            self._in_process = False

    def execute(
        self,
        settings: Settings,
        names: Names,
        roots: list[str],
        analyse: list[str],
        syntax_only: list[str],
        size: Callable[[str], int],
    ) -> tuple[list[Outcome], dict[str, ModuleEdges]]:
        """Outcomes for every file in `analyse` and `syntax_only` (in no particular order), and
        the import edges of the modules they depend on (see worker.run_job)."""
        analyse = by_package(analyse, size)
        if self._pool is None:
            workers = min(self.jobs, len(analyse) // MIN_FILES_PER_WORKER + (1 if syntax_only else 0))
            if workers <= 1 or multiprocessing.current_process().daemon:  # a daemon (flake8's workers) cannot fork
                return self._run_in_process(settings, names, roots, analyse, syntax_only)
            context = multiprocessing.get_context(_start_method())
            self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=worker.start_process)
        chunks = [analyse[i : i + CHUNK] for i in range(0, len(analyse), CHUNK)]
        syntax_chunks = [syntax_only[i : i + 200] for i in range(0, len(syntax_only), 200)]
        outcomes: list[Outcome] = []
        edges: dict[str, ModuleEdges] = {}
        try:
            futures = [self._pool.submit(worker.run_job, settings, names, roots, chunk, []) for chunk in chunks]
            futures += [self._pool.submit(worker.run_job, settings, names, roots, [], chunk) for chunk in syntax_chunks]
            for future in futures:
                job_outcomes, job_edges = future.result()
                outcomes.extend(job_outcomes)
                edges.update(job_edges)
        except (BrokenProcessPool, OSError):
            # a worker died (killed for memory, or cannot start here): do the work in this process
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
            return self._run_in_process(settings, names, roots, analyse, syntax_only)
        return outcomes, edges

    def _run_in_process(
        self, settings: Settings, names: Names, roots: list[str], analyse: list[str], syntax_only: list[str]
    ) -> tuple[list[Outcome], dict[str, ModuleEdges]]:
        self._in_process = True
        enabled = gc.isenabled()
        gc.disable()
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, worker.RECURSION_LIMIT))
        try:
            return worker.run_job(settings, names, roots, analyse, syntax_only)
        finally:
            sys.setrecursionlimit(limit)
            if enabled:
                gc.enable()


def by_package(paths: list[str], size: Callable[[str], int]) -> list[str]:
    """Files of one directory together, so that a state parses the modules they share once
    (`configuration_x.py` for the model files beside it); directories with the largest file
    first, and largest first within each, so that the long files do not come last."""
    groups: dict[str, list[str]] = {}
    for path in sorted(paths, key=lambda p: (-size(p), p)):
        groups.setdefault(os.path.dirname(path), []).append(path)
    return [path for group in groups.values() for path in group]


def _start_method() -> str:
    """fork is fastest (no re-import), but only safe in a single-threaded process on Linux;
    the language server runs threads, so it spawns."""
    return "fork" if sys.platform.startswith("linux") and threading.active_count() == 1 else "spawn"
