"""The language server, end to end over stdio with a real LSP client (pytest-lsp)."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from conftest import REPO
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

MODEL = """import random
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * random.random()


def forward(x):
    émoji = "🙂"; y = checkpoint(block, x)
    return y
"""


def _uri(path: Path) -> str:
    return path.as_uri()


async def _start(client: LanguageClient, root: Path, encodings: list[str] | None = None) -> types.InitializeResult:
    capabilities = client_capabilities("visual-studio-code")
    if encodings is not None:
        capabilities.general = types.GeneralClientCapabilities(position_encodings=encodings)
    return await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            root_uri=_uri(root),
            workspace_folders=[types.WorkspaceFolder(uri=_uri(root), name="project")],
        )
    )


def _open(client: LanguageClient, path: Path, text: str, version: int = 1) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=_uri(path), language_id="python", version=version, text=text)
        )
    )


async def _diagnostics(client: LanguageClient, path: Path) -> list[types.Diagnostic]:
    """The next diagnostics published (for a document just opened: the file-local ones)."""
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return client.diagnostics[_uri(path)]


def _ends(client: LanguageClient) -> int:
    """How many project scans have ended (their work-done progress)."""
    return sum(isinstance(value, types.WorkDoneProgressEnd) for values in client.progress_reports.values() for value in values)


async def _refined(client: LanguageClient, path: Path, ends: int = 0) -> list[types.Diagnostic]:
    """The project-wide diagnostics: the server publishes them just before its scan's
    progress ends; `ends` is how many scans had ended before the one awaited."""
    while _ends(client) <= ends:
        await client.wait_for_notification(types.PROGRESS)
    return client.diagnostics[_uri(path)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    return tmp_path


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "ckptlint", "lsp"]))
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def test_diagnostics_edits_code_actions(client: LanguageClient, project: Path) -> None:
    result = await _start(client, project)
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf16
    model = project / "model.py"
    model.write_text(MODEL)
    _open(client, model, MODEL)
    diagnostics = {d.code: d for d in await _refined(client, model)}
    assert set(diagnostics) == {"CKP101", "CKP201"}
    ckp101 = diagnostics["CKP101"]
    # 'émoji = "🙂"; y = ' before the call: é is one UTF-16 unit, 🙂 two
    assert (ckp101.range.start.line, ckp101.range.start.character) == (9, 22)
    assert ckp101.source == "ckptlint" and ckp101.severity == types.DiagnosticSeverity.Warning
    assert ckp101.code_description.href.endswith("/docs/rules/CKP101.md")
    ckp201 = diagnostics["CKP201"]
    [related] = ckp201.related_information
    assert related.location.uri == _uri(model) and related.location.range.start.line == 9
    assert related.message == "checkpointed at model.py:10"

    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=_uri(model)),
            range=ckp101.range,
            context=types.CodeActionContext(diagnostics=[ckp101]),
        )
    )
    titles = [action.title for action in actions]
    assert titles == [
        "ckptlint: Pass use_reentrant=True (keeps today's reentrant behaviour)",
        "ckptlint: Pass use_reentrant=False (recommended; changes how the region is replayed) [unsafe]",
        "ckptlint: ignore CKP101 on this line (# noqa)",
        "ckptlint: fix all safe fixes",
    ]
    safe = actions[0]
    assert safe.is_preferred and safe.kind == types.CodeActionKind.QuickFix
    [edit] = safe.edit.changes[_uri(model)]
    assert edit.new_text == "checkpoint(block, x, use_reentrant=True)"
    assert (edit.range.start.character, edit.range.end.character) == (22, 42)
    noqa = actions[2].edit.changes[_uri(model)][0]
    assert noqa.new_text == "  # noqa: CKP101" and noqa.range.start.character == 42

    # apply the safe fix as an editor would: the diagnostic goes away
    fixed = MODEL.replace("checkpoint(block, x)", "checkpoint(block, x, use_reentrant=True)")
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=_uri(model), version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
        )
    )
    assert [d.code for d in await _refined(client, model, ends=1)] == ["CKP201"]


async def test_utf8_position_encoding(client: LanguageClient, project: Path) -> None:
    result = await _start(client, project, encodings=["utf-8"])
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
    model = project / "model.py"
    _open(client, model, MODEL)
    ckp101 = next(d for d in await _refined(client, model) if d.code == "CKP101")
    assert ckp101.range.start.character == len('    émoji = "🙂"; y = '.encode("utf-8"))


async def test_unsaved_buffer_of_another_file_is_analysed(client: LanguageClient, project: Path) -> None:
    await _start(client, project)
    (project / "blocks.py").write_text("def block(x):\n    return x\n")
    model = project / "model.py"
    text = "from torch.utils.checkpoint import checkpoint\nfrom blocks import block\n\n\ndef f(x):\n    return checkpoint(block, x, use_reentrant=False)\n"
    model.write_text(text)
    blocks_edit = "import random\n\n\ndef block(x):\n    return x * random.random()\n"
    _open(client, project / "blocks.py", blocks_edit)  # unsaved: the disk still has the clean version
    assert not await _diagnostics(client, project / "blocks.py")  # file-local: nothing checkpoints block here
    diagnostics = await _refined(client, project / "blocks.py")  # project-wide: model.py does
    assert [(d.code, d.range.start.line) for d in diagnostics] == [("CKP201", 4)]


async def test_syntax_errors_and_malformed_requests_do_not_kill_the_server(client: LanguageClient, project: Path) -> None:
    await _start(client, project)
    broken = project / "broken.py"
    _open(client, broken, "def f(:\n")
    [diagnostic] = await _refined(client, broken)
    assert diagnostic.code == "CKP000" and diagnostic.severity == types.DiagnosticSeverity.Error
    body = json.dumps({"jsonrpc": "2.0", "id": 9999, "method": "textDocument/codeAction", "params": {"textDocument": 42}})
    client.protocol.writer.write(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())  # malformed params
    never_opened = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=_uri(project / "never_opened.py")),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
        context=types.CodeActionContext(diagnostics=[]),
    )
    assert not await client.text_document_code_action_async(never_opened)
    model = project / "model.py"
    _open(client, model, MODEL)
    assert {d.code for d in await _refined(client, model, ends=1)} == {"CKP101", "CKP201"}


async def test_configuration_changes_apply_without_restart(client: LanguageClient, project: Path) -> None:
    await _start(client, project)
    model = project / "model.py"
    model.write_text(MODEL)
    _open(client, model, MODEL)
    assert {d.code for d in await _refined(client, model)} == {"CKP101", "CKP201"}
    (project / "pyproject.toml").write_text('[tool.ckptlint]\nignore = ["CKP101"]\n')
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=_uri(project / "pyproject.toml"), type=types.FileChangeType.Changed)]
        )
    )
    assert {d.code for d in await _diagnostics(client, model)} == {"CKP201"}  # file-local
    assert {d.code for d in await _refined(client, model, ends=1)} == {"CKP201"}


async def test_fix_all_source_action(client: LanguageClient, project: Path) -> None:
    await _start(client, project)
    model = project / "model.py"
    text = "from torch.utils.checkpoint import checkpoint\n\n\ndef f(a, b, x):\n    y = checkpoint(a, x)\n    return checkpoint(b, y)\n"
    _open(client, model, text)
    await _refined(client, model)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=_uri(model)),
            range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
            context=types.CodeActionContext(diagnostics=[], only=[types.CodeActionKind.SourceFixAll]),
        )
    )
    [fix_all] = actions
    assert fix_all.kind == "source.fixAll.ckptlint"
    assert [e.new_text for e in fix_all.edit.changes[_uri(model)]] == [
        "checkpoint(a, x, use_reentrant=True)",
        "checkpoint(b, y, use_reentrant=True)",
    ]


def test_missing_pygls_is_a_clear_message(tmp_path: Path) -> None:

    blocker = tmp_path / "pygls"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('No module named pygls')\n")
    completed = subprocess.run(
        [sys.executable, "-m", "ckptlint", "lsp"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        stdin=subprocess.DEVNULL,
    )
    assert completed.returncode == 2
    # ckptlint is not on PyPI: the hint is README's install line (`pip install 'ckptlint[lsp]'` cannot work)
    line = "python3 -m pip install '.[lsp]'"
    assert line in (REPO / "README.md").read_text(encoding="utf-8")
    assert f"from a clone of ckptlint: {line} (README.md, Installing)" in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr


async def test_hover_on_a_noqa_code_shows_the_rule(client: LanguageClient, project: Path) -> None:
    await _start(client, project)
    model = project / "model.py"
    text = "x = '🙂'  # noqa: CKP201, E501\n"
    _open(client, model, text)
    await _refined(client, model)
    at = text.index("CKP201") + 1 + 3  # UTF-16: the emoji counts twice; inside the code
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=_uri(model)), position=types.Position(line=0, character=at))
    )
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert hover.contents.value.startswith("# CKP201: unsaved-random-draw")
    assert (hover.range.start.character, hover.range.end.character) == (text.index("CKP201") + 1, text.index("CKP201") + 7)
    on_e501 = types.Position(line=0, character=text.index("E501") + 2)
    assert await client.text_document_hover_async(types.HoverParams(text_document=types.TextDocumentIdentifier(uri=_uri(model)), position=on_e501)) is None


async def test_saving_another_file_updates_open_documents(client: LanguageClient, project: Path) -> None:
    await _start(client, project)
    blocks = project / "blocks.py"
    blocks_text = "import random\n\n\ndef block(x):\n    return x * random.random()\n"
    blocks.write_text(blocks_text)
    model = project / "model.py"
    model.write_text("from blocks import block\n\n\ndef f(x):\n    return block(x)\n")
    _open(client, blocks, blocks_text)
    assert not await _refined(client, blocks)  # nothing checkpoints block yet
    model.write_text(
        "from torch.utils.checkpoint import checkpoint\nfrom blocks import block\n\n\ndef f(x):\n    return checkpoint(block, x, use_reentrant=False)\n"
    )
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=_uri(model))))
    [finding] = await _refined(client, blocks, ends=1)  # a save: project-wide only
    assert (finding.code, finding.range.start.line) == ("CKP201", 4)
    assert finding.related_information[0].location.uri == _uri(model)


# -- two passes, progress, and a server that keeps answering ------------------------------

BLOCKS_HAZARD = "import random\n\n\ndef block(x):\n    return x * random.random()\n"
BLOCKS_CLEAN = "def block(x):\n    return x\n"
CHECKPOINTS_BLOCK = (
    "from torch.utils.checkpoint import checkpoint\nfrom blocks import block\n\n\n"
    "def f(x):\n    return checkpoint(block, x, use_reentrant=False)\n"
)


async def _gated_client(gate: Path) -> LanguageClient:
    """A server whose project-wide lints wait until `gate` exists: a scan held in flight for
    as long as the test needs, without sleeping and hoping."""
    from ckptlint.lsp.analysis import TEST_GATE_ENV

    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "ckptlint", "lsp"], server_env={**os.environ, TEST_GATE_ENV: str(gate)}
    )
    client = await config.start()
    assert isinstance(client, LanguageClient)
    return client


async def test_file_local_first_then_refined_while_the_server_keeps_answering(project: Path) -> None:
    gate = project.with_name(project.name + "-gate")
    client = await _gated_client(gate)
    try:
        await _start(client, project)
        (project / "model.py").write_text(CHECKPOINTS_BLOCK)
        blocks = project / "blocks.py"
        blocks.write_text(BLOCKS_HAZARD)
        hover_text = BLOCKS_HAZARD + "# noqa: CKP201\n"
        _open(client, blocks, hover_text)
        # file-local: blocks.py checkpoints nothing itself, so nothing yet
        assert not await _diagnostics(client, blocks)
        # the project scan is held in flight: its progress has begun, and the server answers
        while sum(map(len, client.progress_reports.values())) < 2:
            await client.wait_for_notification(types.PROGRESS)
        [(token, [begin, report])] = client.progress_reports.items()
        assert isinstance(begin, types.WorkDoneProgressBegin) and begin.title == "ckptlint: scanning the project"
        assert begin.message == str(project)
        assert isinstance(report, types.WorkDoneProgressReport) and report.message == "2 files, for blocks.py"
        [log] = [m.message for m in client.log_messages if "project root" in m.message]
        assert log == (
            f"ckptlint: project root {project} (2 files; the nearest directory with pyproject.toml at or above the named paths)"
            " for blocks.py"
        )
        hover = await asyncio.wait_for(
            client.text_document_hover_async(
                types.HoverParams(text_document=types.TextDocumentIdentifier(uri=_uri(blocks)), position=types.Position(line=5, character=10))
            ),
            timeout=10,
        )
        assert hover is not None and hover.contents.value.startswith("# CKP201")
        assert not gate.exists() and _ends(client) == 0  # answered while the scan was still held
        gate.touch()
        [finding] = await _refined(client, blocks)  # project-wide: model.py checkpoints block
        assert (finding.code, finding.range.start.line) == ("CKP201", 4)
        end = client.progress_reports[token][-1]
        assert isinstance(end, types.WorkDoneProgressEnd) and end.message == "1 findings in blocks.py"
    finally:
        gate.touch()
        await client.shutdown_session()


async def test_a_newer_edit_supersedes_a_project_lint_in_flight(project: Path) -> None:
    gate = project.with_name(project.name + "-gate")
    client = await _gated_client(gate)
    try:
        await _start(client, project)
        (project / "model.py").write_text(CHECKPOINTS_BLOCK)
        blocks = project / "blocks.py"
        blocks.write_text(BLOCKS_CLEAN)
        _open(client, blocks, BLOCKS_HAZARD)  # version 1: the project-wide lint would find CKP201
        assert not await _diagnostics(client, blocks)
        while not any(client.progress_reports.values()):  # version 1's scan has begun, and is held
            await client.wait_for_notification(types.PROGRESS)
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=_uri(blocks), version=2),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=BLOCKS_CLEAN)],
            )
        )
        assert not await _diagnostics(client, blocks)  # version 2, file-local
        gate.touch()
        # version 1's scan ends without publishing: its CKP201 would be stale
        assert not await _refined(client, blocks, ends=0)
        assert not await _refined(client, blocks, ends=1)  # version 2's scan
        assert len(client.progress_reports) == 2
    finally:
        gate.touch()
        await client.shutdown_session()


async def test_code_actions_before_the_scan_ends_have_the_fixes(project: Path) -> None:
    """The file-local pass publishes without fixes (libcst is slow to load); a code action
    asked before the project-wide result computes them."""
    gate = project.with_name(project.name + "-gate")  # never created: the scan stays in flight
    client = await _gated_client(gate)
    try:
        await _start(client, project)
        model = project / "model.py"
        _open(client, model, MODEL)
        ckp101 = next(d for d in await _diagnostics(client, model) if d.code == "CKP101")
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=_uri(model)),
                range=ckp101.range,
                context=types.CodeActionContext(diagnostics=[ckp101]),
            )
        )
        assert [action.title for action in actions][:2] == [
            "ckptlint: Pass use_reentrant=True (keeps today's reentrant behaviour)",
            "ckptlint: Pass use_reentrant=False (recommended; changes how the region is replayed) [unsafe]",
        ]
        assert _ends(client) == 0
    finally:
        await client.shutdown_session()


async def test_shutdown_ends_a_scan_in_flight(project: Path) -> None:
    gate = project.with_name(project.name + "-gate")  # never created: the scan would wait for ever
    client = await _gated_client(gate)
    await _start(client, project)
    model = project / "model.py"
    _open(client, model, MODEL)
    await _diagnostics(client, model)
    while not any(client.progress_reports.values()):
        await client.wait_for_notification(types.PROGRESS)
    await asyncio.wait_for(client.shutdown_session(), timeout=30)
    assert client._server is not None and client._server.returncode == 0


# -- malformed requests, over the server's stdio -------------------------------------------


class _RawClient:
    """JSON-RPC over `ckptlint lsp`'s stdio, framed by hand, for what a typed client cannot send."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ckptlint", "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def send_body(self, body: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_body(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def reply(self) -> dict[str, Any]:
        """The next response (notifications and the server's own requests are skipped)."""
        while True:
            message = self.replies.get(timeout=60)
            if "method" not in message:
                return message

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            length = None
            while (header := stream.readline()) not in (b"\r\n", b""):
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
            if length is None:
                return
            self.replies.put(json.loads(stream.read(length)))


