"""What one `Run` (run.py) reads of the `Linter` (linter.py) that starts it."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ckptlint.catalogue import Catalogue
from ckptlint.config import Config
from ckptlint.engine.worker import Settings
from ckptlint.libraries import Libraries


class RunInputs(Protocol):
    """The Linter as a Run sees it: a protocol so that run.py need not import linter.py, which imports run.py."""

    @property
    def config(self) -> Config: ...

    @property
    def base(self) -> Path: ...

    @property
    def overlays(self) -> dict[str, bytes | str]: ...

    @property
    def cache_dir(self) -> Path | None: ...

    @property
    def jobs(self) -> int: ...

    @property
    def libraries(self) -> Libraries: ...

    @property
    def catalogue(self) -> Catalogue: ...

    def settings(self) -> Settings: ...

    def selected(self, code: str, path: str | None = None) -> bool: ...
