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


def _imported(tree: ast.Module, module: str, is_package: bool, type_checking: bool = True) -> set[tuple[str, str | None]]:
    """(module, name) for every `from module import name`, (module, None) for every
    `import module`, anywhere in `tree` (inside functions too). Imports under
    `if TYPE_CHECKING:` count unless `type_checking` is False: they never run, but they tie
    the modules together for a reader as much as any other import."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[tuple[str, str | None]] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
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


def _code_files() -> list[Path]:
    """ckptlint's own modules: not the library stubs under ckptlint/stubs/<library>/, which the
    analysis reads as data (never imports) and which name torch as the libraries do."""
    stubs = PACKAGE / "stubs"
    return sorted(p for p in PACKAGE.rglob("*.py") if not (p.is_relative_to(stubs) and p.parent != stubs))


def import_graph() -> dict[str, set[str]]:
    """Module -> the ckptlint modules it imports: `from pkg import name` is an edge to the
    module pkg.name when there is one, else to pkg. A parent package that an import runs on
    the way is not an edge (every package would otherwise be in a cycle with its modules).
    `TYPE_CHECKING` imports count, except in a `protocol.py`: an interface module names the
    types its protocol's signatures mention, the one place a type-only edge may point back."""
    files = {_module_name(path): path for path in _code_files()}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges = set()
        for base, member in _imported(tree, name, path.name == "__init__.py", type_checking=path.name != "protocol.py"):
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


def test_the_import_graph_of_ckptlint_has_no_cycle_counting_imports_inside_functions_and_type_checking_ones() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_inside_functions_and_type_checking_ones_count() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ckptlint.cli import main\n"
        "def f():\n    from ckptlint.engine import linter\n    from . import config\n"
    )
    found = _imported(tree, "ckptlint.flake8_plugin", is_package=False)
    assert ("ckptlint.engine", "linter") in found and ("ckptlint", "config") in found
    assert ("ckptlint.cli", "main") in found
    assert ("ckptlint.cli", "main") not in _imported(tree, "ckptlint.flake8_plugin", is_package=False, type_checking=False)


def test_rule_files_import_only_the_vocabulary_the_catalogue_findings_and_the_rule_base() -> None:
    allowed = {
        "ckptlint.analysis.regions.summary",
        "ckptlint.analysis.usage.facts",
        "ckptlint.catalogue",
        "ckptlint.finding",
        "ckptlint.rules.base",
        "ckptlint.sac_policy",
    }
    graph = import_graph()
    rules = sorted(name for name in graph if name.startswith("ckptlint.rules.ckp"))
    assert len(rules) >= 10
    for name in rules:
        assert graph[name] <= allowed, f"{name} imports {sorted(graph[name] - allowed)}"


