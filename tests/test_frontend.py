"""Every front-end keeps the cache where the others do (frontend.py).

The CLI (`python -m ckptlint`), flake8 (`python -m flake8 --select CKP`) and the language
server (a real LSP client) each lint one small project, in a fresh process, from a clean
slate; each must leave exactly one cache, the same one: `--cache-dir`/CKPTLINT_CACHE_DIR,
else `.ckptlint_cache` in the project root, else in the configuration's root (the working
directory when there is no configuration file). The editor's workspace is deliberately a
sub-folder, so a server that kept its cache in the workspace would be caught.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from conftest import REPO
from ckptlint.config import Config
from ckptlint.engine.cache import CACHE_DIR_NAME
from ckptlint.engine.discovery import find_project_root
from ckptlint.frontend import CACHE_DIR_ENV, cache_directory, cache_directory_for, cache_override, linter_for

MODEL = "from torch.utils.checkpoint import checkpoint\n\n\ndef forward(block, x):\n    return checkpoint(block, x)\n"


@dataclass(frozen=True)
class Setup:
    """A project on disk, where the front-ends run, and where the cache must end up."""

    model: Path  # the file with a finding
    cwd: Path  # the working directory of every front-end
    cache: Path  # where the cache must be, and the only one
    env: dict[str, str]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This checkout's code first on the path (the subprocesses run elsewhere), and no
    cache directory from the caller's environment."""
    env = {key: value for key, value in os.environ.items() if key != CACHE_DIR_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**env, **(extra or {})}


def _project(tmp_path: Path, marker: str | None) -> Path:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "model.py").write_text(MODEL)
    if marker == "pyproject":
        (project / "pyproject.toml").write_text("[tool.ckptlint]\nextend-exclude = ['generated']\n")
    elif marker == "git":
        (project / ".git").mkdir()
    elif marker == "setup.py":
        (project / "setup.py").write_text("")
    return project


def with_config(tmp_path: Path) -> Setup:
    project = _project(tmp_path, "pyproject")
    return Setup(project / "pkg" / "model.py", project, project / CACHE_DIR_NAME, _env())


def with_git_marker(tmp_path: Path) -> Setup:
    project = _project(tmp_path, "git")
    return Setup(project / "pkg" / "model.py", project, project / CACHE_DIR_NAME, _env())


def with_setup_py_run_from_a_subfolder(tmp_path: Path) -> Setup:
    project = _project(tmp_path, "setup.py")
    return Setup(project / "pkg" / "model.py", project / "pkg", project / CACHE_DIR_NAME, _env())


def without_any_marker(tmp_path: Path) -> Setup:
    """No configuration and no project: the cache is in the working directory (the default
    configuration's root), here a folder next to the project, not the editor's workspace."""
    project = _project(tmp_path, None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return Setup(project / "pkg" / "model.py", elsewhere, elsewhere / CACHE_DIR_NAME, _env())


def with_environment_variable(tmp_path: Path) -> Setup:
    project = _project(tmp_path, "pyproject")
    chosen = tmp_path / "shared-cache"
    return Setup(project / "pkg" / "model.py", project, chosen, _env({CACHE_DIR_ENV: str(chosen)}))


SETUPS: list[Callable[[Path], Setup]] = [
    with_config,
    with_git_marker,
    with_setup_py_run_from_a_subfolder,
    without_any_marker,
    with_environment_variable,
]


def run_cli(setup: Setup) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-m", "ckptlint", str(setup.model)], cwd=setup.cwd, env=setup.env, capture_output=True, timeout=300
    )
    assert completed.returncode == 1, completed.stderr.decode()
    return {line.split()[1] for line in completed.stdout.decode().splitlines() if ": CKP" in line}


def run_flake8(setup: Setup) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "CKP", str(setup.model)],
        cwd=setup.cwd,
        env=setup.env,
        capture_output=True,
        timeout=300,
    )
    assert completed.returncode == 1, completed.stderr.decode()
    return {line.split()[1] for line in completed.stdout.decode().splitlines()}


def run_language_server(setup: Setup) -> set[str]:
    """Open the file in a real client whose workspace is the file's folder; the server runs
    in `setup.cwd`, as an editor would start it."""
    server = [sys.executable, "-c", "import os, sys; os.chdir(sys.argv[1]); from ckptlint.cli import main; main(['lsp'])"]

    async def session() -> set[str]:
        client = await ClientServerConfig(server_command=[*server, str(setup.cwd)], server_env=setup.env).start()
        assert isinstance(client, LanguageClient)
        try:
            workspace = setup.model.parent.as_uri()
            await client.initialize_session(
                types.InitializeParams(
                    capabilities=client_capabilities("visual-studio-code"),
                    root_uri=workspace,
                    workspace_folders=[types.WorkspaceFolder(uri=workspace, name="workspace")],
                )
            )
            uri = setup.model.as_uri()
            client.text_document_did_open(
                types.DidOpenTextDocumentParams(
                    text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=MODEL)
                )
            )
            # the project-wide diagnostics (they write the cache): published before the scan's progress ends
            while not any(isinstance(value, types.WorkDoneProgressEnd) for values in client.progress_reports.values() for value in values):
                await asyncio.wait_for(client.wait_for_notification(types.PROGRESS), 120)
            codes = {str(diagnostic.code) for diagnostic in client.diagnostics[uri]}
            await client.shutdown_session()
            return codes
        finally:
            await client.stop()  # type: ignore[no-untyped-call]

    return asyncio.run(session())


