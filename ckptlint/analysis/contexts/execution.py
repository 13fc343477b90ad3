"""How each checkpoint call runs: under `torch.compile` (and with which `fullgraph`), with
Dynamo's side-effect flag, under a selective-checkpoint policy, under an offloading hook.

The same hazard behaves differently there (measured on torch 2.14 CPU; docs/regions.md):
compile runs every region non-reentrant and keeps RNG state, rejects a region's Python side
effects with `fullgraph=True` and graph-breaks (the region runs eager) without it, skips them
at recompute with `torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True`;
a selective-checkpoint policy keeps the outputs of the ops it saves. `ExecutionContexts.of`
says which of those hold for a call, statically, with where each was seen.

Where a context is seen:

- **compile**: `@torch.compile` / `@torch.compile(...)` on a function enclosing the call;
  `torch.compile(X, ...)` and `X.compile(...)` where X is a module whose class (or a class it
  builds, transitively: semantics/modules.py) holds the call or is the module a wrapper
  checkpoints, or a function (decorated or passed) whose body calls such a module. Searched in
  the call's module and in the project's files that mention a context word and name the
  call's module (its file stem) or sit in its directory (`context_files`, from the engine).
- **the side-effect flag**: `torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint
  = True` anywhere in the project's files that mention it (it is global configuration).
- **SAC**: the call's `context_fn` (sac_policy.py: op lists and simple predicate policies).
- **offload**: `with torch.autograd.graph.save_on_cpu(...)` / `saved_tensors_hooks(...)`
  around the call, or around a call of a module that holds it, in the files above.

Computed lazily, per call and once per analysis state; files are read only when a call asks
and one of them mentions a context word. What is read besides the analysed module is its
dependency (recorded with `Project.consult`).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.values import ClassType, ContainerType, Types
from ckptlint.calls import CheckpointCall
from ckptlint.classes import ClassIndex
from ckptlint.context_prefilter import (
    COMPILE_WORD,
    FLAG_WORD,
    OFFLOAD_WORDS,
    ContextFiles,
    context_stem,
)
from ckptlint.project import Project, import_root
from ckptlint.sac_policy import EVERY_OP, policy_saved_ops
from ckptlint.symbols import IMPORT, ModuleSymbols, Scope
from ckptlint.syntax import keyword_value, own_nodes

COMPILE = "torch.compile"
SKIP_SIDE_EFFECTS = "torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint"
OFFLOAD_HOOKS = {
    "torch.autograd.graph.save_on_cpu": "save_on_cpu",
    "torch.autograd.graph.saved_tensors_hooks": "saved_tensors_hooks",
}

# evidence facts
COMPILED = "compile"
SIDE_EFFECT_FLAG = "side-effect flag"
SAC = "selective checkpointing"
OFFLOAD = "offload"


@dataclass(frozen=True, order=True)
class Evidence:
    """Where one fact of a context was seen: `torch.compile(model, fullgraph=True)` at train.py:12."""

    fact: str  # COMPILED, SIDE_EFFECT_FLAG, SAC, OFFLOAD
    path: str
    line: int
    spelling: str  # what the code says, shortened

    def describe(self) -> str:
        return f"{self.spelling} at {self.path}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"fact": self.fact, "path": self.path, "line": self.line, "spelling": self.spelling}


@dataclass(frozen=True)
class ExecutionContext:
    """How one checkpoint call runs, as far as the code says. The defaults are plain eager."""

    compiled: bool = False
    fullgraph: bool | None = None  # None: not compiled, or not a literal (or compiled both ways)
    skips_side_effects: bool = False  # the project sets Dynamo's skip-side-effects flag
    sac_saved_ops: frozenset[str] | None = None  # None: no selective-checkpoint policy; EVERY_OP: all
    offload: str | None = None  # save_on_cpu / saved_tensors_hooks around it
    evidence: tuple[Evidence, ...] = ()
    # whether compile traces a Python random draw once (torch >= 2.14) rather than refusing it
    # (2.13: rejected with fullgraph=True, a graph break without; docs/contexts.md); None: unknown
    traces_random_draws: bool | None = None

    @property
    def eager(self) -> bool:
        """Nothing but plain eager checkpointing (the side-effect flag alone changes nothing)."""
        return not self.compiled and self.sac_saved_ops is None and self.offload is None

    @property
    def saves_every_op(self) -> bool:
        return self.sac_saved_ops is not None and EVERY_OP in self.sac_saved_ops

    def describe(self) -> str:
        """`under torch.compile(fullgraph=True) at train.py:5 with the side-effect flag at
        train.py:4, SAC saving aten.mm` ("eager" when nothing applies); every place is in `evidence`."""
        parts: list[str] = []
        for fact in (COMPILED, SIDE_EFFECT_FLAG, SAC, OFFLOAD):
            seen = [e for e in self.evidence if e.fact == fact]
            if not seen or (fact == SIDE_EFFECT_FLAG and not self.compiled):
                continue
            words = _fact_words(fact, self)
            if fact != SAC:  # the policy is at the call or its wrapper: its place is in the JSON
                words += f" at {seen[0].path}:{seen[0].line}" + (f" (+{len(seen) - 1} more)" if len(seen) > 1 else "")
            parts.append(words)
        if not parts:
            return "eager"
        if self.compiled and self.skips_side_effects:
            parts[0:2] = [parts[0] + " with " + parts[1]]
        return "under " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "compiled": self.compiled,
            "fullgraph": self.fullgraph,
            "skips_side_effects": self.skips_side_effects,
            "sac_saved_ops": sorted(self.sac_saved_ops) if self.sac_saved_ops is not None else None,
            "offload": self.offload,
            "evidence": [e.to_dict() for e in self.evidence],
            "traces_random_draws": self.traces_random_draws,
        }


EAGER = ExecutionContext()


def _fact_words(fact: str, context: ExecutionContext) -> str:
    if fact == COMPILED:
        return "torch.compile" + {True: "(fullgraph=True)", False: "(fullgraph=False)", None: ""}[context.fullgraph]
    if fact == SIDE_EFFECT_FLAG:
        return "the side-effect flag"
    if fact == SAC:
        ops = context.sac_saved_ops or frozenset()
        if EVERY_OP in ops:
            return "SAC saving every op"
        return "SAC saving " + ", ".join(sorted(ops)) if ops else "SAC saving no op known here"
    return context.offload or "offload"


@dataclass(frozen=True)
class _Reach:
    """What one compile or offload spelling covers: module classes (with their bases) whose
    methods run under it, and the function bodies it encloses directly."""

    evidence: Evidence
    classes: frozenset[str]  # qualified names of the classes (and their project bases) that run under it
    functions: frozenset[int]  # id() of defs it encloses (a decorated or compiled function)
    fullgraph: bool | None = None


@dataclass
class _ModuleFacts:
    compiles: list[_Reach] = field(default_factory=list)
    offloads: list[_Reach] = field(default_factory=list)
    flag: Evidence | None = None


class ExecutionContexts:
    """`of(call)`: the execution context of each checkpoint call, once per analysis state."""

    def __init__(self, project: Project, inference: TypeInference, context_files: ContextFiles = ()):
        self.project = project
        self.inference = inference
        self.classes: ClassIndex = inference.classes
        self.context_files = context_files  # (absolute path, the context words it mentions)
        self._by_call: dict[int, tuple[ExecutionContext, dict[str, str]]] = {}  # the context, the files read for it
        self._reading: dict[str, str] = {}  # the files read for the call being worked out (`of`)
        self._facts: dict[str, _ModuleFacts] = {}  # by module path
        self._words: dict[str, frozenset[bytes]] = {}
        self._flags: dict[Path, list[Evidence]] = {}  # by import root

    # -- the API -------------------------------------------------------------------------

    def of(self, call: CheckpointCall) -> ExecutionContext:
        """Memoised with the files it read, which every analysis that asks records again (the
        call of one file is asked about by the analyses of others)."""
        found = self._by_call.get(id(call.node))
        if found is None:
            self._reading = {}  # filled by `_load`, which only `_context` reaches
            found = self._by_call[id(call.node)] = (self._context(call), self._reading)
        self.project.consult(call.module.source.path, found[1])
        return found[0]

    # -- one call ------------------------------------------------------------------------

    def _context(self, call: CheckpointCall) -> ExecutionContext:
        evidence: list[Evidence] = []
        saved = self._saved_ops(call, evidence)
        modules = list(self._modules_for(call))
        if saved is None and not modules:
            return EAGER  # no file that could compile or hook it, no policy: nothing more to read
        compiles: list[_Reach] = []
        offloads: list[_Reach] = []
        if modules:
            owners = self._owners(call)
            functions = self._enclosing_functions(call)
            for facts in modules:
                compiles.extend(r for r in facts.compiles if _covers(r, owners, functions))
                offloads.extend(r for r in facts.offloads if _covers(r, owners, functions))
            offloads.extend(self._enclosing_offloads(call))
        compiled = bool(compiles)
        fullgraph: bool | None = None
        if compiled:
            graphs = {r.fullgraph for r in compiles}
            fullgraph = graphs.pop() if len(graphs) == 1 else (False if False in graphs and None not in graphs else None)
        evidence.extend(r.evidence for r in sorted(compiles, key=lambda r: r.evidence))
        flags = self._flag_evidence(call.module) if compiled else []
        evidence.extend(flags[:1])
        evidence.extend(r.evidence for r in sorted(offloads, key=lambda r: r.evidence))
        offload = sorted({r.evidence.spelling.split("(")[0].rsplit(".", 1)[-1] for r in offloads})
        return ExecutionContext(
            compiled=compiled,
            fullgraph=fullgraph,
            skips_side_effects=bool(flags),
            sac_saved_ops=saved,
            offload=offload[0] if offload else None,
            evidence=tuple(evidence),
            traces_random_draws=_traces_random_draws(call) if compiled else None,
        )

    def _saved_ops(self, call: CheckpointCall, evidence: list[Evidence]) -> frozenset[str] | None:
        context_fn = call.keyword("context_fn")
        if context_fn is None:
            return None
        saved = policy_saved_ops(context_fn.value, context_fn.module)
        if saved is not None:
            module = context_fn.module
            evidence.append(Evidence(SAC, module.source.display_path, context_fn.node.lineno, _spelling(context_fn.value, "context_fn=")))
        return saved

    def _owners(self, call: CheckpointCall) -> frozenset[str]:
        """The classes whose instances run the call: its enclosing class, a layer class itself,
        and the module classes a wrapper checkpoints (`checkpoint_wrapper(Block(...))`)."""
        found: set[str] = set()
        if isinstance(call.node, ast.ClassDef):
            info = self.classes.info(call.module, call.module.scope_of[id(call.node)])
            found.add(info.qualified_name)
        else:
            owner = self.classes.enclosing_class(call.module, call.scope)
            if owner is not None:
                found.add(owner.qualified_name)
            if isinstance(call.region, ast.expr):
                found.update(t.name for t in self.inference.types(call.region, call.module, call.scope) if isinstance(t, ClassType))
        return frozenset(found)

    @staticmethod
    def _enclosing_functions(call: CheckpointCall) -> frozenset[int]:
        found: set[int] = set()
        scope: Scope | None = call.scope
        while scope is not None:
            if isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.add(id(scope.node))
            scope = scope.parent
        return frozenset(found)

    def _enclosing_offloads(self, call: CheckpointCall) -> Iterator[_Reach]:
        """`with save_on_cpu():` around the call in the function (or module) that makes it."""
        module = call.module
        if not any(word in module.source.code for word in OFFLOAD_WORDS):
            return
        line = call.line
        scope: Scope | None = call.scope
        while scope is not None:
            body = _own_nodes(scope)
            for node in body:
                if isinstance(node, (ast.With, ast.AsyncWith)) and node.lineno < line <= (node.end_lineno or 0):
                    for item in node.items:
                        hook = self._offload_hook(item.context_expr, module, scope)
                        if hook is not None:
                            yield _Reach(Evidence(OFFLOAD, module.source.display_path, node.lineno, _spelling(item.context_expr)), frozenset(), frozenset())
            scope = scope.parent

    # -- where to look -------------------------------------------------------------------

    def _modules_for(self, call: CheckpointCall) -> Iterator[_ModuleFacts]:
        """The facts of the call's module and of the context files that can name it."""
        module = call.module
        own = module.source.path
        if COMPILE_WORD in module.source.code or any(word in module.source.code for word in OFFLOAD_WORDS):
            yield self._module_facts(module)
        if not self.context_files:
            return
        stem = context_stem(own)
        directory = os.path.dirname(os.path.abspath(own))
        for path, words in self.context_files:
            if os.path.abspath(path) == os.path.abspath(own) or not (words & (OFFLOAD_WORDS | {COMPILE_WORD})):
                continue
            if os.path.dirname(os.path.abspath(path)) != directory and stem.encode() not in self._file_words(path):
                continue
            other = self._load(path)
            if other is not None:
                yield self._module_facts(other)

    def _file_words(self, path: str) -> frozenset[bytes]:
        """The file's words, read once, as bytes (decoding every word cost more than reading)."""
        found = self._words.get(path)
        if found is None:
            try:
                found = self.project.file_words(path)
            except OSError:
                found = frozenset()
            self._words[path] = found
        return found

    def _load(self, path: str) -> ModuleSymbols | None:
        try:
            loaded = self.project.load(Path(path))
        except OSError:
            return None
        if loaded.library:
            return None
        self._reading[os.fspath(loaded.path)] = loaded.digest  # recorded by `of`; one that does not parse too
        return loaded.symbols

    def _flag_evidence(self, module: ModuleSymbols) -> list[Evidence]:
        """Every `...skip_fwd_side_effects_in_bwd_under_checkpoint = True` in the project's
        files under the module's import root (the program that imports it; a sibling project in
        the same tree runs in another process)."""
        root = import_root(Path(module.source.path))
        found = self._flags.get(root)
        if found is None:
            found = []
            for path, words in self.context_files:
                if FLAG_WORD in words and import_root(Path(path)) == root:
                    flag_module = self._load(path)
                    flag = self._module_facts(flag_module).flag if flag_module is not None else None
                    if flag is not None:
                        found.append(flag)
            found = self._flags[root] = sorted(found)
        else:  # what was read is this file's dependency too, flag or none: a file may set it later
            for path, words in self.context_files:
                if FLAG_WORD in words and import_root(Path(path)) == root:
                    self._load(path)
        return found

    # -- one module's spellings ----------------------------------------------------------

    def _module_facts(self, module: ModuleSymbols) -> _ModuleFacts:
        path = module.source.path
        found = self._facts.get(path)
        if found is None:
            found = self._facts[path] = self._read_module(module)
        return found

    def _read_module(self, module: ModuleSymbols) -> _ModuleFacts:
        facts = _ModuleFacts()
        text = module.source.code
        display = module.source.display_path
        if FLAG_WORD in text:
            facts.flag = self._flag_in(module)
        if COMPILE_WORD in text:
            for scope in module.iter_scopes():
                node = scope.node
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for decorator in node.decorator_list:
                        call = decorator if isinstance(decorator, ast.Call) else None
                        name = module.qualified_name(call.func if call is not None else decorator, scope.parent or scope)
                        if name == COMPILE:
                            evidence = Evidence(COMPILED, display, decorator.lineno, "@" + _spelling(decorator))
                            facts.compiles.append(self._function_reach(evidence, node, module, scope, _fullgraph(call)))
            aliases = _compile_aliases(module)
            for call, scope in module.calls:
                func = call.func  # only `.compile` attributes and names imported as torch.compile are resolved
                if (func.__class__ is ast.Attribute and func.attr == COMPILE_WORD) or (func.__class__ is ast.Name and func.id in aliases):
                    reach = self._compile_reach(call, module, scope)
                    if reach is not None:
                        facts.compiles.append(reach)
        if any(word in text for word in OFFLOAD_WORDS):
            for scope in module.iter_scopes():
                for node in _own_nodes(scope):
                    if isinstance(node, (ast.With, ast.AsyncWith)):
                        for item in node.items:
                            if self._offload_hook(item.context_expr, module, scope) is not None:
                                evidence = Evidence(OFFLOAD, display, node.lineno, _spelling(item.context_expr))
                                facts.offloads.append(self._body_reach(evidence, node.body, module, scope, None))
        return facts

    def _flag_in(self, module: ModuleSymbols) -> Evidence | None:
        for scope in module.iter_scopes():
            nodes = _own_nodes(scope)
            for node in nodes:
                if not isinstance(node, ast.Assign) or not (isinstance(node.value, ast.Constant) and node.value.value is True):
                    continue
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and module.qualified_name(target, scope) == SKIP_SIDE_EFFECTS:
                        return Evidence(SIDE_EFFECT_FLAG, module.source.display_path, node.lineno, _spelling(target) + " = True")
        return None

    def _compile_reach(self, call: ast.Call, module: ModuleSymbols, scope: Scope) -> _Reach | None:
        """`torch.compile(X, ...)` or `X.compile(...)`: what X runs. A `.compile` of something
        that is not a module of a known class (`re.compile`, a local `compile`) reaches nothing."""
        func = call.func
        if isinstance(func, (ast.Name, ast.Attribute)) and module.qualified_name(func, scope) == COMPILE:
            target = call.args[0] if call.args else keyword_value(call, "model")
        elif isinstance(func, ast.Attribute) and func.attr == COMPILE_WORD:
            target = func.value  # `model.compile()`; `re.compile(...)` has no module type and reaches nothing
        else:
            return None
        if target is None:
            return None
        evidence = Evidence(COMPILED, module.source.display_path, call.lineno, _spelling(call))
        fullgraph = _fullgraph(call)
        function = self._function_node(target, module, scope)
        if function is not None:
            return self._function_reach(evidence, function, module, module.scope_of.get(id(function), scope), fullgraph)
        classes = self._module_classes(self.inference.types(target, module, scope))
        return _Reach(evidence, classes, frozenset(), fullgraph) if classes else None

    def _function_node(self, target: ast.expr, module: ModuleSymbols, scope: Scope) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        if isinstance(target, ast.Name):
            binding = module.binding(scope, target.id, target.lineno)
            if binding is not None and isinstance(binding.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return binding.node
        return None

    def _function_reach(
        self, evidence: Evidence, node: ast.FunctionDef | ast.AsyncFunctionDef, module: ModuleSymbols, scope: Scope, fullgraph: bool | None
    ) -> _Reach:
        """A compiled function: its own checkpoint calls, and the modules its body calls."""
        reach = self._body_reach(evidence, node.body, module, scope, fullgraph)
        return _Reach(evidence, reach.classes, frozenset({id(node)}), fullgraph)

    def _body_reach(self, evidence: Evidence, body: list[ast.stmt], module: ModuleSymbols, scope: Scope, fullgraph: bool | None) -> _Reach:
        """The module classes the calls in `body` run (`model(x)`, `self.block(x)`)."""
        types: set[ClassType | ContainerType] = set()
        for statement in body:
            for node in ast.walk(statement):
                if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                    callee = node.func.value if isinstance(node.func, ast.Attribute) and node.func.attr in ("forward", "__call__") else node.func
                    types.update(t for t in self.inference.types(callee, module, scope) if isinstance(t, (ClassType, ContainerType)))
        functions = frozenset(id(n) for statement in body for n in ast.walk(statement) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
        return _Reach(evidence, self._module_classes(frozenset(types)), functions, fullgraph)

    def _module_classes(self, types: Types) -> frozenset[str]:
        """The project classes `types` are instances of, those they build (transitively), and
        every project base of them (a base's method runs for a subclass's instance)."""
        roots = frozenset(t for t in types if isinstance(t, (ClassType, ContainerType)))
        if not roots:
            return frozenset()
        reached = roots | self.inference.construction.descendants(self.inference, roots)
        names: set[str] = set()
        for item in reached:
            if not isinstance(item, ClassType):
                continue
            info = self.classes.by_name(item.name)
            if info is None:
                continue
            names.update(cls.qualified_name for cls in self.classes.mro(info))
            names.add(item.name)
        return frozenset(names)

    def _offload_hook(self, expr: ast.expr, module: ModuleSymbols, scope: Scope) -> str | None:
        if isinstance(expr, ast.Call) and isinstance(expr.func, (ast.Name, ast.Attribute)):
            return OFFLOAD_HOOKS.get(module.qualified_name(expr.func, scope) or "")
        return None


TRACES_RANDOM_DRAWS_SINCE = (2, 14)


def _traces_random_draws(call: CheckpointCall) -> bool | None:
    """From the torch version the code runs with (versions.py), when every version it allows agrees."""
    torch = call.versions.get("torch")
    if torch is None:
        return None
    if torch.within(TRACES_RANDOM_DRAWS_SINCE, None):
        return True
    if torch.within(None, TRACES_RANDOM_DRAWS_SINCE):
        return False
    return None


def _own_nodes(scope: Scope) -> list[ast.AST]:
    """The nodes of a module's, class's or def's own statements (not of those nested in it);
    nothing for a lambda or a comprehension, which hold no statements."""
    if isinstance(scope.node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return own_nodes(scope.node)
    return []


def _compile_aliases(module: ModuleSymbols) -> frozenset[str]:
    """Names a module binds to `torch.compile` by import (`from torch import compile as tc`)."""
    return frozenset(
        name for scope in module.iter_scopes() for name, bindings in scope.bindings.items() for b in bindings if b.kind == IMPORT and b.spelled_target == COMPILE
    )


def _covers(reach: _Reach, owners: frozenset[str], functions: frozenset[int]) -> bool:
    return bool(reach.classes & owners) or bool(reach.functions & functions)


def _fullgraph(call: ast.Call | None) -> bool | None:
    """`fullgraph=` of a compile call: torch's default False when not given; None when not a literal."""
    if call is None:
        return False
    value = keyword_value(call, "fullgraph")
    if value is None:
        return False
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, bool) else None


def _spelling(node: ast.AST, prefix: str = "") -> str:
    text = prefix + ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."
