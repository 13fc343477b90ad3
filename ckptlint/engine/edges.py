"""What a module's code can reach through its imports: the edges the cache follows.

`import a.b` loads `a` and `a.b`; `from a.b import c` loads `a.b` and maybe `a.b.c`. A name an
import binds (`a`, `c`) also reaches, as attributes, the submodules its uses spell: `a.x.y.f`
reaches `a.x` and `a.x.y`. Only a use that is not an attribute chain (`p = a`, `f(a)`,
`getattr(a, name)`) can reach anything below the package, so only then does the whole package
count. Reading the spelled chains, instead of counting every module below a package a module
binds, is what keeps `import transformers` in one file from making it depend on all of
transformers (a new or edited model module re-analysed every file that reaches it)."""

from __future__ import annotations

import ast
from typing import Callable

from ckptlint.project import LoadedModule, Project
from ckptlint.symbols import IMPORT, Binding, ModuleSymbols

Edges = tuple[tuple[str, ...], tuple[str, ...]]


def module_edges(project: Project, module: LoadedModule) -> Edges:
    """(every module name the module's imports and the attribute chains of the packages they
    bind can load, with their packages; the project packages some use of a bound name can reach
    whole), memoised on the module: what a new or removed file may change (the cache's index)."""
    if module.edges is None:
        module.edges = _edges(project, module.symbols, every_import=True)
    return module.edges


def dependency_edges(project: Project, module: LoadedModule) -> Edges:
    """`module_edges` without the imports no analysis has read a name of yet (`Binding.target`
    notes a read): what a memoised answer about the module can have read. An analysis reaches
    what an import loads only through the names it binds (a star import's, read whole, always
    count). bitnet.py's import of llama inside one function made 751 of transformers' 2,200
    files depend on modeling_llama.py through configuration_utils.py, which never runs it.
    Memoised until another import is read."""
    symbols = module.symbols
    if symbols is None:
        return (), ()
    if symbols.read_when_bound <= symbols.imports_read:
        return module_edges(project, module)  # every import counts
    version = len(symbols.imports_read)
    if module.dependency_edges is None or module.dependency_edges[0] != version:
        module.dependency_edges = (version, _edges(project, symbols, every_import=False))
    return module.dependency_edges[1]


def _edges(project: Project, symbols: ModuleSymbols | None, every_import: bool) -> Edges:
    names: set[str] = set()
    packages: set[str] = set()
    if symbols is not None:
        read = symbols.imports_read
        unread = set() if every_import else symbols.read_when_bound - read

        def counted(binding: Binding) -> bool:  # an import some analysis read a name of
            return every_import or (bool(binding.statement_imports) and binding.statement_imports[0] in read)

        spelled = [name for name in symbols.imported if name not in unread]
        spelled.extend(symbols.star_imports)
        for target, chains in package_reach(symbols, lambda name: project.module_directory(name) is not None, counted).items():
            if chains is None:
                packages.add(target)
            else:
                spelled.extend(chains)
        for name in spelled:
            parts = name.split(".")
            names.update(".".join(parts[:cut]) for cut in range(1, len(parts) + 1))
    return tuple(sorted(names)), tuple(sorted(packages))


def package_reach(
    symbols: ModuleSymbols, is_package: Callable[[str], bool], counted: Callable[[Binding], bool] = lambda binding: True
) -> dict[str, set[str] | None]:
    """Each package an import binds -> the dotted chains the code spells through it
    (`transformers.utils.logging` for `transformers.utils.logging.get_logger`), or None when a
    use is not an attribute chain and may reach any submodule. A bound module or class has no
    submodules to reach: only packages are read (few modules bind one, so few are walked)."""
    targets: dict[str, set[str]] = {}  # a bound local name -> the packages it is bound to
    for scope in symbols.iter_scopes():
        for name, bindings in scope.bindings.items():
            for binding in bindings:
                target = binding.spelled_target  # not `target`: reading that notes a read
                if binding.kind == IMPORT and target and counted(binding) and is_package(target):
                    targets.setdefault(name, set()).add(target)
    reach: dict[str, set[str] | None] = {target: set() for bound in targets.values() for target in bound}
    if not targets:
        return reach
    bases: set[int] = set()
    loads: list[ast.Name] = []
    for node in ast.walk(symbols.tree):
        if isinstance(node, ast.Attribute):
            attributes = []
            inner: ast.expr = node
            while isinstance(inner, ast.Attribute):
                attributes.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in targets:
                bases.add(id(inner))
                for target in targets[inner.id]:
                    chains = reach[target]
                    if chains is not None:
                        chains.add(".".join([target, *reversed(attributes)]))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in targets:
            loads.append(node)
    for node in loads:
        if id(node) not in bases:
            for target in targets[node.id]:
                reach[target] = None
    return reach
