"""ckptlint: find code that makes activation checkpointing replay something different.

The public API, for tools and tests: `Linter` and `lint_source` (ckptlint.engine),
`LintResult` (ckptlint.result), `Config` (ckptlint.config), `Finding` (ckptlint.finding).
They load on first use, so `import ckptlint` (the CLI, the runtime companion) stays cheap.
Everything else is internal and may move.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ckptlint.version import __version__
__all__ = ["Config", "Finding", "LintResult", "Linter", "__version__", "lint_source"]

_PUBLIC = {
    "Config": "ckptlint.config",
    "Finding": "ckptlint.finding",
    "LintResult": "ckptlint.result",
    "Linter": "ckptlint.engine",
    "lint_source": "ckptlint.engine",
}

if TYPE_CHECKING:
    from ckptlint.config import Config
    from ckptlint.engine import Linter, lint_source
    from ckptlint.finding import Finding
    from ckptlint.result import LintResult


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'ckptlint' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
