"""When and where the language server lints: file-local at once, project-wide in the background.

Opening or editing a document runs a file-local lint (analysis.py) on one thread and
publishes it; then the document joins the queue for a project-wide lint, which runs in a
child process and publishes the refined diagnostics. Meanwhile the event loop only waits,
so hover, code actions and the next document's file-local lint are answered at once.

Why a process for the project-wide lint: the in-process analysis keeps its state in a
module global (engine/worker.py), so two analyses in one process cannot overlap; and a
cold scan of a large repository is a minute of CPU that, in a thread, would hold the GIL
against the event loop. The child is a single worker, so project lints never overlap and
their cache is written by one process at a time. The queue holds each document once: a
newer edit replaces a queued lint, and a result for a version the editor has moved past
is dropped, never published. File-local lints share one thread for the same reason.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
from dataclasses import replace
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from lsprotocol import types

from ckptlint.lsp.analysis import LintOutcome, LintRequest, Scope, lint_document, load_fixes, project_scope, warm_up
from ckptlint.lsp.documents import DocumentKey, open_documents
from ckptlint.lsp.host import SchedulerHost

PROGRESS_CREATE_TIMEOUT = 5.0  # seconds a client may take to accept a progress token
logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, server: SchedulerHost) -> None:
        self.server = server
        self._local = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckptlint-file")
        self._project: ProcessPoolExecutor | None = None
        self._queue: dict[DocumentKey, None] = {}  # documents waiting for a project lint, oldest first
        self._queued = asyncio.Event()
        self._scanner: asyncio.Task[None] | None = None
        self._pending: dict[DocumentKey, asyncio.Task[None]] = {}  # debounced lints
        self._tokens = itertools.count(1)
        self._stopped = False
        self._fixes_loaded = False

    def start(self) -> None:
        """Load the analysis before the first document arrives. The child process starts with
        the first project lint, after the first file-local one, so as not to compete with it."""
        self._local.submit(warm_up)

    def stop(self) -> None:
        """End the child process, even in the middle of a scan (nothing waits for it)."""
        self._stopped = True
        self._local.shutdown(wait=False, cancel_futures=True)
        pool, self._project = self._project, None
        if pool is not None:
            processes = list(pool._processes.values())  # no public way to end them before 3.14
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()

    # -- requests -------------------------------------------------------------

    def lint(self, key: DocumentKey, delay: float = 0.0, local: bool = True) -> None:
        """Lint the document `key` names after `delay` seconds (a newer call replaces this one): file-local
        first unless `local` is false, then project-wide."""
        pending = self._pending.pop(key, None)
        if pending is not None:  # replaced: keep the file-local pass it may have been waiting to run
            pending.cancel()
            local = True

        async def run() -> None:
            if delay:
                await asyncio.sleep(delay)
            self._pending.pop(key, None)
            if local:
                outcome = await self.file_local(key)
                if outcome is None:
                    return
            self._enqueue(key)

        self._pending[key] = asyncio.get_running_loop().create_task(run())

    def forget(self, key: DocumentKey) -> None:
        """A closed document: drop its waiting lints."""
        pending = self._pending.pop(key, None)
        if pending is not None:
            pending.cancel()
        self._queue.pop(key, None)

    async def file_local(self, key: DocumentKey, publish: bool = True, fixes: bool = False) -> LintOutcome | None:
        """The file-local lint of the document as it is now (None when it failed or the
        document is not open); without `fixes`, its findings carry none (code actions ask
        again, with them)."""
        current = self._request(key)
        if current is None:
            return None
        request, version = current
        try:
            outcome = await self._run(self._local, replace(request, want_fixes=fixes))
        except Exception:  # noqa: BLE001 - a bug must not take the editor's server down
            self._internal_error(key)
            return None
        self.server.accept(key, version, outcome, publish)
        if not self._fixes_loaded:
            self._fixes_loaded = True
            self._local.submit(load_fixes)
        return outcome

    # -- the project-wide queue -----------------------------------------------

    def _enqueue(self, key: DocumentKey) -> None:
        self._queue.pop(key, None)
        self._queue[key] = None
        self._queued.set()
        if self._scanner is None or self._scanner.done():
            self._scanner = asyncio.get_running_loop().create_task(self._scan_queue())

    async def _scan_queue(self) -> None:
        while True:
            await self._queued.wait()
            self._queued.clear()
            while self._queue and not self._stopped:
                key = next(iter(self._queue))
                del self._queue[key]
                try:
                    await self._scan(key)
                except Exception:  # noqa: BLE001 - the next document's scan must still run
                    self._internal_error(key)

    async def _scan(self, key: DocumentKey) -> None:
        current = self._request(key)
        if current is None:  # closed since it was queued
            return
        request, version = current
        scope = await asyncio.to_thread(project_scope, request.path, request.base)
        message = f"project root {scope.root} ({len(scope.files)} files; {scope.reason}) for {request.path.name}"
        logger.info("ckptlint: %s", message)
        self.server.window_log_message(types.LogMessageParams(type=types.MessageType.Info, message=f"ckptlint: {message}"))
        token = await self._progress_begin(scope, request.path)
        outcome: LintOutcome | None = None
        try:
            outcome = await self._run(self._pool(), LintRequest(request.path, request.overlays, request.base, scope))
        except BrokenProcessPool:  # the child died (killed for memory?): a new one next time
            self._project = None
            self._internal_error(key)
        except Exception:  # noqa: BLE001
            self._internal_error(key)
        if outcome is not None:
            self.server.accept(key, version, outcome)
        if token is not None:
            found = "failed" if outcome is None else f"{len(outcome.findings)} findings in {request.path.name}"
            end = types.WorkDoneProgressEnd(message=found)
            self.server.work_done_progress.end(token, end)

    async def _progress_begin(self, scope: Scope, path: Path) -> str | None:
        """Work-done progress for a project scan, when the client shows it; its token."""
        window = self.server.client_capabilities.window
        if window is None or not window.work_done_progress:
            return None
        token = f"ckptlint-scan-{next(self._tokens)}"
        try:
            await asyncio.wait_for(self.server.work_done_progress.create_async(token), PROGRESS_CREATE_TIMEOUT)
        except Exception:  # noqa: BLE001 - a client that refuses or does not answer: scan without progress
            return None
        progress = self.server.work_done_progress
        progress.begin(token, types.WorkDoneProgressBegin(title="ckptlint: scanning the project", message=str(scope.root)))
        progress.report(token, types.WorkDoneProgressReport(message=f"{len(scope.files)} files, for {path.name}"))
        return token

    # -- helpers --------------------------------------------------------------

    def _request(self, key: DocumentKey) -> tuple[LintRequest, int | None] | None:
        """A file-local request for the document as it is now, and its version; None when it
        is not open, or is not a file (an `untitled:` buffer has no path to lint as)."""
        documents = open_documents(self.server.workspace)
        document = documents.get(key)
        if document is None or document.path is None:
            return None
        overlays = {Path(doc.path): doc.source for doc in documents.values() if doc.path and doc.path.endswith((".py", ".pyi"))}
        return LintRequest(Path(document.path), overlays, self.server.root), document.version

    def _pool(self) -> ProcessPoolExecutor:
        if self._stopped:
            raise RuntimeError("the language server is shutting down")
        if self._project is None:
            # spawn: the server runs threads, and fork copies them in whatever state they are
            self._project = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._project

    async def _run(self, executor: Executor, request: LintRequest) -> LintOutcome:
        return await asyncio.get_running_loop().run_in_executor(executor, lint_document, request)

    def _internal_error(self, key: DocumentKey) -> None:
        if self._stopped:  # a scan ended by the shutdown
            return
        logger.exception("ckptlint failed on %s", key)
        message = f"ckptlint: internal error on {key}"
        self.server.window_log_message(types.LogMessageParams(type=types.MessageType.Error, message=message))
