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
from ckptlint.symbols import IMPORT, ModuleSymbols


def module_edges(project: Project, module: LoadedModule) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every module name the module's imports and the attribute chains of the packages they
    bind can load, with their packages; the project packages some use of a bound name can reach
    whole), memoised on the module."""
    if module.edges is not None:
        return module.edges
    symbols = module.symbols
    names: set[str] = set()
    packages: set[str] = set()
    if symbols is not None:
        spelled: list[str] = [*symbols.imported, *symbols.star_imports]
        for target, chains in package_reach(symbols, lambda name: project.module_directory(name) is not None).items():
            if chains is None:
                packages.add(target)
            else:
                spelled.extend(chains)
        for name in spelled:
            parts = name.split(".")
            names.update(".".join(parts[:cut]) for cut in range(1, len(parts) + 1))
    module.edges = (tuple(sorted(names)), tuple(sorted(packages)))
    return module.edges


def package_reach(symbols: ModuleSymbols, is_package: Callable[[str], bool]) -> dict[str, set[str] | None]:
    """Each package an import binds -> the dotted chains the code spells through it
    (`transformers.utils.logging` for `transformers.utils.logging.get_logger`), or None when a
    use is not an attribute chain and may reach any submodule. A bound module or class has no
    submodules to reach: only packages are read (few modules bind one, so few are walked)."""
    targets: dict[str, set[str]] = {}  # a bound local name -> the packages it is bound to
    for scope in symbols.iter_scopes():
        for name, bindings in scope.bindings.items():
            for binding in bindings:
                if binding.kind == IMPORT and binding.target and is_package(binding.target):
                    targets.setdefault(name, set()).add(binding.target)
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
