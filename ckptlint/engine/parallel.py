"""Running the analysis in a process pool as the run releases files (schedule.py), or in this
process when the work is too small to pay for starting workers (about 0.3 s each)."""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Protocol

from ckptlint.engine import worker
from ckptlint.engine.cache import ModuleEdges
from ckptlint.prefilter import Names
from ckptlint.engine.worker import Outcome, Settings

MIN_FILES_PER_WORKER = 8  # below this, workers cost more than they save
CHUNK = 6  # files per job: small enough to balance two workers, large enough to share state
SYNTAX_CHUNK = 200  # named files per job that only need parsing


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class Feed(Protocol):
    """What a run hands its workers: files as they are released, the names to analyse them
    with, and where outcomes go (run.py)."""

    def __len__(self) -> int: ...  # files still to analyse, released or not

    def names(self) -> Names: ...

    def take(self, count: int) -> list[str]: ...  # up to `count` files to analyse now

    def record(self, outcomes: list[Outcome], edges: dict[str, ModuleEdges], names: Names) -> None: ...

    def unblock(self) -> bool: ...  # nothing runs and nothing is released: release what waits

    def retry(self, paths: list[str]) -> None: ...  # their job was lost with its worker


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

    def execute(self, settings: Settings, roots: list[str], feed: Feed, syntax_only: list[str]) -> None:
        """Analyse what `feed` releases until it has nothing left, and check the syntax of
        `syntax_only`; every outcome goes to `feed.record` as its job ends."""
        if self._pool is None:
            workers = min(self.jobs, len(feed) // MIN_FILES_PER_WORKER + (1 if syntax_only else 0))
            if workers <= 1 or multiprocessing.current_process().daemon:  # a daemon (flake8's workers) cannot fork
                self._run_in_process(settings, roots, feed, syntax_only)
                return
            context = multiprocessing.get_context(_start_method())
            self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=worker.start_process)
        running: dict[Future[tuple[list[Outcome], dict[str, ModuleEdges]]], tuple[list[str], list[str], Names]] = {}
        syntax = [syntax_only[i : i + SYNTAX_CHUNK] for i in range(0, len(syntax_only), SYNTAX_CHUNK)]
        try:
            while True:
                while len(running) < 2 * self.jobs:  # a few jobs queued: a file released now runs soon
                    names = feed.names().copy()
                    chunk = feed.take(CHUNK)
                    if chunk:
                        running[self._pool.submit(worker.run_job, settings, names, roots, chunk, [])] = (chunk, [], names)
                    elif syntax:  # nothing released yet: parse named files meanwhile
                        parse = syntax.pop()
                        running[self._pool.submit(worker.run_job, settings, names, roots, [], parse)] = ([], parse, names)
                    else:
                        break
                if not running:
                    if feed.unblock():
                        continue
                    return
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    _, _, names = running.pop(future)
                    outcomes, edges = future.result()
                    feed.record(outcomes, edges, names)
        except (BrokenProcessPool, OSError):
            # a worker died (killed for memory, or cannot start here): do the rest in this process
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
            for chunk, parse, _ in running.values():
                feed.retry(chunk)
                syntax.append(parse)
            self._run_in_process(settings, roots, feed, [path for parse in syntax for path in parse])

    def _run_in_process(self, settings: Settings, roots: list[str], feed: Feed, syntax_only: list[str]) -> None:
        self._in_process = True
        enabled = gc.isenabled()
        gc.disable()
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, worker.RECURSION_LIMIT))
        try:
            while True:
                names = feed.names().copy()
                chunk = feed.take(CHUNK)
                if not chunk:
                    if feed.unblock():
                        continue
                    break
                feed.record(*worker.run_job(settings, names, roots, chunk, []), names)
            if syntax_only:
                names = feed.names().copy()
                feed.record(*worker.run_job(settings, names, roots, [], syntax_only), names)
        finally:
            sys.setrecursionlimit(limit)
            if enabled:
                gc.enable()


def _start_method() -> str:
    """fork is fastest (no re-import), but only safe in a single-threaded process on Linux;
    the language server runs threads, so it spawns."""
    return "fork" if sys.platform.startswith("linux") and threading.active_count() == 1 else "spawn"
