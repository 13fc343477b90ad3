"""Which of a model's own checkpoint calls wrap FSDP units made elsewhere (CKP403, CKP405).

A setup function shards what a model's forward later checkpoints: `fully_shard(block)` in a loop
over `model.layers` while the forward runs `checkpoint(layer, x)` over `self.layers`;
`FullyShardedDataParallel(model, auto_wrap_policy=...)` making a unit of each block of a class the
policy names (`ModuleWrapPolicy({Block})`, `transformer_auto_wrap_policy`, a wrap function testing
`isinstance`). Sharding runs before any forward, so those checkpoints wrap units. Also what
shards though FSDP is not its name (fairscale's `wrap`, a project `fsdp_wrap` helper, an FSDP
subclass), for sharding.py's same-function reading.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterator

from ckptlint.analysis.flow.statements import last_binding_before
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.values import ClassType, FunctionType, Types
from ckptlint.analysis.usage.model_parameters import ModelParameters
from ckptlint.analysis.usage.sharding import FAIRSCALE_WRAP, FSDP1, FSDP2, Name, Sharding, ShardedCheckpoint, container_of
from ckptlint.calls import CallFinder, CheckpointCall
from ckptlint.catalogue import MODEL
from ckptlint.classes import ClassInfo
from ckptlint.symbols import ASSIGN, DEF, ModuleSymbols, Scope
from ckptlint.syntax import keyword_value, own_statements

ModelCheckpoints = Callable[[Types], "tuple[tuple[CheckpointCall, ...], str]"]  # Composition._model_checkpoints
ClassCheckpoints = Callable[[ClassInfo], "list[CheckpointCall]"]  # Composition._checkpoints_in_class


class FsdpUnits:
    """The FSDP units one module's setup code makes, and the model checkpoints around them."""

    def __init__(
        self,
        module: ModuleSymbols,
        inference: TypeInference,
        finder: CallFinder,
        models: ModelParameters,
        name: Name,
        model_checkpoints: ModelCheckpoints,
        class_checkpoints: ClassCheckpoints,
    ):
        self.module = module
        self.inference = inference
        self.classes = inference.classes
        self.finder = finder
        self.models = models
        self.name = name
        self.model_checkpoints = model_checkpoints
        self.class_checkpoints = class_checkpoints

    def checkpoints_around(self, sharding: Sharding) -> Iterator[ShardedCheckpoint]:
        """The model's own checkpoint calls that wrap a unit `sharding` makes: FSDP1's auto-wrap
        units, or the blocks `fully_shard` shards from outside."""
        if not sharding.fsdp2:
            yield from self._auto_wrapped(sharding)
            return
        held = self._held_block(sharding)
        if held is None:
            return
        owner, attribute = held
        roots = [t for t in self.models.model_types(owner, sharding.scope) if isinstance(t, ClassType) and not t.built_by]
        for item in roots:
            info = self.classes.by_name(item.name)
            if info is None:
                continue
            for cls in self.classes.mro(info):
                for call in self.class_checkpoints(cls):
                    region = _region_module(call)
                    if region is not None and self._element_of_attribute(region, call, attribute):
                        what = f"`{ast.unparse(region)}`, a block of {item.short}.{attribute}"
                        yield ShardedCheckpoint(call, sharding, True, True, what, True)

    def _auto_wrapped(self, sharding: Sharding) -> Iterator[ShardedCheckpoint]:
        """`FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({Block}))` (or
        `functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})`) makes
        each `Block` in the model a unit: a checkpoint call in the model's own code whose region
        is a `Block` wraps that unit."""
        wrapped = self._wrap_policy_classes(keyword_value(sharding.node, "auto_wrap_policy"), sharding.scope, 0)
        if not wrapped or sharding.module is None:
            return
        checkpoints, name = self.model_checkpoints(self.models.module_types(sharding.module, sharding.scope))
        for call in checkpoints:
            region = _region_module(call)
            if region is None or call.api.region_kind == MODEL:
                continue
            held = sorted(self._classes_among(self.inference.types(region, call.module, call.scope), wrapped))
            if held:
                what = f"`{ast.unparse(region)}`, of class {held[0].rpartition('.')[2]}, which auto_wrap_policy makes a unit in {name}"
                yield ShardedCheckpoint(call, sharding, True, False, what, True)

    def _classes_among(self, types: Types, classes: frozenset[str]) -> set[str]:
        """Which of `classes` the types are instances of (a project subclass counts)."""
        found: set[str] = set()
        for item in types:
            if isinstance(item, ClassType) and not item.built_by:
                info = self.classes.by_name(item.name)
                found.update(c for c in classes if item.name == c or (info is not None and self.classes.inherits_from(info, frozenset({c}))))
        return found

    def _wrap_policy_classes(self, policy: ast.expr | None, scope: Scope, depth: int) -> frozenset[str]:
        """The classes an FSDP1 wrap policy names literally: `ModuleWrapPolicy({Block})`,
        `functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})`, or a
        name bound to one of them."""
        if isinstance(policy, ast.Name) and depth < 3:
            binding = last_binding_before(self.module, scope, policy.id, policy.lineno)
            if binding is not None and binding.kind == ASSIGN and isinstance(binding.value, ast.expr):
                return self._wrap_policy_classes(binding.value, binding.scope, depth + 1)
        if isinstance(policy, ast.Call):
            name = self.name(policy.func, scope, frozenset({"ModuleWrapPolicy", "partial"})) or ""
            if name.startswith("torch.distributed.") and name.endswith(".ModuleWrapPolicy"):
                return self.policy_classes(policy.args[0] if policy.args else keyword_value(policy, "module_classes"), scope)
            if name == "functools.partial" and policy.args:
                inner = self.name(policy.args[0], scope, frozenset({"transformer_auto_wrap_policy", "lambda_auto_wrap_policy"})) or ""
                if inner.startswith("torch.distributed.") and inner.endswith("transformer_auto_wrap_policy"):
                    return self.policy_classes(keyword_value(policy, "transformer_layer_cls"), scope)
                if inner.startswith("torch.distributed.") and inner.endswith("lambda_auto_wrap_policy"):
                    return self._wrap_function_classes(keyword_value(policy, "lambda_fn"), scope)
        return self._wrap_function_classes(policy, scope)

    def _wrap_function_classes(self, policy: ast.expr | None, scope: Scope) -> frozenset[str]:
        """The classes a project wrap function tests with `isinstance` (`def fsdp_wrap_fn(module,
        recurse, ...): return isinstance(module, Block)`, a lambda): the function itself, or each
        one a call returns (`model.get_fsdp_wrap_policy(strategy)` returning one per strategy:
        any of them may be the one configured)."""
        if policy is None:
            return frozenset()
        found: set[str] = set()
        for item in self.inference.types(policy, self.module, scope):
            if not isinstance(item, FunctionType) or not isinstance(item.module, ModuleSymbols):
                continue
            module, function = item.module, item.node
            inner = module.scope_of.get(id(function))
            if inner is None or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            body: list[ast.AST] = [function.body] if isinstance(function, ast.Lambda) else list(own_statements(function))
            for node in (n for part in body for n in ast.walk(part)):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" and len(node.args) == 2:
                    tested = node.args[1]
                    for element in tested.elts if isinstance(tested, ast.Tuple) else [tested]:
                        name = module.qualified_name(element, inner) if isinstance(element, (ast.Name, ast.Attribute)) else None
                        if name is not None:
                            found.add(self.finder.project.canonical_name(name))
        return frozenset(found)

    def _held_block(self, sharding: Sharding) -> tuple[ast.expr, str] | None:
        """(`model`, `layers`) for `fully_shard(model.layers[0])`, or for `fully_shard(block)` in
        a loop over `model.layers` (`.items()`, `enumerate(...)`)."""
        if not sharding.fsdp2 or sharding.module is None:
            return None
        container = container_of(self.module, sharding.scope, sharding.module)
        if isinstance(container, ast.Attribute) and isinstance(container.value, ast.Name):
            return container.value, container.attr
        return None

    def _element_of_attribute(self, region: ast.expr, call: CheckpointCall, attribute: str) -> bool:
        """`self.layers[i]`, or a loop variable walking `self.layers`, in a method of the class."""
        container = container_of(call.module, call.scope, region)
        return isinstance(container, ast.Attribute) and container.attr == attribute and isinstance(container.value, ast.Name) and container.value.id == "self"

    def policy_classes(self, policy: ast.expr | None, scope: Scope) -> frozenset[str]:
        """The classes a literal policy set names (`{Block}`, `{torch.nn.Linear}`), canonical."""
        if not isinstance(policy, (ast.Set, ast.List, ast.Tuple)):
            return frozenset()
        found = set()
        for element in policy.elts:
            name = self.module.qualified_name(element, scope) if isinstance(element, (ast.Name, ast.Attribute)) else None
            if name is not None:
                found.add(self.finder.project.canonical_name(name))
        return frozenset(found)

    def sharding_helper(self, func: ast.expr, scope: Scope) -> tuple[bool, str] | None:
        """(FSDP2?, its name) for a callee that shards its first argument though FSDP is not its
        name: a project subclass of an FSDP class, fairscale's `wrap`, or a project function that
        returns one of those applied to its first parameter (fairseq's `fsdp_wrap(module)`)."""
        qualified = self.name(func, scope, None)
        if qualified is None:
            return None
        kind = self._sharding_kind(qualified, 0)
        return None if kind is None else (kind, ast.unparse(func))

    def _sharding_kind(self, qualified: str, depth: int) -> bool | None:
        """True for FSDP2, False for FSDP1, None when `qualified` does not shard."""
        if qualified in FSDP2:
            return True
        if qualified in FSDP1 or qualified in FAIRSCALE_WRAP:
            return False
        info = self.classes.by_name(qualified)
        if info is not None:
            return False if self.classes.inherits_from(info, FSDP1) else None
        found = self.finder.project.global_binding(qualified) if depth < 2 else None
        if found is None or found[1].kind != DEF or not isinstance(found[1].node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        module, binding = found
        function = binding.node
        assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        inner = module.scope_of.get(id(function))
        parameters = [a.arg for a in function.args.posonlyargs + function.args.args]
        if inner is None or not parameters:
            return None
        for statement in own_statements(function):
            value = statement.value if isinstance(statement, ast.Return) else None
            if not (isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Name) and value.args[0].id == parameters[0]):
                continue
            callee = module.qualified_name(value.func, inner)
            kind = self._sharding_kind(self.finder.project.canonical_name(callee), depth + 1) if callee is not None else None
            if kind is not None:
                return kind
        return None


def _region_module(call: CheckpointCall) -> ast.expr | None:
    """The module a checkpoint call runs: `layer` for `checkpoint(layer.__call__, x)` too."""
    region = call.region
    if isinstance(region, ast.Attribute) and region.attr == "__call__":
        region = region.value
    return region if isinstance(region, ast.expr) else None
