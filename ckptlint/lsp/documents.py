"""One key per open document, whatever spelling of its URI the client uses.

Editors percent-encode file URIs (a space is `%20`, `+` is `%2B`; VS Code writes a Windows
drive as `file:///c%3A/...`, Python as `file:///C:/...`), and pygls stores each document
under its URI percent-decoded, so a lookup with the URI as sent misses it. Every lookup in
the server goes through `document_key`; what is sent back to the client (diagnostics, edits)
names the document by the URI it was opened with, `TextDocument.uri`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NewType
from urllib.parse import unquote

from pygls.uris import from_fs_path, to_fs_path

if TYPE_CHECKING:
    from pygls.workspace import TextDocument, Workspace

DocumentKey = NewType("DocumentKey", str)


def path_key(path: str | os.PathLike[str]) -> DocumentKey:
    """The key of the file at `path` (as the linter names it)."""
    return DocumentKey(os.path.normcase(os.path.normpath(path)))


def document_key(uri: str) -> DocumentKey:
    """The key of the document `uri` names: a file URI's path (decoded once, the drive letter
    lower-cased, by pygls.uris.to_fs_path), else the URI decoded (an `untitled:` buffer)."""
    path = to_fs_path(uri)
    return path_key(path) if path is not None else DocumentKey(unquote(uri))


def open_documents(workspace: Workspace) -> dict[DocumentKey, TextDocument]:
    """The documents the client has open, by key."""
    return {document_key(document.uri): document for document in workspace.text_documents.values()}


def open_document(workspace: Workspace, key: DocumentKey) -> TextDocument | None:
    return open_documents(workspace).get(key)


def client_uri(workspace: Workspace, path: str | os.PathLike[str]) -> str:
    """The URI to name the file at `path` by: the client's own when it has it open."""
    document = open_document(workspace, path_key(path))
    if document is not None:
        return document.uri
    uri: str = from_fs_path(os.fspath(path))
    return uri
