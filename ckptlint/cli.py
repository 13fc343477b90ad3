"""The `ckptlint` command: `ckptlint [check] PATH...`, `ckptlint rules [CODE]`, `ckptlint calls PATH...`.

Exit codes follow ruff: 0 no findings, 1 findings, 2 usage error, bad configuration
or a path that could not be read.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import click

from ckptlint.version import __version__
from ckptlint.config import ConfigError, interpreter_path, parse_codes
from ckptlint.frontend import ProjectRoot, cache_directory_for, choose_project_root, linter_for, resolve_config, scope_hint
from ckptlint.result import LintResult, PathProblem, Scope

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class DefaultCommandGroup(click.Group):
    """`ckptlint PATH` means `ckptlint check PATH`, as `ruff PATH` once meant `ruff check PATH`."""

    default_command = "check"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The group's help, then the default command's options: `ckptlint PATHS` is how most
        people run it, so `ckptlint --help` should show what it takes."""
        super().format_help(ctx, formatter)
        command = self.commands[self.default_command]
        check_ctx = click.Context(command, info_name=self.default_command, parent=ctx)
        rows = [record for param in command.get_params(check_ctx) if (record := param.get_help_record(check_ctx)) is not None]
        with formatter.section(f"Options of `ckptlint [{self.default_command}] PATHS...` (the default command)"):
            formatter.write_dl(rows)


@click.group(cls=DefaultCommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="ckptlint", message="%(prog)s %(version)s")
def cli() -> None:
    """Find code that makes PyTorch activation checkpointing replay something different."""


