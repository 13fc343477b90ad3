"""What the scheduler (scheduler.py) needs of the language server (server.py) it lints for."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lsprotocol import types

from ckptlint.lsp.analysis import LintOutcome
from ckptlint.lsp.documents import DocumentKey

if TYPE_CHECKING:
    from pygls.progress import Progress
    from pygls.workspace import Workspace


class SchedulerHost(Protocol):
    """The server as the Scheduler sees it: a protocol so that scheduler.py need not import server.py, which imports scheduler.py."""

    @property
    def workspace(self) -> Workspace: ...

    @property
    def work_done_progress(self) -> Progress: ...

    @property
    def client_capabilities(self) -> types.ClientCapabilities: ...

    @property
    def root(self) -> Path: ...

    def window_log_message(self, params: types.LogMessageParams) -> None: ...

    def accept(self, key: DocumentKey, version: int | None, outcome: LintOutcome, publish: bool = True) -> None: ...
