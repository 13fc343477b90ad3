"""The files of one run: their size, content digest and bytes, each read at most once.

A file whose size and modification time match what the cache recorded keeps its recorded
digest and is not read at all (as git does); editor buffers and stdin (overlays) are
digested from their text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ckptlint.project import content_digest


@dataclass
class FileState:
    size: int
    mtime_ns: int
    digest: str | None = None  # None until known
    content: bytes | str | None = None


class Workspace:
    def __init__(self, overlays: dict[str, bytes | str], recorded: dict[str, list]):
        self.overlays = overlays
        self.recorded = recorded  # path -> [size, mtime_ns, digest] from the cache
        self._states: dict[str, FileState | None] = {}

    def state(self, path: str) -> FileState | None:
        """The file's state; None when it cannot be read (raises nothing)."""
        if path in self._states:
            return self._states[path]
        state: FileState | None
        overlay = self.overlays.get(path)
        if overlay is not None:
            state = FileState(len(overlay), 0, content_digest(overlay), overlay)
        else:
            try:
                stat = os.stat(path)
                state = FileState(stat.st_size, stat.st_mtime_ns)
            except OSError:
                state = None
            if state is not None:
                recorded = self.recorded.get(path)
                if recorded is not None and recorded[0] == state.size and recorded[1] == state.mtime_ns:
                    state.digest = recorded[2]
        self._states[path] = state
        return state

    def digest(self, path: str) -> str | None:
        state = self.state(path)
        if state is None:
            return None
        if state.digest is None:
            self.content(path)
        return state.digest

    def content(self, path: str) -> bytes | str | None:
        state = self.state(path)
        if state is None:
            return None
        if state.content is None:
            try:
                state.content = Path(path).read_bytes()
            except OSError:
                self._states[path] = None
                return None
            state.digest = content_digest(state.content)
        return state.content

    def data(self, path: str) -> bytes | None:
        """The content as bytes, for the byte prefilter."""
        content = self.content(path)
        if isinstance(content, str):
            return content.encode("utf-8", "surrogatepass")
        return content

    def size(self, path: str) -> int:
        state = self.state(path)
        return state.size if state is not None else 0

    def stats(self) -> dict[str, list]:
        """What to record for the next run: size, modification time and digest of every file read."""
        recorded = dict(self.recorded)
        for path, state in self._states.items():
            if state is None:
                recorded.pop(path, None)
            elif state.digest is not None and path not in self.overlays:
                recorded[path] = [state.size, state.mtime_ns, state.digest]
        return recorded

    def drop_content(self) -> None:
        """Free the bytes read for the prefilter once they are no longer needed."""
        for path, state in self._states.items():
            if state is not None and path not in self.overlays:
                state.content = None
