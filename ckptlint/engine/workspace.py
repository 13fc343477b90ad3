"""The files of one run: their size, content digest and bytes, each read at most once.

A file whose stat data (size, modification and change times, inode) match what the cache
recorded keeps its recorded digest and is not read at all, as git does. The change time
catches edits that restore the modification time (`touch -r`, `cp -p`, `tar x`); like git's
"racily clean" check, a file changed within `RACY_NS` of the run is not recorded, so an
edit in the same clock tick as the run that read it is still seen. Editor buffers and stdin
(overlays) are digested from their text.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ckptlint.engine.cache import StatRecord
from ckptlint.project import content_digest

RACY_NS = 2_000_000_000  # a file changed this recently may change again unseen in the same tick


@dataclass
class FileState:
    stat: tuple[int, ...]  # size, mtime_ns, ctime_ns, inode; () for an overlay
    digest: str | None = None  # None until known
    content: bytes | str | None = None

    @property
    def size(self) -> int:
        return self.stat[0] if self.stat else len(self.content or "")


class Workspace:
    def __init__(self, overlays: dict[str, bytes | str], recorded: Mapping[str, StatRecord]) -> None:
        self.overlays = overlays
        self.recorded = recorded  # path -> (size, mtime_ns, ctime_ns, inode, digest) from the cache
        self._states: dict[str, FileState | None] = {}
        self._started_ns = time.time_ns()

    def state(self, path: str) -> FileState | None:
        """The file's state; None when it cannot be read (raises nothing)."""
        if path in self._states:
            return self._states[path]
        state: FileState | None
        overlay = self.overlays.get(path)
        if overlay is not None:
            state = FileState((), content_digest(overlay), overlay)
        else:
            try:
                stat = os.stat(path)
                state = FileState((stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino))
            except OSError:
                state = None
            if state is not None:
                recorded = self.recorded.get(path)
                if recorded is not None and recorded[:4] == state.stat:
                    state.digest = recorded[4]
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

    def learn(self, path: str, digest: str) -> None:
        """A digest a worker computed for a file this process never read (an installed
        library's module a result depends on): kept with the file's stat data, so the next
        run does not read it to check the result. A file changed after the worker read it
        has changed since the run started: too recent to be recorded (`stats`)."""
        if path in self._states or path in self.overlays:
            return
        state = self.state(path)
        if state is not None and state.digest is None:
            state.digest = digest

    def size(self, path: str) -> int:
        state = self.state(path)
        return state.size if state is not None else 0

    def stats(self) -> dict[str, StatRecord]:
        """What to record for the next run: stat data and digest of every file read, except
        those changed too recently to trust their stat data."""
        recorded = dict(self.recorded)
        recent = self._started_ns - RACY_NS
        for path, state in self._states.items():
            if state is None or (state.stat and max(state.stat[1], state.stat[2]) >= recent):
                recorded.pop(path, None)
            elif state.digest is not None and path not in self.overlays:
                size, mtime_ns, ctime_ns, inode = state.stat
                recorded[path] = (size, mtime_ns, ctime_ns, inode, state.digest)
        return recorded
