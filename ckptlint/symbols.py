"""Scopes, bindings and qualified names for one module, built without libcst metadata.

One iterative pass over the tree records what every scope binds (imports, defs,
classes, assignments, parameters, loop targets) and every call with the scope it
sits in. `qualified_name` then resolves `cp.checkpoint`, `ckpt` (an alias) or
`torch.utils.checkpoint.checkpoint` to the same dotted name, following Python's
scoping rules (class bodies do not enclose methods, `global` redirects).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ckptlint.source import SourceFile
from ckptlint.syntax import append_children

if TYPE_CHECKING:
    from ckptlint.prefilter import Names

MODULE = "module"
CLASS = "class"
FUNCTION = "function"
LAMBDA = "lambda"
COMPREHENSION = "comprehension"

# Binding kinds
IMPORT = "import"
DEF = "def"
CLASSDEF = "class"
ASSIGN = "assign"
PARAM = "param"
LOOP = "loop"  # for-loop and comprehension targets; value is the iterable
UNPACK = "unpack"  # `a, b = f()`: value is the right-hand side, `unpack` the position
ANNOTATION = "annotation"  # `name: Type` without a value; no runtime binding
OTHER = "other"

_BUILTINS = frozenset(dir(builtins))

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda

# Nodes that bind nothing and hold no calls: the scope walk does not visit them.
_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Pass, ast.alias)
_LEAF_NODES = frozenset(
    cls for base in _LEAVES for cls in (base, *base.__subclasses__()) if not cls.__subclasses__() or cls in (ast.Name, ast.Constant)
)
# Nodes that bind names (or open scopes): everything else only holds children to visit.
_BINDING_NODES = frozenset(
    {
        ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp, ast.GeneratorExp,
        ast.DictComp, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Assign, ast.AnnAssign, ast.AugAssign,
        ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.ExceptHandler, ast.NamedExpr, ast.MatchAs, ast.MatchStar,
        ast.MatchMapping,
    }
)

def positional_parameters(args: ast.arguments) -> list[ast.arg]:
    """`def f(a, /, b, *, c)`: `a` and `b`, in order: what positional arguments bind to."""
    return [*args.posonlyargs, *args.args]


def _in_own_header(binding: Binding, line: int) -> bool:
    """Whether a use at `line` is in the header of the class `binding` defines (its bases and
    keywords), which runs before the name is bound: `class Output(Output):` re-exporting an
    imported class under its own name derives from the import."""
    node = binding.node
    if binding.kind != CLASSDEF or not isinstance(node, ast.ClassDef) or not node.body:
        return False
    return line == node.lineno or node.lineno <= line < node.body[0].lineno


def parameter_default(binding: Binding) -> ast.expr | None:
    """The default of the parameter `binding` binds (None without one, or when not a parameter)."""
    function = binding.scope.node
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return None
    args = function.args
    positional = positional_parameters(args)
    if binding.node in positional:
        index = positional.index(binding.node) - (len(positional) - len(args.defaults))
        return args.defaults[index] if index >= 0 else None
    if binding.node in args.kwonlyargs:
        return args.kw_defaults[args.kwonlyargs.index(binding.node)]
    return None


@dataclass(eq=False)
class Binding:
    name: str
    kind: str
    node: ast.AST
    scope: Scope  # the scope whose namespace holds the name
    value: ast.expr | None = None  # right-hand side, iterable, or annotation
    spelled_target: str | None = None  # qualified name, for imports: read it as `target`
    in_handler: bool = False  # bound inside an `except` block (an import fallback)
    written_from: Scope | None = None  # the function that wrote it through `global`/`nonlocal`
    unpack: tuple[int, ...] = ()  # position in a tuple target: `for i, layer in enumerate(...)`
    # for an import: the modules its statement names, noted in the module's `imports_read` once
    # an analysis reads the binding's target
    statement_imports: tuple[str, ...] = ()
    read_into: set[str] | None = None

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)

    @property
    def target(self) -> str | None:
        """The qualified name an import binds. An analysis reads what an import loads only
        through the names it binds, so a module's dependencies follow an import only once an
        analysis has read one of them (engine/edges.py): reading it here is what notes it."""
        if self.read_into is not None:
            self.read_into.update(self.statement_imports)
        return self.spelled_target


@dataclass(eq=False)
class Scope:
    kind: str
    node: ast.AST
    parent: Scope | None
    qualname: str  # "" for the module, "Block.forward", "f.<locals>.g"
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    children: list[Scope] = field(default_factory=list)

    def bind(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.name, []).append(binding)

    def is_function(self) -> bool:
        return self.kind in (FUNCTION, LAMBDA)

    @property
    def module_scope(self) -> Scope:
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    @property
    def enclosing_class(self) -> Scope | None:
        """The class whose method this scope is (for `self.<attr>` lookups)."""
        if self.kind == FUNCTION and self.parent is not None and self.parent.kind == CLASS:
            return self.parent
        return None

    def first_parameter(self) -> str | None:
        node = self.node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            params = positional_parameters(node.args)
            if params:
                return params[0].arg
        return None


class ModuleSymbols:
    """What one module binds, where its calls are, and how to resolve its names."""

    def __init__(
        self,
        name: str,
        source: SourceFile,
        tree: ast.Module,
        package: str | None = None,
        import_name: Callable[[str], str] | None = None,
        defines: Callable[[str, str], bool] | None = None,
    ):
        self.name = name
        # maps an absolute import to the project's internal module name (see project.py)
        self.import_name = import_name or (lambda target: target)
        # whether a project module defines a name (for `from module import *`)
        self.defines = defines or (lambda module, name: False)
        self.star_imports: list[str] = []
        # for dependency tracking (internal names): the modules import statements name, and
        # what each import binds (`import a.b` binds `a`, `import a.b as c` and `from a import b`
        # bind `a.b`), whose submodules the code can reach as attributes (`c.d.f()`)
        self.imported: list[str] = []
        self.bound_imports: list[str] = []
        # of `imported`, those only imports that bind names spell (not a star import, read
        # whole); and those of them an analysis has read so far (Binding.target, engine/edges.py)
        self.read_when_bound: set[str] = set()
        self.imports_read: set[str] = set()
        self.checkpoint_names: Names | None = None  # set by CallFinder: the names this module adds (prefilter.Names)
        self.library = False  # an installed library's module (project.py): read, never reported in
        self.source = source
        self.tree = tree
        # The package relative imports start from: the module itself for __init__ files.
        self.package = package if package is not None else name.rpartition(".")[0]
        self.scope = Scope(MODULE, tree, None, "")
        self.scope_of: dict[int, Scope] = {id(tree): self.scope}
        self.calls: list[tuple[ast.Call, Scope]] = []
        self.functions: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, Scope]] = []
        self.classes: list[tuple[ast.ClassDef, Scope]] = []
        _ScopeBuilder(self).run()

    def note_import_read(self, name: str) -> None:
        """An analysis loads a module this one's imports name, without reading a binding
        (Binding.target notes those)."""
        if name in self.read_when_bound:
            self.imports_read.add(name)

    # -- lookup ---------------------------------------------------------------

    def lookup(self, scope: Scope, name: str) -> list[Binding]:
        """The bindings `name` refers to from `scope`, by Python's rules (LEGB)."""
        current: Scope | None = scope
        start = True
        while current is not None:
            if current.kind == CLASS and not start:
                current = current.parent
                continue
            if name in current.globals:
                return self.scope.bindings.get(name, [])
            found = current.bindings.get(name)
            if found and any(b.kind != ANNOTATION for b in found):
                return found
            current = current.parent
            start = False
        return []

    def binding(self, scope: Scope, name: str, before_line: int | None = None) -> Binding | None:
        """The one binding a use most likely sees.

        At module level, bindings after the use do not count yet. A binding in an
        `except` block is a fallback (`except ImportError: checkpoint = None`), so
        the `try` body's binding wins when there is one.
        """
        bindings = [b for b in self.lookup(scope, name) if b.kind != ANNOTATION]
        if before_line is not None and scope.kind == MODULE:
            earlier = [b for b in bindings if b.line <= before_line and b.written_from is None and not _in_own_header(b, before_line)]
            bindings = earlier or bindings
        if not bindings:
            return None
        preferred = [b for b in bindings if not b.in_handler]
        return (preferred or bindings)[-1]

    def constant(self, expr: ast.expr, scope: Scope) -> ast.Constant | None:
        """The literal an expression always is: itself, or a name every binding of which
        assigns that same literal (`flag = False` a few lines above the call that passes it)."""
        if isinstance(expr, ast.Constant):
            return expr
        if not isinstance(expr, ast.Name):
            return None
        bindings = [b for b in self.lookup(scope, expr.id) if b.kind != ANNOTATION]
        if not bindings or any(b.kind != ASSIGN or not isinstance(b.value, ast.Constant) for b in bindings):
            return None
        values = {(type(b.value.value), b.value.value) for b in bindings}  # type: ignore[union-attr]  # every value is a Constant (above)
        return bindings[0].value if len(values) == 1 else None  # type: ignore[return-value]  # a Constant (above)

    def qualified_name(self, expr: ast.expr, scope: Scope, _depth: int = 0, noting: bool = True) -> str | None:
        """`torch.utils.checkpoint.checkpoint` for any spelling of it, else None. Without
        `noting`, a spelling only: an import inside a function it goes through is not noted as
        read (Binding.target), for a caller that only compares the name with others."""
        attrs: list[str] = []
        while isinstance(expr, ast.Attribute):
            attrs.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        binding = self.binding(scope, expr.id, getattr(expr, "lineno", None))
        if binding is None:
            base = self.star_target(expr.id) or (f"builtins.{expr.id}" if expr.id in _BUILTINS else None)
        else:
            base = self.binding_qualified_name(binding, _depth, noting)
        if base is None:
            return None
        return ".".join([base, *reversed(attrs)])

    def star_target(self, name: str) -> str | None:
        """`pkg.blocks.Block` when `Block` comes from `from pkg.blocks import *` (the last such import wins)."""
        for module in reversed(self.star_imports):
            if self.defines(module, name):
                return f"{module}.{name}"
        return None

    def binding_qualified_name(self, binding: Binding, _depth: int = 0, noting: bool = True) -> str | None:
        if binding.kind == IMPORT:
            return binding.target if noting else binding.spelled_target
        if binding.kind in (DEF, CLASSDEF):
            return self.defined_name(binding.scope, binding.name)
        if binding.kind == ASSIGN and binding.value is not None and _depth < 8:
            if isinstance(binding.value, (ast.Name, ast.Attribute)):
                scope = binding.written_from or binding.scope
                resolved = self.qualified_name(binding.value, scope, _depth + 1, noting)
                if resolved is not None:
                    return resolved
        if binding.scope.kind == MODULE:
            return f"{self.name}.{binding.name}"
        return None

    def defined_name(self, scope: Scope, name: str) -> str:
        prefix = f"{self.name}.{scope.qualname}" if scope.qualname else self.name
        return f"{prefix}.{name}"

    def resolve_relative(self, module: str | None, level: int) -> str | None:
        if level == 0:
            return module
        parts = self.package.split(".") if self.package else []
        if level - 1 > len(parts):
            return None
        base = parts[: len(parts) - (level - 1)]
        if module:
            base.append(module)
        return ".".join(base) if base else None

    def iter_scopes(self) -> Iterator[Scope]:
        stack = [self.scope]
        while stack:
            scope = stack.pop()
            yield scope
            stack.extend(reversed(scope.children))