def test_malformed_requests_get_json_rpc_errors(project: Path) -> None:
    client = _RawClient()
    try:
        client.send({"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": _uri(project), "capabilities": {}}})
        assert client.reply()["id"] == 1
        client.send({"method": "initialized", "params": {}})
        document = {"uri": _uri(project / "model.py")}

        def error(request_id: int | None) -> int:
            reply = client.reply()
            assert "id" in reply and reply["id"] == request_id and "result" not in reply
            code: int = reply["error"]["code"]
            return code

        client.send({"id": 2, "method": "textDocument/hover", "params": {"textDocument": document}})  # no position
        assert error(2) == -32602  # InvalidParams
        client.send({"id": 3, "method": "textDocument/codeAction", "params": {"textDocument": 42}})
        assert error(3) == -32602
        client.send({"id": "four", "method": "ckptlint/noSuchMethod", "params": {}})
        reply = client.reply()
        assert (reply["id"], reply["error"]["code"]) == ("four", -32601)  # MethodNotFound
        client.send_body(b'{"jsonrpc": "2.0", "id": 5, "method": ')  # not JSON
        assert error(None) == -32700  # ParseError, with "id": null
        client.send_body(json.dumps({"id": 6, "method": "textDocument/hover", "params": {}}).encode())  # no "jsonrpc"
        assert error(6) == -32600  # InvalidRequest
        # and the server still answers well-formed requests
        position = {"line": 0, "character": 0}
        client.send({"id": 7, "method": "textDocument/hover", "params": {"textDocument": document, "position": position}})
        assert client.reply() == {"jsonrpc": "2.0", "id": 7, "result": None}
        client.send({"id": 8, "method": "shutdown"})
        assert client.reply()["id"] == 8
        client.send({"method": "exit"})
        assert client.process.wait(timeout=60) == 0
    finally:
        client.process.kill()