def _split(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _codes(values: Sequence[str], option: str) -> tuple[str, ...] | None:
    if not values:
        return None
    return parse_codes(values, option)


def _per_file_ignores(values: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    if not values:
        return None
    pairs = []
    for value in values:
        for item in value.split():
            pattern, sep, codes = item.rpartition(":")
            if not sep or not pattern:
                raise ConfigError(f"--per-file-ignores: {item!r} is not GLOB:CODES (for example 'tests/*:CKP201')")
            pairs.append((pattern, parse_codes([codes], "--per-file-ignores")))
    return tuple(pairs)


def _fail(message: str) -> NoReturn:
    click.echo(f"ckptlint: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _report_problems(problems: Sequence[PathProblem]) -> None:
    for problem in problems:
        level = "error" if problem.fatal else "warning"
        click.echo(f"ckptlint: {level}: {problem.path}: {problem.message}", err=True)


FORMATS_WITH_FIXES = frozenset({"json", "sarif", "lsp"})  # the outputs that carry fix edits

_LINT_PARAMETERS = (
    "paths",
    "select",
    "extend_select",
    "ignore",
    "per_file_ignores",
    "exclude",
    "extend_exclude",
    "force_exclude",
    "config_file",
    "stdin_filename",
    "no_project",
    "project_root",
    "verbose",
    "jobs",
    "no_cache",
    "cache_dir",
    "python",
    "no_libraries",
    "all_configurations",
)


def lint_options(function: Callable[..., None]) -> Callable[..., None]:
    """The options every linting command takes, handed to it as one `LintRequest`."""

    @functools.wraps(function)
    def command(**kwargs: Any) -> None:
        request = LintRequest(**{name: kwargs.pop(name) for name in _LINT_PARAMETERS})
        return function(request, **kwargs)

    options = [
        # readable=False: an unreadable path is one problem of the run (discovery.py), not a usage error that lints nothing
        click.argument("paths", nargs=-1, type=click.Path(readable=False)),
        click.option("--select", multiple=True, metavar="CODES", help="Rule codes or prefixes to enable (comma-separated)."),
        click.option("--extend-select", multiple=True, metavar="CODES", help="Codes to enable in addition to `select`."),
        click.option("--ignore", multiple=True, metavar="CODES", help="Rule codes or prefixes to disable."),
        click.option("--per-file-ignores", multiple=True, metavar="GLOB:CODES", help="Disable codes for matching files."),
        click.option("--exclude", multiple=True, metavar="GLOBS", help="Replace the default excluded paths."),
        click.option("--extend-exclude", multiple=True, metavar="GLOBS", help="Exclude these paths too."),
        click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too."),
        click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Use this pyproject.toml or TOML file."),
        click.option("--stdin-filename", metavar="PATH", help="The name of the file read from `-` (stdin)."),
        click.option(
            "--no-project",
            is_flag=True,
            help="Follow only the checkpoint calls in PATHS, not those elsewhere in the project that reach PATHS.",
        ),
        click.option(
            "--project-root",
            type=click.Path(exists=True, file_okay=False),
            help="Where checkpoint calls that reach PATHS are looked for [default: `project-root` in the configuration, "
            "else the nearest directory with pyproject.toml, setup.py, setup.cfg or .git above PATHS].",
        ),
        click.option(
            "--verbose", "-v", is_flag=True, help="Say on stderr which project root and why, the configuration, the cache and file counts."
        ),
        click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes [default: all cores]."),
        click.option("--no-cache", is_flag=True, help="Neither read nor write the cache."),
        click.option(
            "--cache-dir",
            type=click.Path(file_okay=False),
            envvar="CKPTLINT_CACHE_DIR",
            help="Where the cache lives [default: .ckptlint_cache in the project root; env CKPTLINT_CACHE_DIR].",
        ),
        click.option(
            "--python",
            metavar="PATH",
            help="The interpreter whose installed libraries regions are followed into (read, never imported) [default: the one running ckptlint].",
        ),
        click.option("--no-libraries", is_flag=True, help="Do not follow regions into installed libraries."),
        click.option(
            "--all-configurations",
            is_flag=True,
            help="Also report hazards on paths only a non-default command-line mode takes (argparse defaults choose the default one).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@dataclass
class LintRequest:
    """What to lint and how, as given on the command line."""

    paths: Sequence[str]
    select: Sequence[str]
    extend_select: Sequence[str]
    ignore: Sequence[str]
    per_file_ignores: Sequence[str]
    exclude: Sequence[str]
    extend_exclude: Sequence[str]
    force_exclude: bool
    config_file: str | None
    stdin_filename: str | None
    no_project: bool
    project_root: str | None = None
    verbose: bool = False
    jobs: int | None = None
    no_cache: bool = False
    cache_dir: str | None = None
    python: str | None = None
    no_libraries: bool = False
    all_configurations: bool = False
    want_fixes: bool = False
    want_hints: bool = False  # describe the calls' static cost hints (`ckptlint calls`)
    report_unused_noqa: bool | None = None
    from_stdin: bool = False
    _stdin: bytes | None = None

    def run(self) -> LintResult:
        """Lint, reporting unreadable paths on stderr; exits 2 on a bad configuration."""
        paths = list(self.paths) or ["."]
        stdin_path = Path(self.stdin_filename or "-")
        targets = [stdin_path if p == "-" else Path(p) for p in paths]
        try:
            config = resolve_config(self.config_file, targets).with_overrides(
                select=_codes(self.select, "--select"),
                extend_select=_codes(self.extend_select, "--extend-select"),
                ignore=_codes(self.ignore, "--ignore"),
                per_file_ignores=_per_file_ignores(self.per_file_ignores),
                exclude=tuple(_split(self.exclude)) if self.exclude else None,
                extend_exclude=tuple(_split(self.extend_exclude)) if self.extend_exclude else None,
                report_unused_noqa=self.report_unused_noqa,
                python=interpreter_path(self.python, Path.cwd()) if self.python else None,
                libraries=False if self.no_libraries else None,
                all_configurations=True if self.all_configurations else None,
            )
        except ConfigError as exc:
            _fail(str(exc))
        overlays: dict[Path, bytes | str] = {}
        if "-" in paths:
            if self._stdin is None:
                self._stdin = sys.stdin.buffer.read()  # read once: --fix lints twice
            overlays[Path(os.path.abspath(stdin_path))] = self._stdin
            self.from_stdin = True
        if self.no_project and self.project_root is not None:
            _fail("--project-root and --no-project are alternatives: give one")
        chosen = ProjectRoot(None, "--no-project") if self.no_project else choose_project_root(config, targets, self.project_root)
        root = chosen.path
        try:
            linter = linter_for(
                config,
                root,
                overlays=overlays,
                jobs=self.jobs,
                no_cache=self.no_cache,
                cache_dir=self.cache_dir,
                want_fixes=self.want_fixes,
                want_hints=self.want_hints,
            )
        except ConfigError as exc:  # an interpreter that cannot be asked: a bad option, as a bad code is
            _fail(f"{exc} (--python, or `python =` in [tool.ckptlint]; --no-libraries lints without them)")
        if self.verbose:
            _say(f"project root: {root or 'none'} ({chosen.reason})")
            _say(f"configuration: {config.path or 'none, the defaults'}")
            _say(f"cache: {linter.cache_dir or 'none'}")

        def on_scope(scope: Scope) -> None:
            if self.verbose:
                project = f"{scope.project:,} in the project scan" if root is not None else "no project scan"
                _say(f"files: {scope.named:,} named, {project}")
                hint = scope_hint(root, scope)
                if hint is not None:
                    _say(hint)
                for skipped in scope.skipped:
                    _say(f"project scan: skipped {skipped} (a checkpoint call there that reaches a named file is not seen)")

        global _analysed_in_this_process
        if _process_ends_after_the_command:
            # the process ends after the report: the collector would only rescan the analysis's
            # trees and memos, alive or dropped (0.2-0.35 s of a 2 s re-lint of one model file)
            if _analysed_in_this_process:
                gc.collect()  # `--fix` lints again: free the first lint's state first
            gc.disable()
        result = linter.lint_paths(targets, self.force_exclude, root, on_scope)
        _analysed_in_this_process = True
        if self.verbose:
            _say(f"analysed {result.analysed:,} file{'s' if result.analysed != 1 else ''}; {result.reused:,} from the cache")
        _report_problems(result.problems)
        return result


def _say(line: str) -> None:
    click.echo(f"ckptlint: {line}", err=True)


@cli.command("check")
@lint_options
@click.option(
    "--format", "output_format", type=click.Choice(["text", "json", "sarif", "github", "lsp"]), default="text", show_default=True
)
@click.option(
    "--fix",
    is_flag=True,
    help="Apply safe fixes to the files (CKP101: use_reentrant=True; CKP305: use_reentrant False in gradient_checkpointing_kwargs).",
)
@click.option(
    "--unsafe-fixes",
    is_flag=True,
    help="With --fix or --diff, apply unsafe fixes too: use_reentrant=False at the checkpoint call (CKP101, CKP301, CKP302, CKP303, CKP304, CKP306).",
)
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; write nothing (exit 1 if there are any).")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` comments for every current finding.")
@click.option("--report-unused-noqa", is_flag=True, default=None, help="Report `# noqa: CKPxxx` comments that silence nothing (CKP001).")
@click.option("--output-file", "-o", type=click.Path(dir_okay=False), help="Write the report here instead of stdout.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per code.")
@click.option("--show-source", is_flag=True, help="Print the source line under each finding.")
@click.option("--quiet", "-q", is_flag=True, help="Print findings only, no summary.")
def check(
    request: LintRequest,
    output_format: str,
    fix: bool,
    unsafe_fixes: bool,
    diff: bool,
    add_noqa: bool,
    report_unused_noqa: bool | None,
    output_file: str | None,
    exit_zero: bool,
    statistics: bool,
    show_source: bool,
    quiet: bool,
) -> None:
    """Lint PATHS (files or directories; `-` reads stdin). The default command."""
    from ckptlint.reporters import FORMATS

    request.report_unused_noqa = report_unused_noqa
    request.want_fixes = fix or diff or output_format in FORMATS_WITH_FIXES
    result = request.run()
    if add_noqa or fix or diff:
        from ckptlint import apply_fixes

        changes = apply_fixes.noqa_changes(result) if add_noqa else apply_fixes.fixed_files(result, unsafe_fixes)
        if diff:
            text = apply_fixes.unified_diff(changes)
            click.echo(text, nl=False)
            sys.exit(EXIT_FINDINGS if changes else EXIT_CLEAN)
        if request.from_stdin:
            click.echo(apply_fixes.stdin_text(result, changes), nl=False)
            sys.exit(EXIT_CLEAN)
        if add_noqa:
            apply_fixes.write(changes)
            if not quiet:
                count = sum(change.fixed for change in changes)
                click.echo(f"Added noqa comments for {count} finding{'s' if count != 1 else ''} in {len(changes)} file{'s' if len(changes) != 1 else ''}.", err=True)
            sys.exit(EXIT_CLEAN)
        fixed = apply_fixes.write(changes)
        result = request.run()
        if not quiet and fixed:
            click.echo(f"Fixed {fixed} finding{'s' if fixed != 1 else ''}.", err=True)
    report = FORMATS[output_format](result, show_source=show_source, statistics=statistics, quiet=quiet)
    if output_file:
        Path(output_file).write_text(report, encoding="utf-8")
    else:
        click.echo(report, nl=False)
    if result.fatal:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if result.findings and not exit_zero else EXIT_CLEAN)


@cli.command("calls")
@lint_options
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--unresolved", is_flag=True, help="Under each call, list the calls in its region the analysis could not follow, and why; end with the coverage.")
def calls(request: LintRequest, output_format: str, unresolved: bool) -> None:
    """List the checkpoint calls ckptlint recognises in PATHS, with their region, mode, what decided
    the mode, and where the code says what checkpointing it costs, static cost hints. With
    --unresolved, also what the analysis of each region could not follow."""
    import json

    from ckptlint.call_report import coverage_line

    request.want_hints = True
    result = request.run()
    described = sorted(result.calls, key=lambda d: (d["path"], d["line"], d["column"]))
    if output_format == "json":
        click.echo(json.dumps(described, indent=2))
    else:
        for item in described:
            mode = item["mode"] + (" (default)" if item["mode_defaulted"] else "")
            source = json.dumps(item["mode_source"])  # quoted: it has spaces
            click.echo(f"{item['path']}:{item['line']}:{item['column']}: {item['api']} region={item['region']} mode={mode} source={source}")
            for hint in item["hints"]:
                click.echo(f"    hint ({hint['kind']}): {hint['message']}")
            if unresolved:
                for call in item["coverage"]["unresolved"]:
                    click.echo(f"    unresolved: {call['path']}:{call['line']}:{call['column']}: {call['callee']} ({call['reason']})")
        if unresolved:
            click.echo(coverage_line(described))
    sys.exit(EXIT_ERROR if result.fatal else EXIT_CLEAN)


@cli.command(
    "confirm",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--sample", default="first", show_default=True, metavar="first|all|N", help="Which calls of each site to probe.")
@click.option("--report", "report_file", type=click.Path(dir_okay=False), help="Write the report as JSON here.")
@click.option("--findings", "findings_file", type=click.Path(exists=True, dir_okay=False), help="Static findings to join (ckptlint --format json).")
@click.option("--lint", "lint_paths", multiple=True, type=click.Path(), help="Lint these paths and join the findings.")
@click.option("-m", "module", metavar="MODULE", help="Run a module, as `python -m MODULE` would.")
@click.option("--witness", is_flag=True, help="Also compare each sampled call's real recompute in backward with its forward.")
@click.option("--cost", is_flag=True, help="Also measure per call site the activation bytes checkpointing frees and the FLOPs it recomputes.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 when calls diverge (the script's own failure still counts).")
@click.option("--compiled", is_flag=True, help="Also replay each probed call under torch.compile (aot_eager) and report where it differs from eager.")
@click.option(
    "--rank-timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Under torchrun: seconds a rank waits for the others to reach the call it probes, and for a replay's communication.",
)
@click.argument("script_and_arguments", nargs=-1, type=click.UNPROCESSED)
def confirm(
    sample: str,
    report_file: str | None,
    findings_file: str | None,
    lint_paths: tuple[str, ...],
    module: str | None,
    witness: bool,
    cost: bool,
    exit_zero: bool,
    rank_timeout: float,
    compiled: bool,
    script_and_arguments: tuple[str, ...],
) -> None:
    """Run SCRIPT [ARGS] (or -m MODULE [ARGS]), replaying each checkpoint call with and without
    checkpointing; report per call site whether anything diverges. Needs torch."""
    if findings_file and lint_paths:
        _fail("--findings and --lint are alternatives: give one")
    if module is None and not script_and_arguments:
        _fail("confirm needs a SCRIPT to run (or -m MODULE)")
    target, arguments = (module, list(script_and_arguments)) if module is not None else (script_and_arguments[0], list(script_and_arguments[1:]))
    try:
        from ckptlint.runtime import parse_sample
        from ckptlint.runtime.confirm import TargetNotFound, confirm as run_confirm
    except ImportError as exc:
        _fail(f"the runtime companion needs torch ({exc}); from a clone of ckptlint: {RUNTIME_INSTALL} (README.md, Installing)")
    try:
        parse_sample(sample)
    except ValueError as exc:
        _fail(f"--sample: {exc}")
    if module is None:
        _check_script(target)  # a module is looked for as runpy looks, once the session runs (confirm.find_module)
    from ckptlint.runtime.intercept import UnsupportedTorch

    try:
        code = run_confirm(
            target, arguments, module is not None, sample, report_file, findings_file, lint_paths, witness, exit_zero, rank_timeout,
            compiled=compiled,
            cost=cost,
        )
    except (UnsupportedTorch, ConfigError, TargetNotFound) as exc:  # ConfigError: a bad configuration or --python for --lint
        _fail(str(exc))
    sys.exit(code)


# README.md's install line for the runtime (Installing; tests/test_runtime_confirm.py reads it
# there): ckptlint is not on PyPI, so `pip install 'ckptlint[runtime]'` cannot work
RUNTIME_INSTALL = "python3 -m pip install torch --index-url https://download.pytorch.org/whl/cpu && python3 -m pip install '.[runtime]'"
LSP_INSTALL = "python3 -m pip install '.[lsp]'"  # the same for the language server


def _check_script(script: str) -> None:
    """Exit 2 with one line where `python SCRIPT` could not open it (python exits 2 there too):
    a traceback and exit 1 would read as the script's failure, and 1 is confirm's `a call diverged`."""
    try:
        with open(script, "rb"):
            return
    except IsADirectoryError:
        if not os.path.isfile(os.path.join(script, "__main__.py")):  # a directory holding one runs as python runs it
            _fail(f"confirm: can't find '__main__' module in {script!r}")
    except OSError as exc:
        _fail(f"confirm: can't open file {script!r}: {exc.strerror or exc}")


@cli.command("lsp")
@click.option("--tcp", is_flag=True, help="Listen on TCP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=2087, show_default=True, type=int)
def lsp(tcp: bool, host: str, port: int) -> None:
    """Run the language server (stdio by default) for editors."""
    try:
        from ckptlint.lsp.server import serve
    except ImportError as exc:
        _fail(f"the language server needs pygls and lsprotocol ({exc}); from a clone of ckptlint: {LSP_INSTALL} (README.md, Installing)")
    serve((host, port) if tcp else None)


@cli.command("clean")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--cache-dir", type=click.Path(file_okay=False), envvar="CKPTLINT_CACHE_DIR", help="The cache to remove.")
def clean(path: str | None, cache_dir: str | None) -> None:
    """Remove the cache a lint of PATH (default: here) uses: --cache-dir, CKPTLINT_CACHE_DIR,
    else .ckptlint_cache in the project root."""
    from ckptlint.engine.cache import clean as remove

    try:
        directory = cache_directory_for([Path(path or ".")], cache_dir)
    except ConfigError as exc:
        _fail(str(exc))
    try:
        removed = remove(directory)
    except OSError as exc:
        _fail(str(exc))
    click.echo(f"{'Removed' if removed else 'No cache at'} {directory}", err=True)


@cli.command("rules")
@click.argument("code", required=False)
def rules(code: str | None) -> None:
    """List the rules, or explain one (`ckptlint rules CKP101`)."""
    from ckptlint.rules import ALL_RULES, RULES_BY_CODE

    if code is None:
        for rule in ALL_RULES:
            fix = " (fixable)" if rule.fixable else ""
            click.echo(f"{rule.code}  {rule.name:<32} {rule.summary}{fix}")
        return
    chosen = RULES_BY_CODE.get(code.upper())
    if chosen is None:
        _fail(f"unknown rule {code!r}; run `ckptlint rules` to list them")
    click.echo(chosen.document(), nl=False)


def main(argv: Sequence[str] | None = None) -> None:
    global _process_ends_after_the_command
    _process_ends_after_the_command = True
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="ckptlint")
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_CLEAN)
    except SystemExit as done:
        watched = sys.getprofile() is not None or sys.gettrace() is not None  # cProfile, coverage: they write at exit
        if _analysed_in_this_process and not watched and (done.code is None or isinstance(done.code, int)):
            _exit_without_teardown(done.code or 0)
        raise


# Set once a lint has run here: the interpreter's teardown would then collect every parsed
# module and memo the in-process analysis left (0.9 s of a 2.7 s re-lint of one transformers
# model after an edit), for a process that is about to end anyway. mypy's CLI exits the same way.
_analysed_in_this_process = False
# Set by `main`, the process's entry point (not by an in-process caller of the click commands:
# a test, an editor's server), whose process ends once the command has run.
_process_ends_after_the_command = False


def _exit_without_teardown(code: int) -> NoReturn:
    """Flush what was printed and end the process without freeing its objects. Everything
    the run writes (reports, fixes, the cache) is written and closed before `main` returns."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            pass
    os._exit(code)
