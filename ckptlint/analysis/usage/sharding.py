"""Where FSDP shards a module in a function, and which checkpointing there wraps a sharded
module rather than sitting inside it (CKP403, CKP405).

`fully_shard(block)` shards `block` in place (and returns it); `m = FullyShardedDataParallel(block)`
shards what `m` holds. Either marks the names and places it binds as sharded from that line on:
a module is known by the binding a use of its name sees at that line (a later
`block = Block()` is another module), by the iterable a loop variable walks
(`for block in model.layers` twice is the same modules), or by its spelling (`self.block`,
`model.layers[i]`). A checkpoint call whose region is known so, or an
`apply_activation_checkpointing` whose `check_fn` selects FSDP's classes, or the classes of
the modules `fully_shard` sharded, is found together with the sharding and whether the
sharding came first: only then does the checkpoint wrap the FSDP unit. Everything is read
inside one function; a module sharded elsewhere is unknown, and silent.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from ckptlint.analysis.flow.statements import exclusive_lines, function_scope, if_branches, last_binding_before
from ckptlint.calls import CheckpointCall
from ckptlint.catalogue import MODEL
from ckptlint.symbols import (
    ASSIGN,
    DEF,
    LOOP,
    Binding,
    ModuleSymbols,
    Scope,
)
from ckptlint.syntax import keyword_value, own_statements

FSDP1 = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "fairscale.nn.FullyShardedDataParallel",
        "fairscale.nn.data_parallel.FullyShardedDataParallel",
        "fairscale.nn.data_parallel.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)
# fairscale's `wrap(module)`: the wrapper class `enable_wrap(wrapper_cls=FullyShardedDataParallel)` set
# around it (fairseq's and other trainers' way of sharding layers as the model is built)
FAIRSCALE_WRAP = frozenset({"fairscale.nn.wrap", "fairscale.nn.wrap.wrap", "fairscale.nn.wrap.auto_wrap.wrap"})
FSDP2 = frozenset(
    {
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed.fsdp._fully_shard.fully_shard",
        "torch.distributed.fsdp._fully_shard._fully_shard.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard.fully_shard",
    }
)
# the class every `fully_shard`-ed module becomes an instance of
FSDP2_MODULE = frozenset(
    {
        "torch.distributed.fsdp.FSDPModule",
        "torch.distributed.fsdp._fully_shard.FSDPModule",
        "torch.distributed.fsdp._fully_shard._fully_shard.FSDPModule",
        "torch.distributed._composable.fsdp.FSDPModule",
        "torch.distributed._composable.fsdp.fully_shard.FSDPModule",
    }
)
# what a callee's name must end with to be resolved further (the class, its usual alias, FSDP2's function)
SHARDING_NAMES = frozenset({"FullyShardedDataParallel", "FSDP", "fully_shard"})
SHARDED_CLASS_NAMES = frozenset({"FullyShardedDataParallel", "FSDP", "FSDPModule"})
# a module whose text holds none of these shards nothing (read before any call is resolved)
SHARDING_WORDS = ("fully_shard", "FullyShardedDataParallel", "FSDP", "fsdp", "fairscale")
# a loop over these walks a module's children: `for name, block in model.layers.named_children()`
_CHILDREN = frozenset({"children", "named_children", "values", "items", "modules", "named_modules"})

Name = Callable[[ast.expr, Scope, "frozenset[str] | None"], "str | None"]  # Composition._name (None: any callee)
# Composition._sharding_helper: a project helper or FSDP subclass that shards (`fsdp_wrap(layer)`), as
# (FSDP2?, how the message names it), or None
Helper = Callable[[ast.expr, Scope], "tuple[bool, str] | None"]
InstanceOf = Callable[[ast.expr, Scope, str], bool]  # whether the expression's inferred class is (a subclass of) the named one


@dataclass(frozen=True)
class Sharding:
    """A `fully_shard(...)` or `FullyShardedDataParallel(...)` call and the modules it leaves sharded."""

    node: ast.Call
    scope: Scope
    fsdp2: bool
    module: ast.expr | None  # the module passed (fully_shard's is sharded in place)
    keys: frozenset[str]
    through: str = ""  # the project helper that shards (`fsdp_wrap`), when not FSDP itself

    @property
    def what(self) -> str:
        torch_name = "fully_shard" if self.fsdp2 else "FullyShardedDataParallel"
        return f"{self.through} ({torch_name})" if self.through else torch_name


@dataclass(frozen=True)
class ShardedCheckpoint:
    """A checkpoint call whose region is a sharded module (or, for `apply_activation_checkpointing`,
    whose `check_fn` selects sharded modules)."""

    call: CheckpointCall
    sharding: Sharding | None  # None: check_fn selects FSDP's own class
    sharded_first: bool  # the sharding runs before the checkpointing
    fsdp2: bool
    what: str  # the module checkpointed (`block`), or `check_fn selects FullyShardedDataParallel`
    around: bool | None = None  # the checkpoint wraps the FSDP unit at run time (None: when sharded first)

    @property
    def wraps_unit(self) -> bool:
        """Sharded first, or a wrapper holding the very module sharded later in place
        (`wrapped = checkpoint_wrapper(block)` then `fully_shard(block)`)."""
        return self.sharded_first if self.around is None else self.around


class Shardings:
    """The sharding calls of one module, by function, and the checkpoint calls they cover."""

    def __init__(self, module: ModuleSymbols, name: Name, instance_of: InstanceOf, helper: Helper | None = None):
        self.module = module
        self.name = name
        self.instance_of = instance_of
        self.helper = helper
        self._assigned: dict[int, dict[int, list[ast.Assign]]] = {}

    @functools.cached_property
    def mentions_sharding(self) -> bool:
        text = self.module.source.code
        return any(word in text for word in SHARDING_WORDS)

    @functools.cached_property
    def by_function(self) -> dict[int, list[Sharding]]:
        """id(function scope) -> its sharding calls, in source order."""
        found: dict[int, list[Sharding]] = {}
        if not self.mentions_sharding:
            return found
        for call, scope in self.module.calls:
            qualified = self.name(call.func, scope, SHARDING_NAMES)
            if qualified in FSDP1 or qualified in FSDP2:
                found.setdefault(id(function_scope(scope)), []).append(self._sharding(call, scope, qualified in FSDP2))
            elif self.helper is not None and _may_shard(call.func):
                helper = self.helper(call.func, scope)
                if helper is not None:
                    sharding = replace(self._sharding(call, scope, helper[0]), through=helper[1])
                    found.setdefault(id(function_scope(scope)), []).append(sharding)
        for shardings in found.values():
            shardings.sort(key=lambda s: (s.node.lineno, s.node.col_offset))
        return found

    def _sharding(self, call: ast.Call, scope: Scope, fsdp2: bool) -> Sharding:
        module = call.args[0] if call.args else keyword_value(call, "module")
        keys = set(self.result_keys(call, scope))
        if fsdp2 and module is not None:
            key = self.key(module, scope)
            if key is not None:
                keys.add(key)
        return Sharding(call, scope, fsdp2, module, frozenset(keys))

    def covering(self, call: CheckpointCall) -> Iterator[ShardedCheckpoint]:
        """Each sharding in the checkpoint call's function of the module it checkpoints."""
        if call.module is not self.module or not isinstance(call.node, ast.Call) or not self.mentions_sharding:
            return
        shardings = self.by_function.get(id(function_scope(call.scope)), [])
        if call.api.region_kind == MODEL:
            yield from self._selected(call, shardings)
            return
        if not shardings:
            return
        line = call.node.lineno
        region = call.region
        if isinstance(region, ast.Attribute) and region.attr == "__call__":
            region = region.value
        if not isinstance(region, ast.expr):
            return
        if isinstance(region, ast.Call):  # checkpoint_wrapper(FullyShardedDataParallel(block))
            for sharding in shardings:
                if sharding.node is region:
                    yield ShardedCheckpoint(call, sharding, True, sharding.fsdp2, f"`{ast.unparse(region)}`")
            return
        key = self.key(region, call.scope)
        if key is None:
            return
        results = set(self.result_keys(call.node, call.scope))  # `block = checkpoint_wrapper(block)`
        # a wrapper module holds the one it was given: sharding that one in place later still puts
        # the unit inside the wrapper, when the name is sure to be that module (not a loop variable,
        # whose iterable may hold the wrappers by then, as torchtitan's second loop does)
        holds_module = call.api.name.rsplit(".", 1)[-1] == "checkpoint_wrapper" and not key.startswith("each ")
        branches = list(if_branches(function_scope(call.scope).node))
        for sharding in shardings:
            if exclusive_lines(branches, sharding.node.lineno, line):
                continue  # `if with_fsdp: ... shard ... else: ... checkpoint ...`: never both in one run
            first = sharding.node.lineno < line
            if key in sharding.keys or (not first and results & sharding.keys):
                around = first or (holds_module and key in sharding.keys and sharding.fsdp2)
                yield ShardedCheckpoint(call, sharding, first, sharding.fsdp2, f"`{ast.unparse(region)}`", around)

    def _selected(self, call: CheckpointCall, shardings: list[Sharding]) -> Iterator[ShardedCheckpoint]:
        """`apply_activation_checkpointing(model, check_fn=...)` whose check_fn tests for FSDP's
        own classes, or for a class of modules `fully_shard` sharded before it."""
        classes = list(self._check_fn_classes(call.region, call.scope))
        if not classes:
            return
        for expr, qualified in classes:
            if qualified in FSDP1 or qualified in FSDP2_MODULE:
                yield ShardedCheckpoint(call, None, True, qualified in FSDP2_MODULE, f"check_fn selects {ast.unparse(expr)}")
                return
        for sharding in shardings:
            if not sharding.fsdp2 or sharding.module is None or sharding.node.lineno >= call.node.lineno:
                continue
            for expr, qualified in classes:
                if self.instance_of(sharding.module, sharding.scope, qualified):
                    yield ShardedCheckpoint(call, sharding, True, True, f"check_fn selects {ast.unparse(expr)}, the class of `{ast.unparse(sharding.module)}`")
                    return

    def _check_fn_classes(self, check_fn: ast.AST | None, scope: Scope) -> Iterator[tuple[ast.expr, str]]:
        """The classes an `isinstance` in a check_fn (a lambda, or a def of this module) tests, resolved."""
        body: list[ast.AST] = []
        inner = scope
        if isinstance(check_fn, ast.Lambda):
            body, inner = [check_fn.body], self.module.scope_of.get(id(check_fn), scope)
        elif isinstance(check_fn, ast.Name):
            binding = self.module.binding(scope, check_fn.id, check_fn.lineno)
            if binding is not None and binding.kind == DEF:
                body, inner = list(own_statements(binding.node)), self.module.scope_of.get(id(binding.node), scope)
        for part in body:
            for node in ast.walk(part):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" and len(node.args) == 2:
                    tested = node.args[1]
                    for item in tested.elts if isinstance(tested, ast.Tuple) else [tested]:
                        qualified = self.module.qualified_name(item, inner)
                        if qualified is not None:
                            yield item, self.name(item, inner, frozenset({qualified.rsplit(".", 1)[-1]})) or qualified

    # -- which module an expression is --------------------------------------------------------

    def key(self, expr: ast.expr, scope: Scope) -> str | None:
        """What module an expression is, as far as one function can tell: the binding its name
        sees at that line, the iterable a loop variable walks, or its spelling."""
        if isinstance(expr, ast.Name):
            binding = last_binding_before(self.module, scope, expr.id, expr.lineno)
            return None if binding is None else self._binding_key(binding, scope, 0)
        if isinstance(expr, ast.Subscript):
            base = self.key(expr.value, scope) if isinstance(expr.value, (ast.Name, ast.Attribute, ast.Subscript)) else None
            index = ast.unparse(expr.slice) if isinstance(expr.slice, ast.Constant) else "*"
            return None if base is None else f"{base}[{index}]"
        if isinstance(expr, ast.Attribute):
            base = self.key(expr.value, scope) if isinstance(expr.value, (ast.Name, ast.Attribute, ast.Subscript)) else None
            return None if base is None else f"{base}.{expr.attr}"
        return None

    def _binding_key(self, binding: Binding, scope: Scope, depth: int) -> str:
        value = binding.value
        if binding.kind == LOOP and value is not None:
            return f"each {self._iterated(value, scope)}"
        if binding.kind == ASSIGN and isinstance(value, ast.Name) and depth < 8:  # `layer = block`: an alias
            aliased = last_binding_before(self.module, scope, value.id, binding.line)
            if aliased is not None and aliased is not binding:
                return self._binding_key(aliased, scope, depth + 1)
        return f"{binding.name}#{id(binding)}"

    def _iterated(self, iterable: ast.expr, scope: Scope) -> str:
        iterable = modules_iterated(iterable)
        key = self.key(iterable, scope) if isinstance(iterable, (ast.Name, ast.Attribute, ast.Subscript)) else None
        return key if key is not None else ast.unparse(iterable)

    def result_keys(self, call: ast.Call, scope: Scope) -> Iterator[str]:
        """What the statement `target = call(...)` binds the call's result to."""
        for statement in self._assignments(function_scope(scope)).get(id(call), []):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    for binding in scope.bindings.get(target.id, []):
                        if binding.value is call:
                            yield self._binding_key(binding, scope, 0)
                elif isinstance(target, (ast.Attribute, ast.Subscript)):
                    key = self.key(target, scope)
                    if key is not None:
                        yield key

    def _assignments(self, function: Scope) -> dict[int, list[ast.Assign]]:
        """id(call) -> the assignments of a function whose value is that call."""
        found = self._assigned.get(id(function))
        if found is None:
            found = self._assigned[id(function)] = {}
            for statement in own_statements(function.node):
                if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
                    found.setdefault(id(statement.value), []).append(statement)
        return found


