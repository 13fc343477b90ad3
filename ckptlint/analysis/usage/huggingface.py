"""Where Hugging Face turns reentrant gradient checkpointing on for a model whose
embeddings give no gradient (CKP305).

Three ways switch it on: `model.gradient_checkpointing_enable()`,
`TrainingArguments(gradient_checkpointing=True)`, and a `Trainer` handed training arguments
whose `gradient_checkpointing` comes from the command line (the function reads the flag,
so the path is meant to run). The model must be known to be a Hugging Face or PEFT one,
and the reason its embeddings give no gradient must be in the same function: a PEFT wrap
while checkpointing is still off, frozen embeddings, or a frozen base with layers
unfrozen. A call that makes the inputs require grad silences the finding only where it
runs whenever the hazard does: not under an `if` that the enabling call and the reason
are outside of (a quantised-only `prepare_model_for_kbit_training` does not cover a
16-bit LoRA path), except `if` tests that are about gradient checkpointing itself.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from ckptlint.calls import CallFinder
from ckptlint.classes import ClassIndex
from ckptlint.modes import hugging_face_enabling_default
from ckptlint.analysis.flow.statements import callee_leaf, function_scope, if_branches, root_name
from ckptlint.analysis.usage.sharding import container_of
from ckptlint.symbols import ASSIGN, DEF, ModuleSymbols, Scope
from ckptlint.syntax import keyword_value, own_nodes, own_statements
from ckptlint.versions import Versions

HF_MODEL_PACKAGES = ("transformers.", "peft.")
INPUT_GRAD_PREPARERS = frozenset(
    {
        "enable_input_require_grads",
        "prepare_model_for_kbit_training",
        "prepare_model_for_int8_training",
        "prepare_model_for_gradient_checkpointing",  # PeftModel's own, which calls enable_input_require_grads
    }
)
# trainers that call `model.gradient_checkpointing_enable()` when `args.gradient_checkpointing` is set
TRAINERS = frozenset(
    {"transformers.Trainer", "transformers.Seq2SeqTrainer", "transformers.trainer.Trainer", "transformers.trainer_seq2seq.Seq2SeqTrainer"}
)
# parts of a model that hold its checkpointed layers (unfreezing one of them after freezing the whole model)
LAYER_PARTS = frozenset({"layers", "layer", "h", "blocks", "block", "encoder", "decoder", "transformer", "model"})
# the attributes holding a transformers model's decoder layers (each a GradientCheckpointingLayer)
DECODER_LAYERS = frozenset({"layers", "layer", "h", "blocks"})
# words in an `if` test that make it about checkpointing itself: a preparer under it runs when checkpointing is on
CHECKPOINTING_TESTS = ("gradient_checkpointing", "enable_input_require_grads")


ModelClasses = Callable[[ast.expr, Scope], list[str]]  # the project classes a model expression holds


@dataclass(frozen=True)
class EnablingHazard:
    """A Hugging Face enabling call in reentrant mode on a model whose inputs give no gradient."""

    node: ast.Call
    what: str  # `model.gradient_checkpointing_enable()`, `TrainingArguments(gradient_checkpointing=True)`, a Trainer
    why: str  # `wrapped by get_peft_model at line 12`, `embeddings frozen at line 9`
    mode: str  # how the mode was decided (the version caveat lives here)
    fixable: bool  # no gradient_checkpointing_kwargs given: the fix can add them


@dataclass(frozen=True)
class _Reason:
    why: str
    node: ast.AST  # the wrap, the freezing call or loop: a preparer must run whenever it does


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


@dataclass(frozen=True)
class ShardedLayers:
    """`model.gradient_checkpointing_enable()` on a Hugging Face model whose decoder layers the same
    function shards with `fully_shard` (`for layer in model.model.layers: fully_shard(layer)`):
    transformers checkpoints each layer's `__call__`, FSDP2's hooks included (CKP403)."""

    node: ast.Call  # the enabling call
    sharding: ast.Call  # the `fully_shard(layer)` call
    layers: str  # `model.model.layers`


class HfEnablings:
    """The CKP305 facts of one module: each function's enabling calls, read on their own."""

    def __init__(self, module: ModuleSymbols, finder: CallFinder, classes: ClassIndex, model_classes: ModelClasses | None = None):
        self.module = module
        self.finder = finder
        self.classes = classes
        self.model_classes = model_classes

    def with_hf_api(self, receiver: ast.expr, scope: Scope) -> bool:
        """Whether the model is of a project class with Hugging Face's checkpointing API (its own
        `gradient_checkpointing_enable`, as a script's local model or one ported from transformers
        defines), read through `model_classes` (a training helper's `model` parameter included)."""
        if self.model_classes is None:
            return False
        for name in self.model_classes(receiver, scope):
            info = self.classes.by_name(name)
            if info is not None and self.classes.find_method(info, "gradient_checkpointing_enable") is not None:
                return True
        return False

    def hazards(self) -> Iterator[EnablingHazard]:
        for function in self._functions():
            yield from function.hazards()

    def sharded_layers(self, fsdp2_names: frozenset[str]) -> Iterator[ShardedLayers]:
        """Each enabling call whose model's layers its function shards (`ShardedLayers`);
        `fsdp2_names`: `fully_shard`'s qualified names."""
        for function in self._functions():
            if function.enabled_at:
                yield from function.sharded_layers(fsdp2_names)

    def _functions(self) -> Iterator[_Function]:
        """The module's calls, grouped by the function they are in."""
        by_function: dict[int, list[tuple[ast.Call, Scope]]] = {}
        for call, scope in self.module.calls:
            by_function.setdefault(id(function_scope(scope)), []).append((call, scope))
        return (_Function(self, calls) for calls in by_function.values())

    def name(self, func: ast.expr, scope: Scope) -> str | None:
        name = self.module.qualified_name(func, scope)
        return None if name is None else self.finder.project.canonical_name(name)

    def is_trainer(self, qualified: str) -> bool:
        if qualified in TRAINERS:
            return True
        info = self.classes.by_name(qualified)
        return info is not None and self.classes.inherits_from(info, TRAINERS)

    def prepares_inputs(self, call: ast.Call, scope: Scope) -> bool:
        """`enable_input_require_grads()`, PEFT's preparation, a forward hook on the input
        embeddings, or a project function whose own statements make one of these calls."""
        leaf = callee_leaf(call.func)
        if leaf in INPUT_GRAD_PREPARERS or (leaf == "register_forward_hook" and _mentions_embeddings(call.func)):
            return True
        qualified = self.name(call.func, scope)
        found = self.finder.project.global_binding(qualified) if qualified else None
        if found is None or found[1].kind != DEF:
            return False
        return any(isinstance(node, ast.Call) and callee_leaf(node.func) in INPUT_GRAD_PREPARERS for node in own_nodes(found[1].node))


