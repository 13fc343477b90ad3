"""The default training configuration a project's command line gives: argparse defaults.

A training framework stores what its command line chose on its modules (`self.transformer_impl =
args.transformer_impl`) and branches on it in the region (`if self.transformer_impl ==
'transformer_engine':`). The contract reports what the default configuration does
(`../shared/DESIGN.md`, "Configuration chosen at run time"): with `--transformer-impl` defaulting
to `'local'` in the project's `add_argument`, the other arm is a non-default mode, left out unless
the run asks for every configuration (`--all-configurations`, `all-configurations = true`).

Decided only for an attribute every assignment of which is made in `__init__`-like methods from
`<...args...>.<dest>`, and a `dest` one `add_argument` in the package declares with a constant
default. The files read for the defaults are recorded beside the module that asked (the cache).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.known_truth import known_truth
from ckptlint.analysis.semantics.protocol import TypeEvaluator
from ckptlint.analysis.semantics.values import FALSE_TYPE, NONE_TYPE, TRUE_TYPE, LiteralType, Type, Value
from ckptlint.classes import ClassInfo
from ckptlint.project import content_digest
from ckptlint.symbols import ModuleSymbols

_MAX_FILES = 2000  # a package larger than this is not searched for its command line


class RunArguments(TypeEvaluator):
    """Argparse defaults per package, read once per run (a mixin of `evaluator.TypeInference`)."""

    _argument_defaults: dict[tuple[str, str], Type | None]
    _package_files_found: dict[str, list[str]]

    def configuration_truth(self, info: ClassInfo, test: ast.expr, receiver: str = "self") -> bool | None:
        """A test on `self.<attribute>`s set from the command line, decided by its defaults; None otherwise."""

        def lookup(path: str) -> Value | None:
            head, _, attribute = path.partition(".")
            if head != receiver or not attribute or "." in attribute:
                return None
            default = self._attribute_default(info, attribute)
            return Value(types=frozenset({default})) if default is not None else None

        return known_truth(test, lookup, values=True)

    def _attribute_default(self, info: ClassInfo, attribute: str) -> Type | None:
        classes = self.classes
        assignments = [(cls, a) for cls in classes.mro(info) for a in cls.attribute_assignments.get(attribute, ())]
        if not assignments:
            return None
        dests = set()
        for cls, assignment in assignments:
            value = assignment.value
            if assignment.augmented or not isinstance(value, ast.Attribute) or "args" not in ast.unparse(value.value):
                return None
            if getattr(assignment.method.node, "name", "") not in torch_api.INIT_LIKE_METHODS:
                return None
            dests.add((cls, value.attr))
        defaults = {self._default(cls, dest) for cls, dest in dests}
        return defaults.pop() if len(defaults) == 1 else None

    def _default(self, cls: ClassInfo, dest: str) -> Type | None:
        module = cls.module
        package = module.name.partition(".")[0]
        key = (package, dest)
        if key in self._argument_defaults:
            return self._argument_defaults[key]
        found: set[Type | None] = set()
        spellings = (f"--{dest.replace('_', '-')}".encode(), f"--{dest}".encode())
        consulted: dict[str, str] = {}
        for path in self._package_files(package, module):
            try:
                data = self.project.file_data(path)
                if not any(spelling in data for spelling in spellings):
                    continue
                loaded = self.project.load(Path(path))
            except OSError:
                continue
            consulted[path] = loaded.digest or content_digest(data)
            if loaded.symbols is not None:
                found.update(_declared_defaults(loaded.symbols, dest))
        if consulted and module.source is not None:
            self.project.consult(module.source.path, consulted)
        result = found.pop() if len(found) == 1 else None
        self._argument_defaults[key] = result
        return result

    def _package_files(self, package: str, module: ModuleSymbols) -> list[str]:
        """The `.py` files of the module's top-level package; of its own folder for a top-level module (`train.py`)."""
        files = self._package_files_found.get(package)
        if files is None:
            directory = self.project.module_directory(package)
            if directory is None and module.source is not None:
                directory = Path(os.path.abspath(module.source.path)).parent
            files = self._package_files_found[package] = self.project.python_files_under(os.fspath(directory), _MAX_FILES) if directory is not None else []
        return files


def mode_condition(test: ast.expr, body: bool) -> str:
    """What an arm only a non-default command-line mode takes needs, in messages and `condition`:
    `` `self.attention_impl == 'fused'`, a non-default command-line mode`` (`not ...` for the `else`)."""
    return f"{'' if body else 'not '}`{ast.unparse(test)}`, a non-default command-line mode"


def _declared_defaults(module: ModuleSymbols, dest: str) -> set[Type | None]:
    """The defaults `add_argument` calls in a module give `dest` (None for one that is not a
    constant). The top-level definition holding each call is looked up by name, as any analysis
    that reads a definition does (what the cache's keys watch)."""
    found: set[Type | None] = set()
    for statement in module.tree.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                declared, default = _declared_default(node, dest)
                if not declared:
                    continue
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    module.scope.bindings.get(statement.name)  # the lookup that makes it a read of that definition
                found.add(default)
    return found


def _declared_default(node: ast.Call, dest: str) -> tuple[bool, Type | None]:
    """Whether one `add_argument` call declares `dest`, and the default it gives it."""
    options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    named = next((k.value.value for k in node.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)), None)
    names = {named} if named else {o.lstrip("-").replace("-", "_") for o in options if o.startswith("--")}
    if dest not in names:
        return False, None
    default = next((k.value for k in node.keywords if k.arg == "default"), None)
    action = next((k.value.value for k in node.keywords if k.arg == "action" and isinstance(k.value, ast.Constant)), None)
    return True, _constant_type(default, action)


def _constant_type(default: ast.expr | None, action: object) -> Type | None:
    if default is None:
        return FALSE_TYPE if action == "store_true" else TRUE_TYPE if action == "store_false" else NONE_TYPE
    if not isinstance(default, ast.Constant):
        return None
    value = default.value
    if value is None:
        return NONE_TYPE
    if isinstance(value, bool):
        return TRUE_TYPE if value else FALSE_TYPE
    if isinstance(value, str):
        return LiteralType(value)
    return None
