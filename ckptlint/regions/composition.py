"""Where a checkpointed model meets the code around it: DDP, `autograd.grad`, `torch.func`,
Hugging Face's enabling calls (CKP303-CKP305).

These hazards are not in what a region does but in how its model is used: wrapped by
`DistributedDataParallel(find_unused_parameters=True)`, differentiated by `autograd.grad`
or a `torch.func` transform, or switched to reentrant checkpointing by Hugging Face on a
model whose embeddings give no gradient. Each is a short chain of facts inside one
function (a model built from a project class, then wrapped or differentiated); a finding
needs every link known, so an unknown model, a mode read from a variable or a chain that
leaves the function is silent.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable, Iterator

from ckptlint.calls import CallFinder, CheckpointCall
from ckptlint.catalogue import LAYER_CLASS
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.modes import hugging_face_enabling_default
from ckptlint.regions.inference import TypeInference
from ckptlint.regions.values import ClassType, Types
from ckptlint.symbols import ASSIGN, DEF, UNPACK, ModuleSymbols, Scope
from ckptlint.versions import Versions

DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
AUTOGRAD_GRAD = frozenset({"torch.autograd.grad"})
AUTOGRAD_BACKWARD = frozenset({"torch.autograd.backward"})
# function transforms: True when they fail on any checkpointed region (torch 2.13: "don't yet support
# saved tensor hooks" for non-reentrant), False when only reentrant regions fail (jacfwd and jvp
# work non-reentrant; torch.autograd.functional differentiates with autograd.grad)
_FUNC = {"grad": True, "grad_and_value": True, "vjp": True, "jacrev": True, "hessian": True, "jacfwd": False, "jvp": False}
FUNCTION_TRANSFORMS: dict[str, bool] = {
    **{f"{package}.{name}": fails for package in ("torch.func", "functorch") for name, fails in _FUNC.items()},
    **{f"torch.autograd.functional.{name}": False for name in ("jacobian", "hessian", "vjp", "jvp", "hvp", "vhp")},
}
HF_MODEL_PACKAGES = ("transformers.", "peft.")
INPUT_GRAD_PREPARERS = frozenset({"enable_input_require_grads", "prepare_model_for_kbit_training", "prepare_model_for_int8_training"})
# parts of a model that hold its checkpointed layers (unfreezing one of them after freezing the whole model)
LAYER_PARTS = frozenset({"layers", "layer", "h", "blocks", "block", "encoder", "decoder", "transformer", "model"})
MAX_FLOW = 64  # expressions followed back from a differentiated tensor


@dataclass(frozen=True)
class ModelHazard:
    """A call (DDP, a differentiation) whose model or tensor reaches checkpoint calls."""

    node: ast.Call
    what: str  # the callee as written: `torch.autograd.grad`, `.backward(inputs=...)`, `torch.func.grad`
    checkpoints: tuple[CheckpointCall, ...]
    model: str  # the model class, or "" when the checkpoint call is in the same function
    every_mode: bool = False  # a transform that fails on non-reentrant regions too


@dataclass(frozen=True)
class EnablingHazard:
    """A Hugging Face enabling call in reentrant mode on a model whose inputs give no gradient."""

    node: ast.Call
    what: str  # `model.gradient_checkpointing_enable()` or `TrainingArguments(gradient_checkpointing=True)`
    why: str  # `wrapped by get_peft_model at line 12`, `embeddings frozen at line 9`
    mode: str  # how the mode was decided (the version caveat lives here)
    fixable: bool  # no gradient_checkpointing_kwargs given: the fix can add them


def hf_enabling_reentrant(
    keywords: dict[str, ast.expr], versions: Versions, positional: ast.expr | None = None
) -> tuple[bool | None, str]:
    """Whether a Hugging Face enabling call checkpoints reentrantly, and why (for the message).

    The one place that decides it: `gradient_checkpointing_kwargs={"use_reentrant": ...}` given
    literally decides; omitted (or `None`, or a dict without the key), transformers before its
    5.x line uses `use_reentrant=True`, 5.x does not; until the detected version is known here,
    omitted counts as reentrant and the message says so. A variable: unknown (None)."""
    value = keywords.get("gradient_checkpointing_kwargs", positional)
    chosen = hugging_face_enabling_default(versions)  # the detected transformers version decides (modes.py)
    default = (chosen.reentrant, f"{chosen.describe()} (gradient_checkpointing_kwargs not given)")
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return default
    if isinstance(value, ast.Dict):
        for key, item in zip(value.keys, value.values):
            if isinstance(key, ast.Constant) and key.value == "use_reentrant":
                if isinstance(item, ast.Constant) and item.value in (True, False):
                    return bool(item.value), f"use_reentrant={item.value} in gradient_checkpointing_kwargs"
                return None, ""
            if key is None:
                return None, ""  # `{**other}` may carry it
        return chosen.reentrant, f"{chosen.describe()} (gradient_checkpointing_kwargs without use_reentrant)"
    return None, ""


class Composition:
    """The CKP303-CKP305 facts of one module, read through the run's shared analysis state."""

    def __init__(self, module: ModuleSymbols, calls: list[CheckpointCall], finder: CallFinder, inference: TypeInference):
        self.module = module
        self.calls = calls
        self.finder = finder
        self.inference = inference
        self.classes: ClassIndex = inference.classes
        self._by_node = {id(call.node): call for call in calls}
        self._class_calls: dict[int, list[CheckpointCall]] = {}  # class scope -> its checkpoint calls
        self._module_calls: dict[int, list[CheckpointCall]] = {id(module): calls}

    # -- CKP303 -----------------------------------------------------------------------------

    def ddp_wrappings(self) -> Iterator[ModelHazard]:
        """`DistributedDataParallel(model, find_unused_parameters=True)` around a model whose
        code checkpoints reentrantly."""
        for call, scope in self.module.calls:
            if self._name(call.func, scope) not in DDP or not _keyword_is(call, "find_unused_parameters", True):
                continue
            model = call.args[0] if call.args else _keyword(call, "module")
            if model is None:
                continue
            types = self.inference.types(model, self.module, scope)
            checkpoints, name = self._model_checkpoints(types, reentrant_only=True)
            if checkpoints:
                yield ModelHazard(call, "DistributedDataParallel", checkpoints, name)

    # -- CKP304 -----------------------------------------------------------------------------

    def differentiations(self) -> Iterator[ModelHazard]:
        """`autograd.grad`, `backward(inputs=...)` and `torch.func` transforms over checkpointed work."""
        for call, scope in self.module.calls:
            name = self._name(call.func, scope)
            if name in AUTOGRAD_GRAD or name in AUTOGRAD_BACKWARD:
                if name in AUTOGRAD_BACKWARD and _keyword(call, "inputs") is None and len(call.args) < 3:
                    continue
                differentiated = call.args[0] if call.args else _keyword(call, "outputs" if name in AUTOGRAD_GRAD else "tensors")
                what = name
            elif isinstance(call.func, ast.Attribute) and call.func.attr == "backward" and _keyword(call, "inputs") is not None:
                differentiated, what = call.func.value, ".backward(inputs=...)"
            elif name in FUNCTION_TRANSFORMS:
                function = call.args[0] if call.args else _keyword(call, "func")
                if function is None:
                    continue
                every_mode = FUNCTION_TRANSFORMS[name]
                checkpoints, model = self._function_checkpoints(function, scope, reentrant_only=not every_mode)
                if checkpoints:
                    yield ModelHazard(call, name, checkpoints, model, every_mode)
                continue
            else:
                continue
            if differentiated is None:
                continue
            checkpoints, model = self._flow_checkpoints(differentiated, scope, reentrant_only=True)
            if checkpoints:
                yield ModelHazard(call, what, checkpoints, model)

    def _flow_checkpoints(self, expr: ast.AST, scope: Scope, reentrant_only: bool) -> tuple[tuple[CheckpointCall, ...], str]:
        """Checkpoint calls a tensor is computed from, followed back through the names of its
        function: a checkpoint call in the function, or a call of a model that checkpoints."""
        found: list[CheckpointCall] = []
        model = ""
        for call in self._calls_flowing_into(expr, scope):
            own = self._by_node.get(id(call))
            if own is not None:
                if _counts(own, reentrant_only):
                    found.append(own)
                continue
            callee = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr == "forward" else call.func
            if isinstance(callee, (ast.Name, ast.Attribute)):
                checkpoints, name = self._model_checkpoints(self.inference.types(callee, self.module, scope), reentrant_only)
                if checkpoints:
                    found.extend(checkpoints)
                    model = model or name
        return _unique(found), model

    def _calls_flowing_into(self, expr: ast.AST, scope: Scope) -> Iterator[ast.Call]:
        """Every call in `expr` and in the values its names were last bound to in `scope`."""
        stack: list[ast.AST] = [expr]
        seen: set[int] = set()
        while stack and len(seen) < MAX_FLOW:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for child in ast.walk(node):
                if isinstance(child, ast.Call):
                    yield child
                elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                    binding = self.module.binding(scope, child.id, child.lineno)
                    if binding is not None and binding.scope is scope and binding.kind in (ASSIGN, UNPACK) and binding.value is not None:
                        stack.append(binding.value)

    def _function_checkpoints(self, function: ast.expr, scope: Scope, reentrant_only: bool) -> tuple[tuple[CheckpointCall, ...], str]:
        """Checkpoint calls a function handed to a transform runs: a lambda's body, a def's
        calls (nested functions aside), or a model passed itself."""
        if isinstance(function, ast.Lambda):
            inner = self.module.scope_of.get(id(function))
            return self._flow_checkpoints(function.body, inner or scope, reentrant_only)
        if isinstance(function, ast.Name):
            binding = self.module.binding(scope, function.id, function.lineno)
            if binding is not None and binding.kind == DEF:
                inner = self.module.scope_of.get(id(binding.node))
                if inner is None:
                    return (), ""
                found: list[CheckpointCall] = []
                model = ""
                for statement in _own_statements(binding.node):
                    checkpoints, name = self._flow_checkpoints(statement, inner, reentrant_only)
                    found.extend(checkpoints)
                    model = model or name
                return _unique(found), model
        if isinstance(function, (ast.Name, ast.Attribute)):
            return self._model_checkpoints(self.inference.types(function, self.module, scope), reentrant_only)
        return (), ""

    # -- models -----------------------------------------------------------------------------

    def _model_checkpoints(self, types: Types, reentrant_only: bool) -> tuple[tuple[CheckpointCall, ...], str]:
        """The checkpoint calls in the methods of a model's project classes and of the modules
        it registers (each class with its bases), and the model's class name."""
        roots = [t for t in types if isinstance(t, ClassType) and not t.built_by]
        if not roots:
            return (), ""
        reached = frozenset(roots) | self.inference.construction.descendants(self.inference, frozenset(roots))
        found: list[CheckpointCall] = []
        for item in sorted((t for t in reached if isinstance(t, ClassType)), key=lambda t: t.name):
            info = self.classes.by_name(item.name)
            if info is None:
                continue
            for cls in self.classes.mro(info):
                found.extend(call for call in self._checkpoints_in_class(cls) if _counts(call, reentrant_only))
        return _unique(found), sorted(t.short for t in roots)[0] if found else ""

    def _checkpoints_in_class(self, info: ClassInfo) -> list[CheckpointCall]:
        key = id(info.scope)
        cached = self._class_calls.get(key)
        if cached is None:
            cached = [
                call
                for call in self._calls_of(info.module)
                if not isinstance(call.node, ast.ClassDef) and _enclosing_class_scope(call.scope) is info.scope
            ]
            self._class_calls[key] = cached
        return cached

    def _calls_of(self, module: ModuleSymbols) -> list[CheckpointCall]:
        """A module's checkpoint calls, found without changing the names the run resolves with."""
        cached = self._module_calls.get(id(module))
        if cached is None:
            if module.library:
                cached = []
            else:
                names, own = self.finder.names.copy(), module.checkpoint_names
                try:
                    cached = self.finder.checkpoint_calls(module)
                finally:
                    self.finder.names, module.checkpoint_names = names, own
            self._module_calls[id(module)] = cached
        return cached

    # -- CKP305 -----------------------------------------------------------------------------

    def hf_enablings(self) -> Iterator[EnablingHazard]:
        """Reentrant Hugging Face gradient checkpointing of a PEFT-wrapped or frozen model, in a
        function that never makes the inputs require grad."""
        by_function: dict[int, list[tuple[ast.Call, Scope]]] = {}
        for call, scope in self.module.calls:
            by_function.setdefault(id(_function_scope(scope)), []).append((call, scope))
        for calls in by_function.values():
            yield from self._function_enablings(calls)

    def _function_enablings(self, calls: list[tuple[ast.Call, Scope]]) -> Iterator[EnablingHazard]:
        if any(_callee_leaf(call.func) in INPUT_GRAD_PREPARERS for call, _ in calls):
            return
        for call, scope in calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "gradient_checkpointing_enable":
                names = self._hf_model_names(func.value, scope)
                if not names:
                    continue
                keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
                if any(k.arg is None for k in call.keywords):
                    continue
                reentrant, mode = hf_enabling_reentrant(keywords, self.finder.versions, call.args[0] if call.args else None)
                why = self._no_input_grad(names, scope, calls) if reentrant else None
                if why is not None:
                    text = f"{ast.unparse(func)}()"
                    yield EnablingHazard(call, text, why, mode, "gradient_checkpointing_kwargs" not in keywords and not call.args)
            elif _callee_leaf(func) == "TrainingArguments" and (self._name(func, scope) or "").startswith("transformers.") and _keyword_is(call, "gradient_checkpointing", True):
                if any(k.arg is None for k in call.keywords):
                    continue
                keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
                reentrant, mode = hf_enabling_reentrant(keywords, self.finder.versions)
                if not reentrant:
                    continue
                for names in self._function_hf_models(calls):
                    why = self._no_input_grad(names, scope, calls)
                    if why is not None:
                        yield EnablingHazard(call, "TrainingArguments(gradient_checkpointing=True)", why, mode, "gradient_checkpointing_kwargs" not in keywords)
                        break

    def _hf_model_names(self, receiver: ast.expr, scope: Scope) -> frozenset[str]:
        """The names a Hugging Face or PEFT model goes by in this function, when `receiver` is
        one: a name bound to `*.from_pretrained(...)` of transformers or peft, or to a PEFT wrap;
        the names it was wrapped from join it."""
        if not isinstance(receiver, ast.Name):
            return frozenset()
        names: set[str] = set()
        stack = [receiver.id]
        known = False
        while stack:
            name = stack.pop()
            if name in names:
                continue
            names.add(name)
            for binding in scope.bindings.get(name, []):
                value = binding.value
                if binding.kind != ASSIGN or not isinstance(value, ast.Call):
                    continue
                qualified = self._name(value.func, scope) or ""
                if qualified.startswith(HF_MODEL_PACKAGES) and _callee_leaf(value.func) in ("from_pretrained", "from_config", "get_peft_model"):
                    known = True
                if _is_peft_wrap(qualified, value.func) and value.args and isinstance(value.args[0], ast.Name):
                    stack.append(value.args[0].id)
        return frozenset(names) if known else frozenset()

    def _function_hf_models(self, calls: list[tuple[ast.Call, Scope]]) -> Iterator[frozenset[str]]:
        seen: set[frozenset[str]] = set()
        for call, scope in calls:
            if _is_peft_wrap(self._name(call.func, scope) or "", call.func):
                for name, bindings in scope.bindings.items():
                    if any(b.value is call for b in bindings):
                        names = self._hf_model_names(ast.Name(id=name), scope)
                        if names and names not in seen:
                            seen.add(names)
                            yield names

    def _no_input_grad(self, names: frozenset[str], scope: Scope, calls: list[tuple[ast.Call, Scope]]) -> str | None:
        """Why the model's layers see no grad-requiring input: wrapped by PEFT after gradient
        checkpointing was last off (PEFT prepares the inputs itself when it wraps a model with
        checkpointing already on), or frozen embeddings, or a frozen model with layers unfrozen."""
        enabled_at = [
            call.lineno for call, _ in calls if isinstance(call.func, ast.Attribute) and call.func.attr == "gradient_checkpointing_enable"
        ]
        for call, _ in calls:
            qualified = self._name(call.func, scope) or ""
            wrapped = call.args and _root_name(call.args[0]) in names
            if _is_peft_wrap(qualified, call.func) and (wrapped or any(b.value is call for n in names for b in scope.bindings.get(n, []))):
                if not any(line < call.lineno for line in enabled_at):
                    return f"wrapped by {_callee_leaf(call.func) if not qualified.endswith('from_pretrained') else 'PeftModel.from_pretrained'} at line {call.lineno}"
        frozen_whole: int | None = None
        for call, _ in calls:
            if isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_" and _first_is(call, False):
                target = call.func.value
                if _root_name(target) not in names:
                    continue
                if _mentions_embeddings(target):
                    return f"whose embeddings are frozen at line {call.lineno}"
                if isinstance(target, ast.Name):
                    frozen_whole = frozen_whole or call.lineno
        for loop in _loops(scope):
            looped, flag = _parameter_loop(loop)
            if looped is None or _root_name(looped) not in names:
                continue
            if flag is False and _mentions_embeddings(looped):
                return f"whose embeddings are frozen at line {loop.lineno}"
            if flag is False and isinstance(looped, ast.Name):
                frozen_whole = frozen_whole or loop.lineno
        if frozen_whole is None:
            return None
        for call, _ in calls:
            if isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_" and _first_is(call, True):
                if _root_name(call.func.value) in names and _names_layers(call.func.value):
                    return f"frozen at line {frozen_whole} with layers unfrozen at line {call.lineno}"
        for loop in _loops(scope):
            looped, flag = _parameter_loop(loop)
            if flag is True and looped is not None and _root_name(looped) in names and _names_layers(looped):
                return f"frozen at line {frozen_whole} with layers unfrozen at line {loop.lineno}"
        return None

    def _name(self, func: ast.expr, scope: Scope) -> str | None:
        name = self.module.qualified_name(func, scope)
        return None if name is None else self.finder.project.canonical_name(name)


