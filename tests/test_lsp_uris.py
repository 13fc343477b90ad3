"""The language server with file URIs as editors spell them: percent-encoded (`Path.as_uri()`,
VS Code) for a path with a space, `+`, `%`, non-ASCII, `@` or `:`, and VS Code's
`file:///c%3A/...` for a Windows drive letter. Each test opens a document with a hazard and
expects its diagnostic back under the exact URI the client used, and a hover answered."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from ckptlint.lsp.documents import document_key

HAZARD = """import random
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * random.random()


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
# hover: CKP201
"""
HAZARD_LINE = 5  # 0-based: the random draw
HOVER_AT = types.Position(line=10, character=len("# hover: CKP2"))
WAIT = 60  # seconds: a lint that never publishes fails the test instead of hanging it


async def _start(client: LanguageClient, root: Path) -> None:
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="project")],
        )
    )


def _open(client: LanguageClient, uri: str, text: str) -> None:
    document = types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=document))


def _ends(client: LanguageClient) -> int:
    """How many project scans have ended (their work-done progress)."""
    return sum(isinstance(value, types.WorkDoneProgressEnd) for values in client.progress_reports.values() for value in values)


async def _refined(client: LanguageClient, uri: str, scans: int = 1) -> list[types.Diagnostic] | None:
    """What was published under exactly `uri` once `scans` project scans have ended."""

    async def scan_ended() -> None:
        while _ends(client) < scans:
            await client.wait_for_notification(types.PROGRESS)

    await asyncio.wait_for(scan_ended(), WAIT)
    return client.diagnostics.get(uri)


async def _hover(client: LanguageClient, uri: str) -> types.Hover | None:
    params = types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=HOVER_AT)
    return await asyncio.wait_for(client.text_document_hover_async(params), WAIT)


async def _noqa_action(client: LanguageClient, uri: str, diagnostic: types.Diagnostic) -> types.CodeAction:
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=diagnostic.range,
        context=types.CodeActionContext(diagnostics=[diagnostic]),
    )
    actions = await asyncio.wait_for(client.text_document_code_action_async(params), WAIT)
    [noqa] = [action for action in actions if "# noqa" in action.title]
    return noqa


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "ckptlint", "lsp"]))
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


@pytest.mark.parametrize(
    "special",
    [" ", "+", "%20", "é模型", "@", ":"],
    ids=["space", "plus", "percent", "non-ascii", "at", "colon"],
)
async def test_percent_encoded_uri(client: LanguageClient, tmp_path: Path, special: str) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    model = tmp_path / f"my{special}pkg" / f"my{special}model.py"  # in a folder's name and in the file's
    model.parent.mkdir()
    model.write_text(HAZARD)
    uri = model.as_uri()
    assert "%" in uri  # what an editor sends ("%20" is sent as "%2520": decoded once, it must stay "%20")
    await _start(client, tmp_path)
    _open(client, uri, HAZARD)

    diagnostics = await _refined(client, uri)
    assert diagnostics is not None, f"nothing published under {uri}; published under {list(client.diagnostics)}"
    assert [(d.code, d.range.start.line) for d in diagnostics] == [("CKP201", HAZARD_LINE)]
    assert list(client.diagnostics) == [uri]  # under no other spelling
    [related] = diagnostics[0].related_information
    assert related.location.uri == uri  # the checkpoint call, in the same document

    hover = await _hover(client, uri)
    assert hover is not None and hover.contents.value.startswith("# CKP201")
    noqa = await _noqa_action(client, uri, diagnostics[0])
    assert list(noqa.edit.changes) == [uri]

    # a save re-lints every open document: still under the client's URI
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    diagnostics = await _refined(client, uri, scans=2)
    assert [(d.code, d.range.start.line) for d in diagnostics or []] == [("CKP201", HAZARD_LINE)]
    assert list(client.diagnostics) == [uri]


WINDOWS_URI = "file:///c%3A/Users/dev/model.py"  # how VS Code spells C:\Users\dev\model.py
OTHER_SPELLING = "file:///C:/Users/dev/model.py"  # as Python's PureWindowsPath.as_uri() spells it


def test_drive_letter_spellings_are_one_document() -> None:
    assert document_key(WINDOWS_URI) == document_key(OTHER_SPELLING)
    assert document_key(WINDOWS_URI) != document_key("file:///c%3A/Users/dev/other.py")


async def test_drive_letter_uri(tmp_path: Path) -> None:
    """On Linux, pygls reads `file:///c%3A/Users/dev/model.py` as the relative path
    `c:/Users/dev/model.py`, so the server runs in the project folder and the document is
    only ever a buffer. What this checks is the URI bookkeeping (the diagnostics come back
    under VS Code's spelling, and a request in the other spelling finds the same document),
    not Windows paths: those need a Windows runner."""
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    command = ["sh", "-c", 'cd "$0" && exec "$1" -m ckptlint lsp', str(tmp_path), sys.executable]
    client = await ClientServerConfig(server_command=command).start()
    assert isinstance(client, LanguageClient)
    try:
        await _start(client, tmp_path)
        _open(client, WINDOWS_URI, HAZARD)
        diagnostics = await _refined(client, WINDOWS_URI)
        assert diagnostics is not None, f"nothing published under {WINDOWS_URI}; published under {list(client.diagnostics)}"
        assert [(d.code, d.range.start.line) for d in diagnostics] == [("CKP201", HAZARD_LINE)]
        assert list(client.diagnostics) == [WINDOWS_URI]
        for spelling in (WINDOWS_URI, OTHER_SPELLING):
            hover = await _hover(client, spelling)
            assert hover is not None and hover.contents.value.startswith("# CKP201"), spelling
        noqa = await _noqa_action(client, OTHER_SPELLING, diagnostics[0])
        assert list(noqa.edit.changes) == [WINDOWS_URI]  # edits name the document as the client does
    finally:
        await client.shutdown_session()
