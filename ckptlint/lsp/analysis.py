"""One lint of one open document, as the language server runs it in a worker.

Everything here is picklable data and top-level functions, because the project-wide lint
runs in a child process (scheduler.py says why) and the file-local one in a thread: neither
may touch the editor's workspace, so the server hands over a snapshot of the open buffers.

Two kinds of lint:
- file-local (`project=False`): the document alone, following only the checkpoint calls in
  it, as `ckptlint --no-project` does; quick enough to publish as soon as a file opens;
- project-wide (`project=True`): checkpoint calls anywhere in the project can reach the
  document's functions; on a large repository this takes seconds to minutes cold.

Only the project-wide lint uses the result cache: an index holds only the files of the
run that wrote it, so a one-file lint writing the project's index would leave the next
project lint cold, and the file-local lint of an edited buffer has little to reuse.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from ckptlint.config import Config, ConfigError
from ckptlint.engine.discovery import ExcludeMatcher, discover
from ckptlint.engine.linter import Linter
from ckptlint.finding import Finding
from ckptlint.frontend import choose_project_root, linter_for, project_root_for, resolve_config
from ckptlint.project import display_path
from ckptlint.source import SourceFile

TEST_GATE_ENV = "CKPTLINT_LSP_TEST_GATE"  # tests only: a project lint waits until this file exists


@dataclass(frozen=True)
class Scope:
    """Where a project-wide lint looks for checkpoint calls: the root, and its files."""

    root: Path
    files: tuple[Path, ...]
    reason: str = ""  # why this root (frontend.choose_project_root), for the log


@dataclass(frozen=True)
class LintRequest:
    path: Path
    overlays: dict[Path, str]  # the unsaved text of every open document
    base: Path  # the workspace root: findings are reported with paths relative to it
    scope: Scope | None = None  # None: file-local
    want_fixes: bool = True  # the file-local lint leaves them to code actions (libcst costs a third of a second to load)


@dataclass
class LintOutcome:
    findings: list[Finding]  # the document's own
    sources: dict[str, SourceFile]  # lines for column conversion, by display path
    messages: list[str] = field(default_factory=list)  # configuration problems to show the user
    with_fixes: bool = True  # whether the findings carry their fixes


def _config(path: Path, messages: list[str], base: Path) -> Config:
    """The configuration a lint of `path` uses; a bad one is reported and the defaults used."""
    try:
        return resolve_config(None, [path])
    except ConfigError as exc:
        messages.append(str(exc))
        return Config(root=base)


def project_scope(path: Path, base: Path) -> Scope:
    """The project a lint of `path` scans: `project_root_for` (as the command line decides),
    else the workspace root, and the files discovered under it."""
    config = _config(path, [], base)
    chosen = choose_project_root(config, [path])
    root, reason = (chosen.path, chosen.reason) if chosen.path is not None else (base, "the workspace folder: no project marker above the file")
    files = discover([root], ExcludeMatcher(config.all_excludes, config.root)).files
    return Scope(root, tuple(files), reason)


def lint_document(request: LintRequest) -> LintOutcome:
    """The findings for `request.path`, file-local or project-wide (`request.scope`)."""
    if request.scope is not None:
        _wait_for_test_gate()
    messages: list[str] = []
    config = _config(request.path, messages, request.base)
    overlays: dict[Path, bytes | str] = dict(request.overlays)

    def make_linter(config: Config) -> Linter:
        # the cache is where the command line keeps it (frontend.py), whichever folder the
        # editor opened (the workspace only names paths); a file-local lint keeps none
        root = project_root_for(config, [request.path])
        no_cache = request.scope is None
        fixes = request.want_fixes
        return linter_for(config, root, overlays=overlays, base=request.base, jobs=1, want_fixes=fixes, no_cache=no_cache)

    try:
        linter = make_linter(config)
    except ConfigError as exc:  # an interpreter that cannot be asked: say so, lint without libraries
        messages.append(str(exc))
        linter = make_linter(replace(config, libraries=False))
    if request.scope is None:
        result = linter.lint_files([request.path])
    else:
        result = linter.lint_files([request.path], project_root=request.scope.root, project_files=list(request.scope.files))
    own = display_path(request.path, request.base)
    findings = [finding for finding in result.findings if finding.path == own]
    wanted = {finding.path for finding in findings} | {site.path for finding in findings for site in finding.sites}
    sources = {path: source for path, source in result.sources.items() if path in wanted}
    return LintOutcome(findings, sources, messages, request.want_fixes)


def warm_up() -> None:
    """Import and run the analysis once on a small module with a region hazard, so that the
    first document opened does not pay for loading it."""
    sample = (
        "import random\nfrom torch import nn\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
        "class Block(nn.Module):\n    def forward(self, x):\n        return x * random.random()\n\n\n"
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.block = Block()\n\n"
        "    def forward(self, x):\n        return checkpoint(self.block, x)\n"
    )
    path = Path.cwd() / "ckptlint_warm_up.py"  # never written: an overlay
    linter_for(Config(root=Path.cwd()), None, overlays={path: sample}, jobs=1, no_cache=True).lint_files([path])


def load_fixes() -> None:
    """Load what building fixes needs (libcst), once the first diagnostics are out."""
    import ckptlint.fix_builder  # noqa: F401


def _wait_for_test_gate() -> None:
    """Tests hold a project lint in flight, deterministically, until they create the gate."""
    gate = os.environ.get(TEST_GATE_ENV)
    while gate and not os.path.exists(gate):
        time.sleep(0.02)