class _Function:
    """One function's calls, with the conditions each statement runs under."""

    def __init__(self, owner: HfEnablings, calls: list[tuple[ast.Call, Scope]]):
        self.owner = owner
        self.calls = calls
        self.scope = function_scope(calls[0][1])
        self.enabled_at = [call.lineno for call, _ in calls if _is_enable(call)]

    @functools.cached_property
    def branches(self) -> list[tuple[ast.expr, bool, int, int]]:
        return list(if_branches(self.scope.node))

    @functools.cached_property
    def gradient_checkpointing_readers(self) -> frozenset[str]:
        """The names whose `.gradient_checkpointing` the function reads (a Trainer's parsed
        args): only a Trainer handed one of them can enable checkpointing from the command line."""
        if not self.owner.module.source.mentions("gradient_checkpointing", self.scope.node):
            return frozenset()
        return frozenset(
            root
            for node in own_nodes(self.scope.node)
            if isinstance(node, ast.Attribute) and node.attr == "gradient_checkpointing"
            for root in [root_name(node)]
            if root is not None
        )

    def _may_enable(self, call: ast.Call) -> bool:
        """A cheap test before any name is resolved: most calls of a module enable nothing."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "gradient_checkpointing_enable" or callee_leaf(func) == "TrainingArguments":
            return True
        model = keyword_value(call, "model") or (call.args[0] if call.args else None)
        arguments = keyword_value(call, "args") or (call.args[1] if len(call.args) > 1 else None)
        return isinstance(model, ast.Name) and isinstance(arguments, ast.Name) and arguments.id in self.gradient_checkpointing_readers

    def hazards(self) -> Iterator[EnablingHazard]:
        enablings = [(call, scope, found) for call, scope in self.calls if self._may_enable(call) for found in [self._enabling(call, scope)] if found]
        if not enablings:
            return
        preparers = [call for call, scope in self.calls if self.owner.prepares_inputs(call, scope)]
        for call, scope, found in enablings:
            what, model_names, reentrant, mode, fixable = found
            if not reentrant:
                continue
            for names in model_names:
                reason = self._no_input_grad(names, scope)
                if reason is None or self._exclusive(call, reason.node):
                    continue
                if not any(self._covers(p, (call, reason.node)) for p in preparers):
                    yield EnablingHazard(call, what, reason.why, mode, fixable)
                    break

    def sharded_layers(self, fsdp2_names: frozenset[str]) -> Iterator[ShardedLayers]:
        for call, scope in self.calls:
            if not (_is_enable(call) and isinstance(call.func, ast.Attribute)):
                continue
            names = self._hf_model_names(call.func.value, scope)
            if not names:
                continue
            for sharding, sharding_scope in self.calls:
                if callee_leaf(sharding.func) != "fully_shard" or not sharding.args or self.owner.name(sharding.func, sharding_scope) not in fsdp2_names:
                    continue
                layers = self._layers_walked(sharding.args[0], sharding_scope, names)
                if layers is not None:
                    yield ShardedLayers(call, sharding, layers)
                    break

    def _layers_walked(self, module: ast.expr, scope: Scope, names: frozenset[str]) -> str | None:
        """`model.model.layers` when `module` is a loop variable over a model's layers (or an
        element of them: `model.model.layers[0]`), the model one of `names`."""
        walked = container_of(self.owner.module, scope, module)
        if isinstance(walked, ast.Attribute) and walked.attr in DECODER_LAYERS and root_name(walked) in names:
            return ast.unparse(walked)
        return None

    def _enabling(self, call: ast.Call, scope: Scope) -> tuple[str, Iterable[frozenset[str]], bool | None, str, bool] | None:
        """What the call switches on, the model names it applies to, the mode, whether the fix can edit it."""
        func = call.func
        qualified = self.owner.name(func, scope) or ""
        if qualified and self.owner.is_trainer(qualified):
            return self._trainer(call, scope, qualified)  # `**data_module` cannot carry the mode: a Trainer takes it from args
        if any(k.arg is None for k in call.keywords):
            return None  # `**options` may carry gradient_checkpointing_kwargs
        keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
        versions = self.owner.finder.versions
        if isinstance(func, ast.Attribute) and func.attr == "gradient_checkpointing_enable":
            names = self._hf_model_names(func.value, scope)
            reentrant, mode = hf_enabling_reentrant(keywords, versions, call.args[0] if call.args else None)
            if not names and isinstance(func.value, ast.Name) and self.owner.with_hf_api(func.value, scope):
                if not mode.startswith("use_reentrant="):
                    return None  # the project's own method decides a mode it is not given
                names = frozenset({func.value.id})
            if not names:
                return None
            fixable = "gradient_checkpointing_kwargs" not in keywords and not call.args
            return f"{ast.unparse(func)}()", [names], reentrant, mode, fixable
        if callee_leaf(func) == "TrainingArguments" and qualified.startswith("transformers.") and _keyword_is(call, "gradient_checkpointing", True):
            reentrant, mode = hf_enabling_reentrant(keywords, versions)
            what = "TrainingArguments(gradient_checkpointing=True)"
            return what, self._wrapped_models(), reentrant, mode, "gradient_checkpointing_kwargs" not in keywords
        return None

    def _trainer(self, call: ast.Call, scope: Scope, qualified: str) -> tuple[str, Iterable[frozenset[str]], bool | None, str, bool] | None:
        """`Trainer(model=model, args=training_args)` where `training_args.gradient_checkpointing`
        is read in this function and set nowhere in it: the command line decides, and the Trainer
        enables checkpointing with the default mode when it is on."""
        model = keyword_value(call, "model") or (call.args[0] if call.args else None)
        arguments = keyword_value(call, "args") or (call.args[1] if len(call.args) > 1 else None)
        if not isinstance(model, ast.Name) or not isinstance(arguments, ast.Name):
            return None
        names = self._hf_model_names(model, scope)
        if not names or any(_builds_arguments(b.value) for b in scope.bindings.get(arguments.id, []) if b.kind == ASSIGN):
            return None  # arguments built here, not parsed: TrainingArguments(gradient_checkpointing=True) is its own site
        read_at = None
        for node in own_nodes(self.scope.node):
            if isinstance(node, ast.Attribute) and node.attr == "gradient_checkpointing_kwargs":
                return None  # the mode is set somewhere we do not follow
            if isinstance(node, ast.Attribute) and node.attr == "gradient_checkpointing" and root_name(node) == arguments.id:
                if not isinstance(node.ctx, ast.Load):
                    return None
                read_at = min(read_at or node.lineno, node.lineno)
        if read_at is None:
            return None
        reentrant, mode = hf_enabling_reentrant({}, self.owner.finder.versions)
        leaf = qualified.rsplit(".", 1)[-1]
        what = f"{leaf}(args={arguments.id}), which enables gradient checkpointing when {arguments.id}.gradient_checkpointing (read at line {read_at}) is set,"
        return what, [names], reentrant, mode, False

    # -- the model -----------------------------------------------------------------------------

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
                qualified = self.owner.name(value.func, scope) or ""
                if qualified.startswith(HF_MODEL_PACKAGES) and callee_leaf(value.func) in ("from_pretrained", "from_config", "get_peft_model"):
                    known = True
                if _is_peft_wrap(qualified, value.func) and value.args and isinstance(value.args[0], ast.Name):
                    stack.append(value.args[0].id)
        return frozenset(names) if known else frozenset()

    def _wrapped_models(self) -> Iterator[frozenset[str]]:
        seen: set[frozenset[str]] = set()
        for call, scope in self.calls:
            if _is_peft_wrap(self.owner.name(call.func, scope) or "", call.func):
                for name, bindings in scope.bindings.items():
                    if any(b.value is call for b in bindings):
                        names = self._hf_model_names(ast.Name(id=name), scope)
                        if names and names not in seen:
                            seen.add(names)
                            yield names

    def _no_input_grad(self, names: frozenset[str], scope: Scope) -> _Reason | None:
        """Why the model's layers see no grad-requiring input: wrapped by PEFT after gradient
        checkpointing was last off (PEFT prepares the inputs itself when it wraps a model with
        checkpointing already on), or frozen embeddings, or a frozen model with layers unfrozen."""
        for call, _ in self.calls:
            qualified = self.owner.name(call.func, scope) or ""
            wrapped = call.args and root_name(call.args[0]) in names
            if _is_peft_wrap(qualified, call.func) and (wrapped or any(b.value is call for n in names for b in scope.bindings.get(n, []))):
                if not any(line < call.lineno for line in self.enabled_at) and not self._trains_embeddings(call, scope):
                    how = "PeftModel.from_pretrained" if qualified.endswith("from_pretrained") else callee_leaf(call.func)
                    return _Reason(f"wrapped by {how} at line {call.lineno}", call)
        frozen_whole: ast.AST | None = None
        for call, _ in self.calls:
            if isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_" and _first_is(call, False):
                target = call.func.value
                if root_name(target) not in names:
                    continue
                if _mentions_embeddings(target):
                    return _Reason(f"whose embeddings are frozen at line {call.lineno}", call)
                if isinstance(target, ast.Name):
                    frozen_whole = frozen_whole or call
        loops = list(_parameter_loops(self.scope.node))
        for loop, looped, flag in loops:
            if looped is None or root_name(looped) not in names:
                continue
            if flag is False and _mentions_embeddings(looped):
                return _Reason(f"whose embeddings are frozen at line {loop.lineno}", loop)
            if flag is False and isinstance(looped, ast.Name):
                frozen_whole = frozen_whole or loop
        if frozen_whole is None:
            return None
        frozen = f"frozen at line {getattr(frozen_whole, 'lineno', 0)}"
        for call, _ in self.calls:
            if isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_" and _first_is(call, True):
                if root_name(call.func.value) in names and _names_layers(call.func.value):
                    return _Reason(f"{frozen} with layers unfrozen at line {call.lineno}", frozen_whole)
        for loop, looped, flag in loops:
            if flag is True and looped is not None and root_name(looped) in names and _names_layers(looped):
                return _Reason(f"{frozen} with layers unfrozen at line {loop.lineno}", frozen_whole)
        return None

    def _trains_embeddings(self, wrap: ast.Call, scope: Scope) -> bool:
        """Whether the PEFT config may keep the embeddings trainable (`modules_to_save` naming
        them, or not a literal list): then their output requires grad and the layers get it."""
        config = keyword_value(wrap, "peft_config") or (wrap.args[1] if len(wrap.args) > 1 else None)
        if isinstance(config, ast.Name):
            bound = [b.value for b in scope.bindings.get(config.id, []) if b.kind == ASSIGN]
            config = bound[0] if len(bound) == 1 else None
        if not isinstance(config, ast.Call):
            return False
        saved = keyword_value(config, "modules_to_save")
        if saved is None or (isinstance(saved, ast.Constant) and saved.value is None):
            return False
        if not isinstance(saved, (ast.List, ast.Tuple)):
            return True  # read from the command line: it may name them
        return any(not isinstance(item, ast.Constant) or _is_embedding_name(str(item.value)) for item in saved.elts)

    # -- conditions ----------------------------------------------------------------------------

    def _covers(self, preparer: ast.AST, hazard: tuple[ast.AST, ...]) -> bool:
        """Whether the preparer runs whenever the hazard's calls do: each `if` branch around it
        also holds one of them, or tests the same condition as a branch that does, or is about
        checkpointing itself (`if args.gradient_checkpointing:`, `if hasattr(model, "enable_input_require_grads")`)."""
        around_hazard = {branch for node in hazard for branch in self._around(node)}
        tests = {(ast.dump(test), side) for test, side in around_hazard}
        for test, side in self._around(preparer):
            if (test, side) in around_hazard or (ast.dump(test), side) in tests:
                continue
            if any(word in ast.unparse(test) for word in CHECKPOINTING_TESTS):
                continue
            return False
        return True

    def _exclusive(self, one: ast.AST, other: ast.AST) -> bool:
        """Whether the two never run in the same call: `if args.use_lora:` around the wrap and
        `if not args.use_lora:` around the enabling (a script that knows the combination fails)."""
        held = {fact for test, side in self._around(one) for fact in _facts(test, side)}
        return any((key, not holds) in held for test, side in self._around(other) for key, holds in _facts(test, side))

    def _around(self, node: ast.AST) -> list[tuple[ast.expr, bool]]:
        line = getattr(node, "lineno", 0)
        return [(test, side) for test, side, first, last in self.branches if first <= line <= last]




def _facts(test: ast.expr, holds: bool) -> set[tuple[str, bool]]:
    """What is certain inside a branch: each part of an `and` that holds (or of an `or` that
    does not), as (the part's dump, whether it is true); `!=` and `is not` read as `==` and
    `is` that are false."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _facts(test.operand, not holds)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) == holds:
            return {fact for value in test.values for fact in _facts(value, holds)}
        return set()  # a disjunction that holds (or a conjunction that fails) fixes no single part
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.NotEq, ast.IsNot)):
        positive = ast.Eq() if isinstance(test.ops[0], ast.NotEq) else ast.Is()
        return {(ast.dump(ast.Compare(test.left, [positive], test.comparators)), not holds)}
    return {(ast.dump(test), holds)}


