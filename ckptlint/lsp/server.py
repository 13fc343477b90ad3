"""`ckptlint lsp`: a language server (pygls) with diagnostics and fixes in the editor.

Diagnostics are computed from the editor's unsaved buffers (every open document is an
overlay, so a region in another open file is analysed as typed), on open, on change
(debounced) and on save, in two passes (scheduler.py): file-local at once, then refined
with project-wide region resolution from a background worker, with work-done progress,
while the server keeps answering. Positions use the negotiated encoding (UTF-16 unless the
client offers another). Code actions: each finding's fixes (the safe one preferred),
"ignore with # noqa", and a `source.fixAll.ckptlint` action. Hovering a rule code in a
comment shows the rule's page. The configuration is read on every lint, so a changed
pyproject.toml takes effect without a restart. Malformed requests get JSON-RPC errors
(protocol.py).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.lsp.server import LanguageServer

from ckptlint.version import __version__
from ckptlint.finding import SAFE, Edit, Finding, Fix
from ckptlint.fixes import chosen_fixes
from ckptlint.lsp.analysis import LintOutcome
from ckptlint.lsp.documents import DocumentKey, client_uri, document_key, open_document, open_documents, path_key
from ckptlint.lsp.protocol import CkptlintProtocol
from ckptlint.lsp.scheduler import Scheduler
from ckptlint.noqa import noqa_edits
from ckptlint.positions import convert_column, to_code_points
from ckptlint.reporters.diagnostics import diagnostic
from ckptlint.source import SourceFile

if TYPE_CHECKING:
    from pygls.server import ServerErrors
    from pygls.workspace import TextDocument

DEBOUNCE_SECONDS = 0.3
FIX_ALL = types.CodeActionKind.SourceFixAll + ".ckptlint"
logger = logging.getLogger(__name__)


class CkptlintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "ckptlint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental, protocol_cls=CkptlintProtocol
        )
        self.outcomes: dict[DocumentKey, LintOutcome] = {}  # the last lint published (or its findings with fixes)
        self.scheduler = Scheduler(self)
        self._sources: dict[str, SourceFile] = {}  # lines for column conversion, by display path
        self._converter = get_converter()

    # -- linting --------------------------------------------------------------

    @property
    def encoding(self) -> str:
        encoding = self.workspace.position_encoding or "utf-16"
        return getattr(encoding, "value", encoding)  # an enum member: its str() is its name

    @property
    def root(self) -> Path:
        root = self.workspace.root_path
        return Path(root) if root else Path.cwd()

    def accept(self, key: DocumentKey, version: int | None, outcome: LintOutcome, publish: bool = True) -> None:
        """Publish a lint's findings under the URI the client opened the document with,
        unless it was closed or edited since. Without `publish`: keep findings with fixes for
        code actions, in place of file-local ones published without them."""
        document = open_document(self.workspace, key)
        if document is None or document.version != version:
            return
        if not publish:
            current = self.outcomes.get(key)
            if current is None or not current.with_fixes:
                self.outcomes[key] = outcome
            return
        for message in outcome.messages:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"ckptlint: {message}"))
        self._sources.update(outcome.sources)
        self.outcomes[key] = outcome
        diagnostics = [self._diagnostic(finding) for finding in outcome.findings]
        published = types.PublishDiagnosticsParams(uri=document.uri, diagnostics=diagnostics, version=version)
        self.text_document_publish_diagnostics(published)

    def report_server_error(self, error: Exception, source: ServerErrors) -> None:
        if isinstance(self.protocol, CkptlintProtocol):
            self.protocol.reply_parse_error(error)
        super().report_server_error(error, source)

    def shutdown(self) -> None:
        self.scheduler.stop()  # the process running a project lint, too
        super().shutdown()  # type: ignore[no-untyped-call]  # pygls leaves it unannotated

    def _line(self, path: str, line: int) -> str:
        source = self._sources.get(path)
        if source is not None:
            return source.line(line)
        absolute = Path(path) if os.path.isabs(path) else self.root / path
        document = open_document(self.workspace, path_key(absolute))
        if document is not None and 0 < line <= len(document.lines):
            text: str = document.lines[line - 1]
            return text.rstrip("\r\n")
        return ""

    def _diagnostic(self, finding: Finding) -> types.Diagnostic:
        data = diagnostic(finding, self._line, self.encoding, uri_for=lambda path: client_uri(self.workspace, self.root / path))
        return self._converter.structure(data, types.Diagnostic)

    # -- edits ----------------------------------------------------------------

    def text_edits(self, document: TextDocument, edits: list[Edit]) -> list[types.TextEdit]:
        lines = [line.rstrip("\r\n") for line in document.lines]

        def position(line: int, column: int) -> types.Position:
            text = lines[line - 1] if 0 < line <= len(lines) else ""
            return types.Position(line=line - 1, character=convert_column(text, column, self.encoding))

        return [
            types.TextEdit(range=types.Range(start=position(e.line, e.column), end=position(e.end_line, e.end_column)), new_text=e.content)
            for e in edits
        ]

    def source_file(self, document: TextDocument) -> SourceFile:
        return SourceFile(document.path, document.path, document.source)


server = CkptlintServer()


@server.feature(types.INITIALIZED)
def on_initialized(ls: CkptlintServer, params: types.InitializedParams) -> None:
    ls.scheduler.start()


@server.feature(types.SHUTDOWN)
def on_shutdown(ls: CkptlintServer, params: None) -> None:
    ls.scheduler.stop()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: CkptlintServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.scheduler.lint(document_key(params.text_document.uri))


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: CkptlintServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.scheduler.lint(document_key(params.text_document.uri), DEBOUNCE_SECONDS)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: CkptlintServer, params: types.DidSaveTextDocumentParams) -> None:
    for key in open_documents(ls.workspace):  # a saved file can change another's regions
        if key.endswith((".py", ".pyi")):
            ls.scheduler.lint(key, local=False)  # the file-local findings cannot have changed


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: CkptlintServer, params: types.DidCloseTextDocumentParams) -> None:
    key = document_key(params.text_document.uri)
    ls.outcomes.pop(key, None)
    ls.scheduler.forget(key)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def did_change_watched_files(ls: CkptlintServer, params: types.DidChangeWatchedFilesParams) -> None:
    for key in open_documents(ls.workspace):  # the configuration may have changed: both passes
        if key.endswith((".py", ".pyi")):
            ls.scheduler.lint(key)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=False),
)
async def code_action(ls: CkptlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    key = document_key(params.text_document.uri)
    document = open_document(ls.workspace, key)
    if document is None:  # only open documents
        return []
    outcome = ls.outcomes.get(key)
    if outcome is None or not outcome.with_fixes:  # not linted yet, or file-local so far: with fixes now
        outcome = await ls.scheduler.file_local(key, publish=False, fixes=True)
    findings = [] if outcome is None else outcome.findings
    wanted = params.context.only
    actions: list[types.CodeAction] = []
    if not wanted or any(kind.startswith(types.CodeActionKind.QuickFix) for kind in wanted):
        for finding in findings:
            if _overlaps(ls, document, finding, params.range):
                actions.extend(_quick_fixes(ls, document, finding))
    if not wanted or any(FIX_ALL.startswith(kind) or kind == types.CodeActionKind.Source for kind in wanted):
        safe = chosen_fixes(findings, unsafe=False)
        if safe:
            edits = ls.text_edits(document, [edit for fix in safe for edit in fix.edits])
            actions.append(
                types.CodeAction(
                    title="ckptlint: fix all safe fixes",
                    kind=FIX_ALL,
                    edit=types.WorkspaceEdit(changes={document.uri: edits}),
                )
            )
    return actions


def _overlaps(ls: CkptlintServer, document: TextDocument, finding: Finding, selection: types.Range) -> bool:
    lines = [line.rstrip("\r\n") for line in document.lines]

    def key(line: int, character: int) -> tuple[int, int]:
        text = lines[line] if 0 <= line < len(lines) else ""
        return line + 1, to_code_points(text, character, ls.encoding)

    start = key(selection.start.line, selection.start.character)
    end = key(selection.end.line, selection.end.character)
    return (finding.line, finding.column) <= end and start <= (finding.end_line, finding.end_column)


def _quick_fixes(ls: CkptlintServer, document: TextDocument, finding: Finding) -> list[types.CodeAction]:
    diagnostic_ = ls._diagnostic(finding)
    actions = []
    for fix in finding.fixes:
        actions.append(_fix_action(ls, document, fix, diagnostic_))
    noqa = noqa_edits(ls.source_file(document), [finding])
    if noqa:
        actions.append(
            types.CodeAction(
                title=f"ckptlint: ignore {finding.code} on this line (# noqa)",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[diagnostic_],
                edit=types.WorkspaceEdit(changes={document.uri: ls.text_edits(document, noqa)}),
            )
        )
    return actions


def _fix_action(ls: CkptlintServer, document: TextDocument, fix: Fix, diagnostic_: types.Diagnostic) -> types.CodeAction:
    return types.CodeAction(
        title=f"ckptlint: {fix.description}" + ("" if fix.applicability == SAFE else " [unsafe]"),
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic_],
        is_preferred=fix.applicability == SAFE,
        edit=types.WorkspaceEdit(changes={document.uri: ls.text_edits(document, list(fix.edits))}),
    )


_RULE_CODE = re.compile(r"\bCKP\d{3}\b")


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: CkptlintServer, params: types.HoverParams) -> types.Hover | None:
    """The rule's page when hovering a code in a comment (`# noqa: CKP201`), as ruff does."""
    from ckptlint.rules import RULES_BY_CODE

    document = open_document(ls.workspace, document_key(params.text_document.uri))
    if document is None or params.position.line >= len(document.lines):  # only open documents
        return None
    text = document.lines[params.position.line].rstrip("\r\n")
    column = to_code_points(text, params.position.character, ls.encoding) - 1
    comment = text.find("#")
    for match in _RULE_CODE.finditer(text):
        if comment != -1 and comment < match.start() <= column < match.end() and match.group() in RULES_BY_CODE:
            line = params.position.line
            span = types.Range(
                start=types.Position(line=line, character=convert_column(text, match.start() + 1, ls.encoding)),
                end=types.Position(line=line, character=convert_column(text, match.end() + 1, ls.encoding)),
            )
            page = RULES_BY_CODE[match.group()].document()
            return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=page), range=span)
    return None


def serve(tcp: tuple[str, int] | None = None) -> None:
    if tcp is None:
        server.start_io()
    else:
        server.start_tcp(*tcp)