def test_only_the_runtime_imports_torch() -> None:
    for path in _code_files():
        name = _module_name(path)
        if name.startswith("ckptlint.runtime"):
            continue
        imported = {base for base, _ in _imported(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py")}
        assert not any(base == "torch" or base.startswith("torch.") for base in imported), name


def test_reporters_and_fixes_read_results_not_the_engine() -> None:
    graph = import_graph()
    readers = [name for name in graph if name.startswith("ckptlint.reporters") or name == "ckptlint.apply_fixes"]
    for name in readers:
        assert not any(target.startswith(("ckptlint.engine", "ckptlint.analysis")) for target in graph[name]), name


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    """mypy runs strict in CI; an ignore is a claim the checker cannot see, so it carries its reason."""
    import re

    ignore = re.compile(r"#\s*type:\s*ignore(?P<code>\[[\w,-]+\])?(?P<rest>.*)$")
    unexplained = []
    for path in _code_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = ignore.search(line)
            if match and (not match.group("code") or not re.match(r"\s+#\s*\S", match.group("rest"))):
                unexplained.append(f"{path.relative_to(REPO)}:{number}")
    assert unexplained == [], unexplained


# -- the analysis: six packages in layer order (docs/architecture.md, "The analysis") ----------

ANALYSIS = "ckptlint.analysis"
LAYERS = {"knowledge": 0, "flow": 1, "semantics": 2, "contexts": 3, "regions": 4, "usage": 4, "session": 5}
PROJECT_MODEL = {"ckptlint.source", "ckptlint.syntax", "ckptlint.symbols", "ckptlint.project", "ckptlint.classes", "ckptlint.passed_arguments"}
RECOGNITION = {"ckptlint.catalogue", "ckptlint.calls", "ckptlint.modes", "ckptlint.sac_policy", "ckptlint.versions", "ckptlint.context_prefilter"}
MAX_CLASS_LINES = 650
MAX_ANALYSIS_MODULE_LINES = 800


def _layer_of(module: str) -> str | None:
    """`semantics` for ckptlint.analysis.semantics.evaluator, `session` for the session; None outside."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["ckptlint", "analysis"] and len(parts) > 2 else None


def layering_problems(graph: dict[str, set[str]]) -> list[str]:
    """Every import that breaks the analysis's layer rules, as `a -> b: why`."""
    problems = []
    for module, targets in sorted(graph.items()):
        layer = _layer_of(module)
        if layer is None:
            continue
        for target in sorted(targets):
            other = _layer_of(target)
            if other is not None and other != layer and LAYERS[other] >= LAYERS[layer]:
                problems.append(f"{module} -> {target}: {other} is not below {layer}")
            elif other is None and target != ANALYSIS and target not in PROJECT_MODEL | RECOGNITION | {"ckptlint.finding"}:
                problems.append(f"{module} -> {target}: the analysis imports only the project model, recognition and findings")
            elif layer == "knowledge" and other != "knowledge" and target not in ("ckptlint.syntax", ANALYSIS):
                problems.append(f"{module} -> {target}: knowledge imports nothing but syntax")
            elif layer == "flow" and (other not in (None, "flow", "knowledge") or target in ("ckptlint.project", "ckptlint.classes")):
                problems.append(f"{module} -> {target}: flow reads one function's own lines (no project, class index or types)")
    return problems


def test_the_analysis_packages_import_only_lower_layers_and_regions_and_usage_not_each_other() -> None:
    assert layering_problems(import_graph()) == []


def test_the_layer_check_finds_each_kind_of_breach() -> None:
    graph = {
        "ckptlint.analysis.flow.a": {"ckptlint.analysis.semantics.evaluator", "ckptlint.project"},
        "ckptlint.analysis.regions.b": {"ckptlint.analysis.usage.c", "ckptlint.engine.worker"},
        "ckptlint.analysis.knowledge.d": {"ckptlint.symbols"},
        "ckptlint.analysis.usage.e": {"ckptlint.analysis.semantics.values", "ckptlint.calls", "ckptlint.analysis.usage.f"},
    }
    problems = layering_problems(graph)
    assert [p.split(":")[0] for p in problems] == [
        "ckptlint.analysis.flow.a -> ckptlint.analysis.semantics.evaluator",
        "ckptlint.analysis.flow.a -> ckptlint.project",
        "ckptlint.analysis.knowledge.d -> ckptlint.symbols",
        "ckptlint.analysis.regions.b -> ckptlint.analysis.usage.c",
        "ckptlint.analysis.regions.b -> ckptlint.engine.worker",
    ]


def _class_sizes(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.name, (node.end_lineno or node.lineno) - node.lineno + 1) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def test_no_class_over_650_lines_and_no_analysis_module_over_800() -> None:
    large_classes = [f"{_module_name(p)}.{name} {size}" for p in _code_files() for name, size in _class_sizes(p) if size > MAX_CLASS_LINES]
    analysis = PACKAGE / "analysis"
    large_modules = [f"{_module_name(p)} {n}" for p in sorted(analysis.rglob("*.py")) if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_ANALYSIS_MODULE_LINES]
    assert large_classes == [] and large_modules == []


def test_the_analysis_reads_no_file_itself() -> None:
    """Only the project model reads files (and records what an analysis read, for the cache)."""
    reading = ("os.listdir", "os.scandir", "open(", ".read_bytes(", ".read_text(", ".iterdir(", "glob(")
    found = [
        f"{path.relative_to(REPO)}: {word}"
        for path in sorted((PACKAGE / "analysis").rglob("*.py"))
        for word in reading
        if word in path.read_text(encoding="utf-8")
    ]
    assert found == []


def test_the_analysis_reads_modules_text_without_comments() -> None:
    """A text test on `source.text` would let a comment in a dependency change a dependent's
    result, which the cache assumes it cannot (code_text.py): the analysis reads `source.code`."""
    assert _analysis_lines_spelling("source.text") == []


def test_no_analysis_asks_which_modules_happen_to_be_loaded() -> None:
    """What a worker has loaded depends on the files it analysed before (and on `-j`): an answer
    read from it made findings depend on the order of the run (timm's efficientformer_v2 gained a
    site from mobilenetv5's builder configuration). The analysis asks the project for modules by
    name or reads a directory (modules_beside.py), never for the loaded set."""
    assert _analysis_lines_spelling(".loaded()") == []


def _analysis_lines_spelling(text: str) -> list[str]:
    """`path:line` of each line of `ckptlint/analysis/` that spells `text`."""
    return [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((PACKAGE / "analysis").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if text in line
    ]


def test_importing_the_rule_base_loads_neither_the_type_evaluator_nor_the_gradient_analysis() -> None:
    import subprocess
    import sys

    code = "import sys, ckptlint.rules.base; print('\\n'.join(m for m in sys.modules if m.startswith('ckptlint.analysis')))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout.split())
    assert "ckptlint.analysis.regions.summary" in loaded and "ckptlint.analysis.usage.facts" in loaded
    heavy = {"ckptlint.analysis.semantics.evaluator", "ckptlint.analysis.usage.gradients", "ckptlint.analysis.usage.grad_flow", "ckptlint.analysis.regions.interpreter"}
    assert loaded & heavy == set()


def test_every_analysis_module_is_named_in_its_package_docstring_and_the_map_is_current() -> None:
    from ckptlint.analysis_map import ANALYSIS as ANALYSIS_DIR
    from ckptlint.analysis_map import (
        END,
        START,
        analysis_map,
        docstring,
        items,
        packages,
    )

    assert set(packages()) == {p.name for p in ANALYSIS_DIR.iterdir() if (p / "__init__.py").exists()}
    assert [LAYERS[p] for p in packages()] == sorted(LAYERS[p] for p in packages())  # named in layer order
    for package in packages():
        named = {name for name, _ in items(docstring(ANALYSIS_DIR / package))}
        present = {p.name for p in (ANALYSIS_DIR / package).glob("*.py") if p.name != "__init__.py"}
        assert named == present, package
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert page[page.index(START) : page.index(END) + len(END)] == analysis_map(), "run: python -m ckptlint.analysis_map docs/architecture.md"


def test_every_analysis_face_is_a_docstring_only() -> None:
    for init in sorted((PACKAGE / "analysis").rglob("__init__.py")):
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), init