def _builds_arguments(value: ast.AST | None) -> bool:
    """`TrainingArguments(...)`, `MyArgs(...)`: training arguments made in code, their flags in sight."""
    return isinstance(value, ast.Call) and callee_leaf(value.func).endswith(("Arguments", "Args", "Config"))


def _is_enable(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "gradient_checkpointing_enable"




def _parameter_loops(function: ast.AST) -> Iterator[tuple[ast.For, ast.expr | None, bool | None]]:
    """Each parameter loop of a function as (loop, X, flag) (`_parameter_loop`); a loop over
    `module.parameters()` inside `for module in [model.embed_tokens, *model.layers[:2]]:` gives
    each module the outer loop lists, reported at the outer loop."""
    loops = [loop for loop in own_statements(function) if isinstance(loop, ast.For)]
    listed = {
        id(inner): (outer, outer.iter.elts)
        for outer in loops
        if isinstance(outer.iter, (ast.List, ast.Tuple)) and isinstance(outer.target, ast.Name)
        for inner in outer.body
        if isinstance(inner, ast.For)
    }
    for loop in loops:
        looped, flag = _parameter_loop(loop)
        outer, elements = listed.get(id(loop), (None, []))
        if outer is not None and isinstance(looped, ast.Name) and isinstance(outer.target, ast.Name) and outer.target.id == looped.id:
            for element in elements:
                yield outer, element.value if isinstance(element, ast.Starred) else element, flag
            continue
        yield loop, looped, flag


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
    leaf = callee_leaf(func)
    if leaf == "get_peft_model":
        return True
    return leaf == "from_pretrained" and isinstance(func, ast.Attribute) and callee_leaf(func.value).startswith("PeftModel")






def _mentions_embeddings(expr: ast.expr) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and _is_embedding_name(node.attr):
            return True
    return False


def _is_embedding_name(name: str) -> bool:
    return "embed" in name or name == "wte"


def _names_layers(expr: ast.expr) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr in LAYER_PARTS for node in ast.walk(expr))


def _keyword_is(call: ast.Call, name: str, value: object) -> bool:
    found = keyword_value(call, name)
    return isinstance(found, ast.Constant) and found.value is value


def _first_is(call: ast.Call, value: bool) -> bool:
    argument = call.args[0] if call.args else keyword_value(call, "requires_grad")
    if argument is None:
        return value is True  # `requires_grad_()` defaults to True
    return isinstance(argument, ast.Constant) and argument.value is value
