"""Rules about how the package is put together, checked on its source."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "ckptlint"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.Module, module: str, is_package: bool) -> set[tuple[str, str | None]]:
    """(module, name) for every `from module import name`, (module, None) for every
    `import module`, anywhere in `tree` (inside functions too), except under
    `if TYPE_CHECKING:`, which never runs."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[tuple[str, str | None]] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.update((base, alias.name) for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the ckptlint modules it imports: `from pkg import name` is an edge to the
    module pkg.name when there is one, else to pkg. A parent package that an import runs on
    the way is not an edge (every package would otherwise be in a cycle with its modules)."""
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges = set()
        for base, member in _imported(tree, name, path.name == "__init__.py"):
            target = f"{base}.{member}" if member is not None and f"{base}.{member}" in files else base
            if target in files and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_of_ckptlint_has_no_cycle_counting_imports_inside_functions() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_inside_functions_count_and_type_checking_ones_do_not() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ckptlint.cli import main\n"
        "def f():\n    from ckptlint.engine import linter\n    from . import config\n"
    )
    found = _imported(tree, "ckptlint.flake8_plugin", is_package=False)
    assert ("ckptlint.engine", "linter") in found and ("ckptlint", "config") in found
    assert not any(base == "ckptlint.cli" for base, _ in found)


def test_rule_files_import_only_the_vocabulary_the_catalogue_findings_and_the_rule_base() -> None:
    allowed = {"ckptlint.analysis.regions.summary", "ckptlint.catalogue", "ckptlint.finding", "ckptlint.rules.base"}
    graph = import_graph()
    rules = sorted(name for name in graph if name.startswith("ckptlint.rules.ckp"))
    assert len(rules) >= 10
    for name in rules:
        assert graph[name] <= allowed, f"{name} imports {sorted(graph[name] - allowed)}"


def test_only_the_runtime_imports_torch() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        if name.startswith("ckptlint.runtime"):
            continue
        imported = {base for base, _ in _imported(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py")}
        assert not any(base == "torch" or base.startswith("torch.") for base in imported), name


def test_reporters_and_fixes_read_results_not_the_engine() -> None:
    graph = import_graph()
    readers = [name for name in graph if name.startswith("ckptlint.reporters") or name == "ckptlint.apply_fixes"]
    for name in readers:
        assert not any(target.startswith(("ckptlint.engine", "ckptlint.regions")) for target in graph[name]), name


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    """mypy runs strict in CI; an ignore is a claim the checker cannot see, so it carries its reason."""
    import re

    ignore = re.compile(r"#\s*type:\s*ignore(?P<code>\[[\w,-]+\])?(?P<rest>.*)$")
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = ignore.search(line)
            if match and (not match.group("code") or not re.match(r"\s+#\s*\S", match.group("rest"))):
                unexplained.append(f"{path.relative_to(REPO)}:{number}")
    assert unexplained == [], unexplained
