"""`flake8 --select CKP`: the same findings as `ckptlint`, at the same line and column.

flake8 prints the column the plugin yields plus one, so the plugin yields
`column - 1`. flake8 checks one file at a time, but a hazard in a file can be reached
from a checkpoint call in another; so the plugin lints the whole project once per
process (memoised) and answers for each file from that. flake8 applies its own
select/ignore/per-file-ignores and `# noqa`; `[tool.ckptlint]` still supplies
`checkpoint-functions` and excludes, and `# ckptlint: noqa` works. The cache is where
`ckptlint` keeps it (frontend.py), CKPTLINT_CACHE_DIR included.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from ckptlint.version import __version__

if TYPE_CHECKING:
    from ckptlint.config import Config
    from ckptlint.finding import Finding

# (project root, configuration) -> (the files linted, findings by display path)
_PROJECT_FINDINGS: dict[tuple[Path, Config], tuple[set[Path], dict[str, list[Finding]]]] = {}


class Flake8Plugin:
    name = "ckptlint"
    version = __version__

    def __init__(self, tree: object, filename: str, lines: Sequence[str]):
        self.filename = filename
        self.lines = lines

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        for finding in findings_for_file(self.filename, "".join(self.lines)):
            yield finding.line, finding.column - 1, f"{finding.code} {finding.message}", type(self)


def findings_for_file(filename: str, text: str) -> list[Finding]:
    from ckptlint.config import Config, ConfigError
    from ckptlint.frontend import libraries_for, linter_for, project_root_for, resolve_config
    from ckptlint.project import display_path

    # with --stdin-display-name flake8 passes the display name: a file that is not there
    from_stdin = filename in ("-", "stdin") or not os.path.isfile(filename)
    path = Path("stdin.py" if filename in ("-", "stdin") else filename)
    absolute = Path(os.path.abspath(path))
    try:
        config = resolve_config(None, [path])
    except ConfigError:
        config = Config(root=Path.cwd())
    config = replace(config, select=("CKP",), extend_select=(), ignore=(), per_file_ignores=())
    try:
        libraries_for(config)  # asked once per interpreter: the linters below reuse the answer
    except ConfigError:  # flake8 has no channel for it: lint without libraries, as with a bad configuration
        config = replace(config, libraries=False)
    root = project_root_for(config, [path])
    own = display_path(absolute)
    # flake8 hands over lines it decoded itself (with a latin-1 fallback Python does not
    # have), so a file on disk is read by ckptlint as Python would read it.
    if root is not None and not from_stdin:
        key = (root, config)
        if key not in _PROJECT_FINDINGS:
            linter = linter_for(config, root)  # once per flake8 process, on every core
            result = linter.lint_paths([root])
            by_path: dict[str, list[Finding]] = {}
            for finding in result.findings:
                by_path.setdefault(finding.path, []).append(finding)
            files = {Path(path) for path in result.linted}
            _PROJECT_FINDINGS[key] = (files, by_path)
        files, by_path = _PROJECT_FINDINGS[key]
        if absolute in files:
            return by_path.get(own, [])
    linter = linter_for(config, root, overlays={absolute: text} if from_stdin else None, jobs=1)
    result = linter.lint_files([path], project_root=root)
    return [finding for finding in result.findings if finding.path == own]