def _counts(call: CheckpointCall, reentrant_only: bool) -> bool:
    """Whether a checkpoint call takes part: any recognised call, or only a reentrant one.
    Hugging Face's own calls are left out: they run only once gradient checkpointing is
    enabled, which CKP305 follows."""
    if call.api.region_kind == LAYER_CLASS or call.api.library == "transformers":
        return False
    return call.reentrant is True if reentrant_only else True


def _unique(calls: Iterable[CheckpointCall]) -> tuple[CheckpointCall, ...]:
    seen: dict[int, CheckpointCall] = {}
    for call in calls:
        seen.setdefault(id(call.node), call)
    return tuple(sorted(seen.values(), key=lambda c: (c.path, c.line, c.column)))


def _enclosing_class_scope(scope: Scope) -> Scope | None:
    current: Scope | None = scope
    while current is not None:
        if current.enclosing_class is not None:
            return current.enclosing_class
        current = current.parent
    return None


def _function_scope(scope: Scope) -> Scope:
    """The function (or module) a call's statements belong to: lambdas and comprehensions are folded in."""
    current = scope
    while current.parent is not None and isinstance(current.node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        current = current.parent
    return current


def _own_statements(function: ast.AST) -> Iterator[ast.stmt]:
    """A def's statements, not those of functions or classes nested in it."""
    stack = list(getattr(function, "body", []))
    while stack:
        statement = stack.pop()
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield statement
        for field in ("body", "orelse", "finalbody"):
            stack.extend(getattr(statement, field, []))


def _loops(scope: Scope) -> Iterator[ast.For]:
    for statement in _own_statements(scope.node):
        if isinstance(statement, ast.For):
            yield statement


def _parameter_loop(loop: ast.For) -> tuple[ast.expr | None, bool | None]:
    """`for p in X.parameters(): p.requires_grad = flag` (or `p.requires_grad_(flag)`, or over
    `named_parameters()`), unconditional: (X, flag); else (None, None)."""
    iterated = loop.iter
    if not (isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Attribute) and iterated.func.attr in ("parameters", "named_parameters")):
        return None, None
    variable = loop.target
    if isinstance(variable, ast.Tuple) and len(variable.elts) == 2:
        variable = variable.elts[1]
    if not isinstance(variable, ast.Name):
        return None, None
    for statement in loop.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Attribute) and target.attr == "requires_grad" and isinstance(target.value, ast.Name) and target.value.id == variable.id:
                if isinstance(statement.value, ast.Constant) and statement.value.value in (True, False):
                    return iterated.func.value, bool(statement.value.value)
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            call = statement.value
            if isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_" and isinstance(call.func.value, ast.Name) and call.func.value.id == variable.id:
                for flag in (True, False):
                    if _first_is(call, flag):
                        return iterated.func.value, flag
    return None, None