_Frame = tuple[ast.AST, Scope, bool]  # node, scope it is evaluated in, inside an except block


class _ScopeBuilder:
    """One iterative walk: create scopes, record bindings, calls and definitions."""

    def __init__(self, symbols: ModuleSymbols):
        self.symbols = symbols
        self.stack: list[_Frame] = []
        self.star: set[str] = set()  # modules star imports name
        self.binding: set[str] = set()  # modules imports that bind names name

    def run(self) -> None:
        module = self.symbols.scope
        self.push_all(self.symbols.tree.body, module, False)
        while self.stack:
            node, scope, in_handler = self.stack.pop()
            self.visit(node, scope, in_handler)
        self.symbols.read_when_bound = self.binding - self.star

    def imports(self, names: list[str], star: bool = False) -> dict[str, Any]:
        """Note the modules an import statement names (`imported`); the binding fields that make
        reading a name it binds note it (Binding.target). A star import binds no name of its
        own: what it brings is read whole (`star_target`), always a dependency."""
        self.symbols.imported.extend(names)
        if star:
            self.star.update(names)
            return {}
        self.binding.update(names)
        return {"statement_imports": tuple(names), "read_into": self.symbols.imports_read}

    def push_all(self, nodes: Sequence[ast.AST | None], scope: Scope, in_handler: bool) -> None:
        # reversed so that statements are visited in source order
        self.stack.extend((node, scope, in_handler) for node in reversed(nodes) if node is not None)

    def new_scope(self, kind: str, node: ast.AST, parent: Scope, name: str) -> Scope:
        if parent.kind == MODULE:
            qualname = name
        elif parent.kind == CLASS:
            qualname = f"{parent.qualname}.{name}"
        else:
            qualname = f"{parent.qualname}.<locals>.{name}"
        scope = Scope(kind, node, parent, qualname)
        parent.children.append(scope)
        self.symbols.scope_of[id(node)] = scope
        return scope

    def bind(self, scope: Scope, name: str, kind: str, node: ast.AST, in_handler: bool, **extra: Any) -> None:
        if name in scope.globals:
            target_scope = scope.module_scope
            target_scope.bind(Binding(name, kind, node, target_scope, in_handler=in_handler, written_from=scope, **extra))
            return
        if name in scope.nonlocals:
            enclosing = scope.parent
            while enclosing is not None and (not enclosing.is_function() or name not in enclosing.bindings):
                enclosing = enclosing.parent
            if enclosing is not None:
                enclosing.bind(Binding(name, kind, node, enclosing, in_handler=in_handler, written_from=scope, **extra))
                return
        scope.bind(Binding(name, kind, node, scope, in_handler=in_handler, **extra))

    def bind_target(
        self,
        target: ast.expr,
        value: ast.expr | None,
        scope: Scope,
        node: ast.AST,
        in_handler: bool,
        kind: str = ASSIGN,
        unpack: tuple[int, ...] = (),
    ) -> None:
        if isinstance(target, ast.Name):
            self.bind(scope, target.id, kind, node, in_handler, value=value, unpack=unpack)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = None
            if (
                kind == ASSIGN
                and isinstance(value, (ast.Tuple, ast.List))
                and len(value.elts) == len(target.elts)
                and not any(isinstance(v, ast.Starred) for v in value.elts)
            ):
                values = value.elts
            for index, element in enumerate(target.elts):
                if values is not None:
                    self.bind_target(element, values[index], scope, node, in_handler, ASSIGN)
                elif kind in (LOOP, UNPACK):
                    # `for i, layer in enumerate(self.layers)`: remember which element it is
                    self.bind_target(element, value, scope, node, in_handler, kind, (*unpack, index))
                elif kind == ASSIGN and value is not None:
                    # `blocks, width = self._build_stage(...)`: element `index` of what the call returns
                    self.bind_target(element, value, scope, node, in_handler, UNPACK, (*unpack, index))
                else:
                    self.bind_target(element, None, scope, node, in_handler, OTHER)
        elif isinstance(target, ast.Starred):
            self.bind_target(target.value, None, scope, node, in_handler, OTHER)

    def visit(self, node: ast.AST, scope: Scope, in_handler: bool) -> None:
        cls = node.__class__
        if cls is ast.Call:
            self.symbols.calls.append((node, scope))  # type: ignore[arg-type]  # `cls is ast.Call` checked it (cheaper than isinstance on this hot path)
        elif cls in _BINDING_NODES and self.visit_binding(node, scope, in_handler):
            return  # it pushed what it needs
        children: list[ast.AST] = []
        append_children(node, children)
        stack = self.stack
        for child in reversed(children):
            if child.__class__ not in _LEAF_NODES:
                stack.append((child, scope, in_handler))

    def visit_binding(self, node: ast.AST, scope: Scope, in_handler: bool) -> bool:
        """Record what a binding construct binds; True when it also pushed its children."""
        symbols = self.symbols
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.bind(scope, node.name, DEF, node, in_handler)
            symbols.functions.append((node, scope))
            inner = self.new_scope(FUNCTION, node, scope, node.name)
            self.bind_parameters(node.args, inner)
            self.push_all(node.body, inner, False)
            self.push_all(self.signature_expressions(node), scope, in_handler)
            return True
        if isinstance(node, ast.Lambda):
            inner = self.new_scope(LAMBDA, node, scope, "<lambda>")
            self.bind_parameters(node.args, inner)
            self.push_all([node.body], inner, False)
            self.push_all([*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]], scope, in_handler)
            return True
        if isinstance(node, ast.ClassDef):
            self.bind(scope, node.name, CLASSDEF, node, in_handler)
            symbols.classes.append((node, scope))
            inner = self.new_scope(CLASS, node, scope, node.name)
            self.push_all(node.body, inner, False)
            self.push_all([*node.decorator_list, *node.bases, *(k.value for k in node.keywords)], scope, in_handler)
            return True
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = self.new_scope(COMPREHENSION, node, scope, "<comprehension>")
            first, *rest = node.generators
            self.stack.append((first.iter, scope, in_handler))  # the first iterable runs outside
            for generator in node.generators:
                self.bind_target(generator.target, generator.iter, inner, generator, False, LOOP)
            elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            self.push_all([*elements, *first.ifs, *(x for g in rest for x in (g.iter, *g.ifs))], inner, False)
            return True
        if isinstance(node, ast.Import):
            for alias in node.names:
                noted = self.imports([symbols.import_name(alias.name)])
                if alias.asname:
                    module_name = symbols.import_name(alias.name)
                    self.bind(scope, alias.asname, IMPORT, node, in_handler, spelled_target=module_name, **noted)
                else:
                    head = alias.name.partition(".")[0]
                    module_name = symbols.import_name(head)
                    self.bind(scope, head, IMPORT, node, in_handler, spelled_target=module_name, **noted)
                symbols.bound_imports.append(module_name)
            return True
        if isinstance(node, ast.ImportFrom):
            base = symbols.resolve_relative(node.module, node.level or 0)
            if base and not node.level:
                base = symbols.import_name(base)
            named = [base] if base else []
            if base:
                named.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
            noted = self.imports(named, star=any(alias.name == "*" for alias in node.names))
            for alias in node.names:
                if alias.name == "*":
                    if base:
                        symbols.star_imports.append(base)
                    continue
                imported = f"{base}.{alias.name}" if base else None
                if imported:
                    symbols.bound_imports.append(imported)
                self.bind(scope, alias.asname or alias.name, IMPORT, node, in_handler, spelled_target=imported, **noted)
            return True
        if isinstance(node, ast.Global):
            scope.globals.update(node.names)
            return True
        if isinstance(node, ast.Nonlocal):
            scope.nonlocals.update(node.names)
            return True
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.bind_target(target, node.value if len(node.targets) == 1 else None, scope, node, in_handler)
        elif isinstance(node, ast.AnnAssign):
            if isinstance(node.target, ast.Name):
                if node.value is None:
                    self.bind(scope, node.target.id, ANNOTATION, node, in_handler, value=node.annotation)
                else:
                    self.bind(scope, node.target.id, ASSIGN, node, in_handler, value=node.value)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                self.bind(scope, node.target.id, OTHER, node, in_handler)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.bind_target(node.target, node.iter, scope, node, in_handler, LOOP)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self.bind_target(item.optional_vars, None, scope, node, in_handler, OTHER)
        elif isinstance(node, ast.ExceptHandler):
            if node.name:
                self.bind(scope, node.name, OTHER, node, True)
            self.push_all(node.body, scope, True)
            if node.type is not None:
                self.stack.append((node.type, scope, True))
            return True
        elif isinstance(node, ast.NamedExpr):
            target_scope = scope
            while target_scope.kind == COMPREHENSION and target_scope.parent is not None:
                target_scope = target_scope.parent
            if isinstance(node.target, ast.Name):
                self.bind(target_scope, node.target.id, ASSIGN, node, in_handler, value=node.value)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)):
            if node.name:
                self.bind(scope, node.name, OTHER, node, in_handler)
        elif isinstance(node, ast.MatchMapping):
            if node.rest:
                self.bind(scope, node.rest, OTHER, node, in_handler)
        return False

    @staticmethod
    def signature_expressions(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
        args = node.args
        parts: list[ast.AST] = [*node.decorator_list, *args.defaults]
        parts.extend(d for d in args.kw_defaults if d is not None)
        return parts

    def bind_parameters(self, args: ast.arguments, scope: Scope) -> None:
        everything = [*positional_parameters(args), *args.kwonlyargs]
        if args.vararg:
            everything.append(args.vararg)
        if args.kwarg:
            everything.append(args.kwarg)
        for arg in everything:
            scope.bind(Binding(arg.arg, PARAM, arg, scope, value=arg.annotation))


def display_name(scope: Scope) -> str:
    """`Block.forward`, `create_custom_forward.custom_forward`, `<lambda>`."""
    return scope.qualname.replace("<locals>.", "") or "<module>"