FRONT_ENDS: list[Callable[[Setup], set[str]]] = [run_cli, run_flake8, run_language_server]


def _caches(tmp_path: Path) -> set[Path]:
    return {path for path in tmp_path.rglob("*") if path.is_dir() and (path / "CACHEDIR.TAG").is_file()}


@pytest.mark.parametrize("make_setup", SETUPS, ids=lambda f: f.__name__)
def test_every_front_end_keeps_its_cache_in_the_same_place(tmp_path: Path, make_setup: Callable[[Path], Setup]) -> None:
    setup = make_setup(tmp_path)
    if find_project_root(tmp_path) is not None and make_setup is without_any_marker:
        pytest.skip(f"{tmp_path} lies inside a project; a project without a marker cannot be made here")
    for front_end in FRONT_ENDS:
        assert front_end(setup) == {"CKP101"}, front_end.__name__
        caches = _caches(tmp_path)
        assert caches == {setup.cache}, f"{front_end.__name__} used {sorted(map(str, caches))}, not {setup.cache}"
        assert not any(path != setup.cache for path in tmp_path.rglob(CACHE_DIR_NAME)), front_end.__name__
        assert any(setup.cache.glob("*/*.json")), f"{front_end.__name__} wrote no index"
        shutil.rmtree(setup.cache)  # the next front-end starts from nothing


def test_confirm_lint_uses_the_same_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ckptlint confirm --lint` lints in-process, with the cache the CLI uses."""
    pytest.importorskip("torch")
    from ckptlint.runtime.confirm import static_findings

    for make_setup in (with_config, with_environment_variable):
        setup = make_setup(tmp_path / make_setup.__name__)
        monkeypatch.chdir(setup.cwd)
        monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
        if CACHE_DIR_ENV in setup.env:
            monkeypatch.setenv(CACHE_DIR_ENV, setup.env[CACHE_DIR_ENV])
        found = static_findings(None, [str(setup.model)])
        assert found is not None and {finding["code"] for finding in found[0]} == {"CKP101"}
        assert _caches(tmp_path / make_setup.__name__) == {setup.cache}


# -- the rule itself ------------------------------------------------------------


def test_cache_directory_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config(root=tmp_path / "config-root")
    root = tmp_path / "project"
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert cache_directory(config, None) == tmp_path / "config-root" / CACHE_DIR_NAME  # no project: the config's root
    assert cache_directory(config, root) == root / CACHE_DIR_NAME  # the project root
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "env"))
    assert cache_directory(config, root) == tmp_path / "env"  # the environment over the project
    assert cache_directory(config, root, str(tmp_path / "flag")) == tmp_path / "flag"  # --cache-dir over everything
    monkeypatch.setenv(CACHE_DIR_ENV, "")
    assert cache_override() is None  # an empty variable is unset, as click reads it
    assert cache_directory(config, root) == root / CACHE_DIR_NAME


def test_cache_directory_for_a_path_needs_no_configuration_when_one_is_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\nselect = 3\n")  # broken
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert cache_directory_for([tmp_path], str(tmp_path / "chosen")) == tmp_path / "chosen"
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "sub").mkdir()
    assert cache_directory_for([tmp_path / "sub"]) == tmp_path / CACHE_DIR_NAME


def test_linter_for_puts_the_cache_where_the_rule_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    config = Config(root=tmp_path)
    assert linter_for(config, tmp_path / "p", jobs=1).cache_dir == tmp_path / "p" / CACHE_DIR_NAME
    assert linter_for(config, None, jobs=1, cache_dir=str(tmp_path / "c")).cache_dir == tmp_path / "c"
    assert linter_for(config, tmp_path, jobs=1, no_cache=True).cache_dir is None
    assert linter_for(config, None, jobs=3).jobs == 3


def test_lint_paths_reads_a_path_with_an_overlay_from_it(tmp_path: Path) -> None:
    """What the CLI hands `Linter.lint_paths` for `-`: a path that need not exist on disk."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "model.py").write_text(MODEL)
    stdin = tmp_path / "typed.py"  # not on disk
    linter = linter_for(Config(root=tmp_path), tmp_path, overlays={stdin: MODEL}, base=tmp_path, jobs=1, no_cache=True)
    result = linter.lint_paths([stdin, tmp_path], project_root=tmp_path)
    assert result.problems == []
    assert sorted((finding.path, finding.code) for finding in result.findings) == [("model.py", "CKP101"), ("typed.py", "CKP101")]
