"""Where one model is checkpointed twice in a function: by its own gradient checkpointing and
by FSDP's or accelerate's activation checkpointing (CKP404).

The model's own: `model.gradient_checkpointing_enable()`, a Trainer given
`TrainingArguments(gradient_checkpointing=True)`, or a model built from a project class whose
code calls a checkpoint API on every forward (not under an `if`). FSDP's or accelerate's:
`apply_activation_checkpointing(model, ...)`, `checkpoint_wrapper` of the model's blocks, an
`Accelerator` whose `FullyShardedDataParallelPlugin(activation_checkpointing=True)` prepares
the model, a Trainer given `fsdp_config={"activation_checkpointing": True}`. A model is known
by the binding its name sees, followed back through rebindings that wrap it
(`model = accelerator.prepare(model)`, `model, opt = accelerator.prepare(model, opt)`), so a
second model in the same function is another one; two applications in the two branches of
one `if` never run together.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterator

from ckptlint.analysis.flow.statements import (
    callee_leaf,
    exclusive_lines,
    function_scope,
    if_branches,
    last_binding_before,
    root_name,
)
from ckptlint.analysis.usage.sharding import modules_iterated
from ckptlint.calls import CheckpointCall
from ckptlint.symbols import ASSIGN, LOOP, UNPACK, Binding, ModuleSymbols, Scope
from ckptlint.syntax import keyword_value

OWN = "own"  # the model's own gradient checkpointing
WRAPPED = "wrapped"  # FSDP's or accelerate's activation checkpointing
TORCH_WRAPPERS = frozenset(
    {
        "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.checkpoint_wrapper",
        "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.apply_activation_checkpointing",
        "torch.distributed._composable.checkpoint_activation.checkpoint",  # composable `checkpoint(model)`
    }
)
ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
FSDP_PLUGINS = frozenset({"accelerate.FullyShardedDataParallelPlugin", "accelerate.utils.FullyShardedDataParallelPlugin", "accelerate.utils.dataclasses.FullyShardedDataParallelPlugin"})
# what the names must end with to be resolved further
ACCELERATE_NAMES = frozenset({"Accelerator", "FullyShardedDataParallelPlugin"})
# keys of `fsdp_config` (transformers' TrainingArguments) that turn FSDP activation checkpointing on
FSDP_CONFIG_KEYS = frozenset({"activation_checkpointing", "fsdp_activation_checkpointing"})

Name = Callable[[ast.expr, Scope, frozenset[str]], "str | None"]  # Composition._name
IsTrainer = Callable[[str], bool]
OwnCheckpoints = Callable[[Binding, Scope], str]  # a model's origin -> its class's unconditional checkpointing, described


@dataclass(frozen=True)
class Application:
    """One way a model is put under checkpointing."""

    node: ast.AST
    kind: str  # OWN or WRAPPED
    model: str  # which model: its origin binding
    what: str  # `model.gradient_checkpointing_enable()`, `apply_activation_checkpointing(model)`

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)


@dataclass(frozen=True)
class DoubleCheckpointing:
    """The model's own checkpointing and a wrapper's, reported at the later one."""

    first: Application
    second: Application


class DoubleCheckpointings:
    """The CKP404 facts of one module, function by function."""

    def __init__(self, module: ModuleSymbols, calls: list[CheckpointCall], name: Name, is_trainer: IsTrainer, own_checkpoints: OwnCheckpoints):
        self.module = module
        self.calls = calls
        self.name = name
        self.is_trainer = is_trainer
        self.own_checkpoints = own_checkpoints
        self._origins: dict[str, Binding] = {}  # a model's key -> the binding it was built by

    def hazards(self) -> Iterator[DoubleCheckpointing]:
        text = self.module.source.code
        wrappers = any(call.api.name in TORCH_WRAPPERS for call in self.calls)
        if not wrappers and "activation_checkpointing" not in text:
            return  # nothing here applies FSDP's or accelerate's checkpointing
        by_function: dict[int, list[Application]] = {}
        scopes: dict[int, Scope] = {}
        for application, scope in self._applications():
            function = function_scope(scope)
            by_function.setdefault(id(function), []).append(application)
            scopes[id(function)] = function
        for key, applications in by_function.items():
            wrapped = [a for a in applications if a.kind == WRAPPED]
            if not wrapped:
                continue
            function = scopes[key]
            applications = applications + list(self._own_models(wrapped, function))
            yield from self._pairs(applications, function)

    def _pairs(self, applications: list[Application], function: Scope) -> Iterator[DoubleCheckpointing]:
        """Per model, the first own and wrapped applications that can run together, reported at the later."""
        branches = list(if_branches(function.node))
        by_model: dict[str, list[Application]] = {}
        for application in applications:
            by_model.setdefault(application.model, []).append(application)
        for found in by_model.values():
            pairs = [
                tuple(sorted((own, wrapped), key=lambda a: (a.line, a.kind != OWN)))
                for own in found
                if own.kind == OWN
                for wrapped in found
                if wrapped.kind == WRAPPED and (own.node is wrapped.node or not exclusive_lines(branches, own.line, wrapped.line))
            ]
            if pairs:
                first, second = min(pairs, key=lambda pair: (pair[1].line, pair[0].line))
                yield DoubleCheckpointing(first, second)

    # -- applications ---------------------------------------------------------------------------

    def _applications(self) -> Iterator[tuple[Application, Scope]]:
        for checkpoint_call in self.calls:
            node = checkpoint_call.node
            if checkpoint_call.module is not self.module or checkpoint_call.api.name not in TORCH_WRAPPERS or not isinstance(node, ast.Call):
                continue
            api, scope = checkpoint_call.api, checkpoint_call.scope
            target = checkpoint_call.applied_to
            if isinstance(target, ast.expr):
                model = self._model(self._root(target, scope), scope, node.lineno)
                if model is not None:
                    yield Application(node, WRAPPED, model, f"{api.name.rsplit('.', 1)[-1]}({ast.unparse(target)})"), scope
        if "gradient_checkpointing" not in self.module.source.code and "activation_checkpointing" not in self.module.source.code:
            return
        for call, scope in self.module.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "gradient_checkpointing_enable":
                model = self._model(func.value, scope, call.lineno)
                if model is not None:
                    yield Application(call, OWN, model, f"{ast.unparse(func)}()"), scope
            elif isinstance(func, ast.Attribute) and func.attr == "prepare":
                yield from self._prepared(call, scope)
            elif callee_leaf(func).endswith(("TrainingArguments", "Config")):
                both = self._training_arguments(call, scope)
                if len(both) == 2:  # TrainingArguments(gradient_checkpointing=True, fsdp_config={"activation_checkpointing": True})
                    what = "TrainingArguments(gradient_checkpointing=True, fsdp_config={'activation_checkpointing': True})"
                    yield Application(call, OWN, f"arguments#{id(call)}", what), scope
                    yield Application(call, WRAPPED, f"arguments#{id(call)}", what), scope
            else:
                yield from self._trainer(call, scope)

    def _prepared(self, call: ast.Call, scope: Scope) -> Iterator[tuple[Application, Scope]]:
        """`accelerator.prepare(model, ...)` by an Accelerator whose FSDP plugin checkpoints activations."""
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        accelerator = self._value_of(receiver, scope, call.lineno)
        if not isinstance(accelerator, ast.Call) or self.name(accelerator.func, scope, ACCELERATE_NAMES) not in ACCELERATORS:
            return
        plugin = self._value_of(keyword_value(accelerator, "fsdp_plugin"), scope, accelerator.lineno)
        if not isinstance(plugin, ast.Call) or self.name(plugin.func, scope, ACCELERATE_NAMES) not in FSDP_PLUGINS:
            return
        if not _is_true(keyword_value(plugin, "activation_checkpointing")):
            return
        for argument in call.args:
            model = self._model(argument, scope, call.lineno)
            if model is not None:
                what = f"{ast.unparse(call.func)}({ast.unparse(argument)}) with FullyShardedDataParallelPlugin(activation_checkpointing=True) (line {plugin.lineno})"
                yield Application(call, WRAPPED, model, what), scope

    def _trainer(self, call: ast.Call, scope: Scope) -> Iterator[tuple[Application, Scope]]:
        """`Trainer(model=model, args=arguments)` with arguments that turn either checkpointing on."""
        model_expr = keyword_value(call, "model") or (call.args[0] if call.args else None)
        arguments_expr = keyword_value(call, "args") or (call.args[1] if len(call.args) > 1 else None)
        if model_expr is None or arguments_expr is None:
            return
        arguments = self._value_of(arguments_expr, scope, call.lineno)
        if not isinstance(arguments, ast.Call):
            return
        kinds = self._training_arguments(arguments, scope)
        if not kinds:
            return
        qualified = self.module.qualified_name(call.func, scope)
        if qualified is None or not self.is_trainer(self.name(call.func, scope, frozenset({qualified.rsplit(".", 1)[-1]})) or qualified):
            return
        model = self._model(model_expr, scope, call.lineno)
        if model is None:
            return
        leaf = callee_leaf(call.func)
        for kind, flag in kinds.items():
            yield Application(call, kind, model, f"{leaf}(...) with TrainingArguments({flag}) (line {arguments.lineno})"), scope

    def _training_arguments(self, call: ast.Call, scope: Scope) -> dict[str, str]:
        """Which checkpointing Hugging Face training arguments turn on: OWN for
        `gradient_checkpointing=True`, WRAPPED for `fsdp_config={"activation_checkpointing": True}`."""
        found: dict[str, str] = {}
        if _is_true(keyword_value(call, "gradient_checkpointing")):
            found[OWN] = "gradient_checkpointing=True"
        config = self._value_of(keyword_value(call, "fsdp_config"), scope, call.lineno)
        if isinstance(config, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value in FSDP_CONFIG_KEYS and _is_true(v) for k, v in zip(config.keys, config.values)
        ):
            found[WRAPPED] = 'fsdp_config={"activation_checkpointing": True}'
        if not found:
            return found
        qualified = self.name(call.func, scope, frozenset({callee_leaf(call.func)})) or ""
        return found if qualified.startswith(("transformers.", "trl.")) else {}

    def _own_models(self, wrapped: list[Application], function: Scope) -> Iterator[Application]:
        """For each wrapped model built in this function from a project class that checkpoints on
        every forward, that class's checkpointing, at the line that builds the model."""
        seen: set[str] = set()
        for application in wrapped:
            if application.model in seen:
                continue
            seen.add(application.model)
            origin = self._origins.get(application.model)
            if origin is None or origin.kind != ASSIGN or not isinstance(origin.value, ast.Call):
                continue
            what = self.own_checkpoints(origin, origin.scope)
            if what:
                yield Application(origin.value, OWN, application.model, what)

    # -- which model ----------------------------------------------------------------------------

    def _root(self, target: ast.expr, scope: Scope) -> ast.expr:
        """The model a wrapped block belongs to: `model` for `model.layers[0]`, and for a loop
        variable walking `model.layers`."""
        if isinstance(target, ast.Name):
            binding = last_binding_before(self.module, scope, target.id, target.lineno)
            if binding is not None and binding.kind == LOOP and binding.value is not None:
                root = root_name(modules_iterated(binding.value))
                return ast.Name(id=root, lineno=binding.line) if root is not None else target
            return target
        root = root_name(target)
        return ast.Name(id=root, lineno=getattr(target, "lineno", 0)) if root is not None else target

    def _model(self, expr: ast.expr | None, scope: Scope, line: int) -> str | None:
        """Which model `expr` is: its name's origin binding, followed back through wrapping
        rebindings (`model = wrap(model, ...)`); None when it is not a plain name."""
        if not isinstance(expr, ast.Name):
            return None
        name, at = expr.id, line
        for _ in range(8):
            binding = last_binding_before(self.module, scope, name, at)
            if binding is None:
                return None
            wrapped = _wrapped_name(binding)
            if wrapped is None or binding.line == 0:
                key = f"{binding.name}#{id(binding)}"
                self._origins.setdefault(key, binding)
                return key
            name, at = wrapped, binding.line
        return None

    def _value_of(self, expr: ast.expr | None, scope: Scope, line: int) -> ast.expr | None:
        """A name's assigned value (one binding back), or the expression itself."""
        if isinstance(expr, ast.Name):
            binding = last_binding_before(self.module, scope, expr.id, line)
            return binding.value if binding is not None and binding.kind == ASSIGN else None
        return expr


def _wrapped_name(binding: Binding) -> str | None:
    """`model` when the binding is `model = f(model, ...)` (or `model, opt = f(model, opt)`): the
    same model, wrapped or prepared."""
    value = binding.value
    if binding.kind not in (ASSIGN, UNPACK) or not isinstance(value, ast.Call):
        return None
    position = binding.unpack[0] if binding.kind == UNPACK and binding.unpack else 0
    arguments = [a for a in value.args if not isinstance(a, ast.Starred)]
    argument = arguments[position] if position < len(arguments) else None
    if isinstance(argument, ast.Name) and argument.id == binding.name:
        return argument.id
    return None


def _is_true(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Constant) and value.value is True
