"""The language server, end to end over stdio with a real LSP client (pytest-lsp)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_lsp
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
    assert "pip install 'ckptlint[lsp]'" in completed.stderr
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