def _may_shard(func: ast.expr) -> bool:
    """A callee whose name says it may shard (`fsdp_wrap`, `shard_layer`, fairscale's `wrap`,
    a class named `...FSDP...`): only those are resolved (resolving loads modules)."""
    leaf = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    lowered = leaf.lower()
    return "fsdp" in lowered or "shard" in lowered or leaf in ("wrap", "FullyShardedDataParallel")


def container_of(module: ModuleSymbols, scope: Scope, expr: ast.expr) -> ast.expr | None:
    """The container a module expression is an element of: `model.layers` for
    `model.layers[0]`, or for a loop variable walking `model.layers` (`.items()`, `enumerate`)."""
    if isinstance(expr, ast.Subscript):
        return expr.value
    if isinstance(expr, ast.Name):
        binding = last_binding_before(module, scope, expr.id, expr.lineno)
        if binding is not None and binding.kind == LOOP and isinstance(binding.value, ast.expr):
            return modules_iterated(binding.value)
    return None


def modules_iterated(iterable: ast.expr) -> ast.expr:
    """The modules a loop walks: `model.layers` for `model.layers`, `enumerate(model.layers)`,
    `model.layers.named_children()`."""
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" and iterable.args:
        iterable = iterable.args[0]
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and iterable.func.attr in _CHILDREN and not iterable.args:
        iterable = iterable.func.value
    return iterable