def _is_peft_wrap(qualified: str, func: ast.expr) -> bool:
    if not qualified.startswith("peft."):
        return False
    leaf = _callee_leaf(func)
    if leaf == "get_peft_model":
        return True
    return leaf == "from_pretrained" and isinstance(func, ast.Attribute) and _callee_leaf(func.value).startswith("PeftModel")


def _callee_leaf(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _root_name(expr: ast.expr) -> str | None:
    """`model` for `model`, `model.base.layers[0]`, `model.get_input_embeddings()`."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        elif isinstance(expr, ast.Call):
            expr = expr.func
        else:
            return None


def _mentions_embeddings(expr: ast.expr) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and ("embed" in node.attr or node.attr == "wte" or node.attr == "get_input_embeddings"):
            return True
    return False


def _names_layers(expr: ast.expr) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr in LAYER_PARTS for node in ast.walk(expr))


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


def _keyword_is(call: ast.Call, name: str, value: object) -> bool:
    found = _keyword(call, name)
    return isinstance(found, ast.Constant) and found.value is value


def _first_is(call: ast.Call, value: bool) -> bool:
    argument = call.args[0] if call.args else _keyword(call, "requires_grad")
    if argument is None:
        return value is True  # `requires_grad_()` defaults to True
    return isinstance(argument, ast.Constant) and argument.value is value
