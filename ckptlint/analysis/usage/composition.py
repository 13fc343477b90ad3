"""Where a checkpointed model meets the code around it: DDP, `autograd.grad`, `torch.func`,
Hugging Face's enabling calls (CKP303-CKP305), FSDP sharding and a second checkpointing of
the same model (CKP403-CKP405).

These hazards are not in what a region does but in how its model is used: wrapped by
`DistributedDataParallel(find_unused_parameters=True)`, differentiated by `autograd.grad`
or a `torch.func` transform, or switched to reentrant checkpointing by Hugging Face on a
model whose embeddings give no gradient. Each is a short chain of facts inside one
function (a model built from a project class, then wrapped or differentiated); a finding
needs every link known, so an unknown model, a mode read from a variable or a chain that
leaves the function is silent; two chains are followed out of it: a script's untyped model
parameter (model_parameters.py) and the units a setup function makes for a model whose own
forward checkpoints (fsdp_units.py).
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass
from typing import Iterable, Iterator

from ckptlint.analysis.flow.statements import function_scope
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.values import ClassObjectType, ClassType, Types
from ckptlint.analysis.usage.double_checkpointing import (
    DoubleCheckpointing,
    DoubleCheckpointings,
)
from ckptlint.analysis.usage.huggingface import EnablingHazard, HfEnablings, ShardedLayers
from ckptlint.analysis.usage.instance_guards import construction_call, runs_in
from ckptlint.analysis.usage.fsdp_units import FsdpUnits
from ckptlint.analysis.usage.model_parameters import ModelParameters
from ckptlint.analysis.usage.sac_forms import (
    ContextOf,
    HookedSelectiveCall,
    PacketEntry,
    RejectedContextFn,
    hooked_selective_calls,
    op_packets,
    rejected_context_fns,
)
from ckptlint.analysis.usage.sharding import FSDP2, ShardedCheckpoint, Shardings
from ckptlint.calls import CallFinder, CheckpointCall
from ckptlint.catalogue import LAYER_CLASS
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.symbols import (
    ASSIGN,
    DEF,
    UNPACK,
    Binding,
    ModuleSymbols,
    Scope,
)
from ckptlint.syntax import keyword_value, own_nodes, own_statements

DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
# what a name must end with to be resolved further: the class, or the alias projects re-export it as
# (`from .dist import DDP`); another alias re-exported under a new name is not followed
DDP_NAMES = frozenset({"DistributedDataParallel", "DDP"})
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
# the last words of every differentiating API: only callees named so are resolved project-wide
DIFFERENTIATING_NAMES = frozenset(name.rsplit(".", 1)[-1] for name in (*AUTOGRAD_GRAD, *AUTOGRAD_BACKWARD, *FUNCTION_TRANSFORMS))
MAX_FLOW = 64  # expressions followed back from a differentiated tensor


@dataclass(frozen=True)
class ModelHazard:
    """A call (DDP, a differentiation) whose model or tensor reaches checkpoint calls."""

    node: ast.Call
    what: str  # the callee as written: `torch.autograd.grad`, `.backward(inputs=...)`, `torch.func.grad`
    checkpoints: tuple[CheckpointCall, ...]
    model: str  # the model class, or "" when the checkpoint call is in the same function
    every_mode: bool = False  # a transform that fails on non-reentrant regions too
    reached_twice: str = ""  # DDP without find_unused_parameters: `self.norm` (line 12) also called outside its region (line 15)


# Lightning's FSDP strategy (fabric and trainer), which shards `auto_wrap_policy`'s classes and
# then checkpoint-wraps `activation_checkpointing_policy`'s (read in lightning 2.6 strategies/fsdp.py)
LIGHTNING_FSDP_STRATEGIES = frozenset(
    {
        f"{package}.strategies.{module}FSDPStrategy"
        for package in ("lightning.fabric", "lightning.pytorch", "lightning_fabric", "pytorch_lightning")
        for module in ("", "fsdp.")
    }
)
STRATEGY_NAMES = frozenset({"FSDPStrategy"})


class Composition:
    """The CKP303-CKP305, CKP403-CKP405 and CKP502/CKP503/CKP505 facts of one module, read through the run's shared analysis state."""

    def __init__(self, module: ModuleSymbols, calls: list[CheckpointCall], finder: CallFinder, inference: TypeInference):
        self.module = module
        self.calls = calls
        self.finder = finder
        self.inference = inference
        self.classes: ClassIndex = inference.classes
        self._by_node = {id(call.node): call for call in calls}
        self._class_calls: dict[int, list[CheckpointCall]] = {}  # class scope -> its checkpoint calls
        self._module_calls: dict[int, list[CheckpointCall]] = {id(module): calls}
        self.models = ModelParameters(module, inference)
        # through a proxy: a bound method would make a cycle, and the analysis runs with the cyclic
        # garbage collector off (each module's Composition, and all it reaches, would stay)
        composition = weakref.proxy(self)
        self.shardings = Shardings(
            module,
            lambda func, scope, last_words: composition._name(func, scope, last_words),
            lambda expr, scope, qualified: composition._instance_of(expr, scope, qualified),
            lambda func, scope: composition.units.sharding_helper(func, scope),
        )
        self.units = FsdpUnits(
            module,
            inference,
            finder,
            self.models,
            lambda func, scope, last_words: composition._name(func, scope, last_words),
            lambda types: composition._model_checkpoints(types, reentrant_only=False),
            lambda info: composition._checkpoints_in_class(info),
        )

    # -- CKP303 -----------------------------------------------------------------------------

    def ddp_wrappings(self) -> Iterator[ModelHazard]:
        """`DistributedDataParallel(model, find_unused_parameters=True)` around a model whose
        code checkpoints reentrantly; without it (and without `static_graph=True`), a model
        whose reentrant region's module is also called outside the region: its parameters are
        marked ready by the outer backward and again by the region's inner one."""
        for call, scope in self.module.calls:
            if self._name(call.func, scope, DDP_NAMES) not in DDP:
                continue
            model = call.args[0] if call.args else keyword_value(call, "module")
            if model is None:
                continue
            find_unused = _literal(call, "find_unused_parameters", False)
            types, built = self._model_of(model, scope)
            if find_unused is True:
                checkpoints, name = self._model_checkpoints(types, reentrant_only=True, built=built)
                applied = tuple(self._applied_before(model, scope, call))
                checkpoints, name = _unique((*checkpoints, *applied)), name or (f"`{ast.unparse(model)}`" if applied else "")
                if checkpoints:
                    yield ModelHazard(call, "DistributedDataParallel", checkpoints, name)
            elif find_unused is False and _literal(call, "static_graph", False) is False:
                checkpoints, name = self._model_checkpoints(types, reentrant_only=True, built=built)
                for checkpoint_call in checkpoints:
                    twice = self._reached_twice(checkpoint_call)
                    if twice:
                        yield ModelHazard(call, "DistributedDataParallel", (checkpoint_call,), name, reached_twice=twice)
                        break

    def _applied_before(self, model: ast.expr, scope: Scope, wrapper: ast.Call) -> Iterator[CheckpointCall]:
        """Reentrant checkpointing applied to the same name earlier in the function:
        `apply_activation_checkpointing(model, checkpoint_wrapper_fn=<reentrant>)` before
        `DistributedDataParallel(model, ...)` (whatever class the name holds)."""
        if not isinstance(model, ast.Name):
            return
        for call in self.calls:
            if call.scope is not scope or call.reentrant is not True or getattr(call.node, "lineno", 0) > wrapper.lineno:
                continue
            target = call.applied_to
            if isinstance(target, ast.Name) and target.id == model.id:
                yield call

    def _reached_twice(self, call: CheckpointCall) -> str:
        """How a reentrant region `self.norm` reaches its parameters more than once per step:
        the class also calls `self.norm(...)` outside a region, checkpoints it in another call,
        or checkpoints it on every pass of a loop. Each makes DDP mark them ready twice."""
        region = call.region
        owner = self.classes.enclosing_class(call.module, call.scope)
        if not (isinstance(region, ast.Attribute) and isinstance(region.value, ast.Name) and region.value.id == "self") or owner is None:
            return ""
        line = getattr(call.node, "lineno", 0)
        name = f"`self.{region.attr}`"
        for statement in (statement for method in owner.methods() for statement in own_statements(method.node)):
            if isinstance(statement, (ast.For, ast.While)) and any(node is call.node for body in statement.body for node in ast.walk(body)):
                return f"{name} is checkpointed on every pass of the loop at line {statement.lineno}"
            for node in ast.walk(statement):
                if isinstance(node, ast.Call) and ast.dump(node.func) == ast.dump(region):
                    return f"{name} is the region at line {line} and is also called outside it at line {node.lineno}"
        for other in self._checkpoints_in_class(owner):
            if other.node is not call.node and _counts(other, True) and other.region is not None and ast.dump(other.region) == ast.dump(region):
                return f"{name} is checkpointed at line {line} and again at line {getattr(other.node, 'lineno', 0)}"
        return ""

    # -- CKP304 -----------------------------------------------------------------------------

    def differentiations(self) -> Iterator[ModelHazard]:
        """`autograd.grad`, `backward(inputs=...)` and `torch.func` transforms over checkpointed work."""
        for call, scope in self.module.calls:
            name = self._name(call.func, scope, DIFFERENTIATING_NAMES)
            if name in AUTOGRAD_GRAD or name in AUTOGRAD_BACKWARD:
                if name in AUTOGRAD_BACKWARD and keyword_value(call, "inputs") is None and len(call.args) < 3:
                    continue
                differentiated = call.args[0] if call.args else keyword_value(call, "outputs" if name in AUTOGRAD_GRAD else "tensors")
                what = name
            elif isinstance(call.func, ast.Attribute) and call.func.attr == "backward" and keyword_value(call, "inputs") is not None:
                differentiated, what = call.func.value, ".backward(inputs=...)"
            elif name in FUNCTION_TRANSFORMS:
                function = call.args[0] if call.args else keyword_value(call, "func")
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
                types, built = self._model_of(callee, scope)
                checkpoints, name = self._model_checkpoints(types, reentrant_only, built)
                if checkpoints:
                    found.extend(checkpoints)
                    model = model or name
        return _unique(found), model

    def _calls_flowing_into(self, expr: ast.AST, scope: Scope) -> Iterator[ast.Call]:
        """Every call in `expr` and in the values its names were last bound to in `scope`, not
        through `.detach()` or `.data` (autograd does not go back through them)."""
        stack: list[ast.AST] = [expr]
        seen: set[int] = set()
        while stack and len(seen) < MAX_FLOW:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for child in _differentiated_nodes(node):
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
                for statement in own_statements(binding.node):
                    checkpoints, name = self._flow_checkpoints(statement, inner, reentrant_only)
                    found.extend(checkpoints)
                    model = model or name
                return _unique(found), model
        if isinstance(function, (ast.Name, ast.Attribute)):
            return self._model_checkpoints(self.inference.types(function, self.module, scope), reentrant_only)
        return (), ""

    # -- models -----------------------------------------------------------------------------

    def _model_classes(self, expr: ast.expr, scope: Scope) -> list[str]:
        """The project classes (by name) a model expression holds (huggingface.ModelClasses)."""
        return sorted(t.name for t in self.models.module_types(expr, scope) if isinstance(t, ClassType) and not t.built_by)

    def _model_checkpoints(self, types: Types, reentrant_only: bool, built: ClassType | None = None) -> tuple[tuple[CheckpointCall, ...], str]:
        """The checkpoint calls in the methods of a model's project classes and of the modules
        it registers (each class with its bases), and the model's class name. For a model `built`
        by a call the code shows, the calls of its own class that its flags never reach are left out."""
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
                found.extend(
                    call
                    for call in self._checkpoints_in_class(cls)
                    if _counts(call, reentrant_only) and (item is not built or runs_in(self.inference, call, item))
                )
        return _unique(found), sorted(t.short for t in roots)[0] if found else ""

    def _model_of(self, model: ast.expr, scope: Scope) -> tuple[Types, ClassType | None]:
        """What a model expression holds, and the instance itself when this code builds it (`model = Net(8)`)."""
        built = self._built(model, scope)
        return (frozenset({built}), built) if built is not None else (self.models.model_types(model, scope), None)

    def _built(self, model: ast.expr, scope: Scope) -> ClassType | None:
        """The project module a name holds when this code builds it (`model = Net(8)`), as built."""
        call = construction_call(self.module, model, scope)
        if call is None:
            return None
        classes = [t for t in self.inference.types(call.func, self.module, scope) if isinstance(t, ClassObjectType) and self.classes.by_name(t.name) is not None]
        if len(classes) != 1:
            return None
        return self.inference.built_instance(classes[0].name, call, self.module, scope)

    def _checkpoints_in_class(self, info: ClassInfo) -> list[CheckpointCall]:
        key = id(info.scope)
        cached = self._class_calls.get(key)
        if cached is None:
            cached = [
                call
                for call in self._calls_of(info.module)
                if not isinstance(call.node, ast.ClassDef) and self.classes.enclosing_class(info.module, call.scope) is info
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
        function where nothing that always runs with it makes the inputs require grad."""
        return HfEnablings(self.module, self.finder, self.classes, self._model_classes).hazards()

    # -- CKP403, CKP405 ---------------------------------------------------------------------

    def sharded_checkpoints(self) -> Iterator[ShardedCheckpoint]:
        """Each checkpoint call of a module that FSDP shards in the same function, with the
        sharding; and each checkpoint call in a model's own code of a block that a function here
        shards with `fully_shard` from outside (`fully_shard(model.layers[0])`, or a loop over
        `model.layers`, while the model's forward runs `checkpoint(layer, x)` over `self.layers`):
        the block is a unit before any forward runs, so the checkpoint wraps it."""
        if not self.shardings.mentions_sharding:
            return
        for call in self.calls:
            yield from self.shardings.covering(call)
        for shardings in self.shardings.by_function.values():
            for sharding in shardings:
                yield from self.units.checkpoints_around(sharding)

    def hf_sharded_layers(self) -> Iterator[ShardedLayers]:
        """`model.gradient_checkpointing_enable()` on a transformers model whose decoder layers the
        same function shards with `fully_shard` (huggingface.ShardedLayers)."""
        if not self.shardings.mentions_sharding:
            return iter(())
        return HfEnablings(self.module, self.finder, self.classes).sharded_layers(FSDP2)

    def strategy_wraps(self) -> Iterator[tuple[ast.Call, str, str]]:
        """Lightning's `FSDPStrategy(auto_wrap_policy={A}, activation_checkpointing_policy={C})`
        where a class C it checkpoints holds a module of a class A it shards: Lightning shards the
        A units first and then wraps each C in a checkpoint wrapper, around those units. Yields
        the call, C and A (short names)."""
        if "activation_checkpointing_policy" not in self.module.source.code:
            return
        for call, scope in self.module.calls:
            if self._name(call.func, scope, STRATEGY_NAMES) not in LIGHTNING_FSDP_STRATEGIES:
                continue
            wrapped = self.units.policy_classes(keyword_value(call, "auto_wrap_policy"), scope)
            checkpointed = self.units.policy_classes(keyword_value(call, "activation_checkpointing_policy"), scope)
            for name in sorted(checkpointed - wrapped):
                inside = {t.name for t in self.inference.construction.descendants(self.inference, frozenset({ClassType(name)})) if isinstance(t, ClassType)}
                held = sorted(inside & wrapped)
                if held:
                    yield call, name.rpartition(".")[2], held[0].rpartition(".")[2]
                    break

    def reentrant_sharded_models(self) -> Iterator[ModelHazard]:
        """`fully_shard(model)` of a model whose project classes checkpoint reentrantly."""
        for shardings in self.shardings.by_function.values():
            for sharding in shardings:
                if sharding.fsdp2 and sharding.module is not None:
                    types, built = self._model_of(sharding.module, sharding.scope)
                    checkpoints, name = self._model_checkpoints(types, reentrant_only=True, built=built)
                    if checkpoints:
                        yield ModelHazard(sharding.node, "fully_shard", checkpoints, name)

    def _instance_of(self, expr: ast.expr, scope: Scope, qualified: str) -> bool:
        """Whether the module `expr` is built from the class `qualified` or a project subclass of it."""
        for item in self.models.module_types(expr, scope):
            if isinstance(item, ClassType) and not item.built_by:
                info = self.classes.by_name(item.name)
                if item.name == qualified or (info is not None and self.classes.inherits_from(info, frozenset({qualified}))):
                    return True
        return False

    # -- CKP502, CKP503, CKP505 (analysis/usage/sac_forms.py) ----------------------------------------

    def op_packets(self) -> Iterator[PacketEntry]:
        """`torch.ops.aten.mm` (no overload) in a selective-checkpoint policy's ops."""
        return op_packets(self.module)

    def rejected_context_fns(self, context_of: ContextOf) -> Iterator[RejectedContextFn]:
        """A `context_fn` torch.compile cannot trace, on a call that runs compiled."""
        return rejected_context_fns(self.calls, context_of)

    def hooked_selective_calls(self, context_of: ContextOf) -> Iterator[HookedSelectiveCall]:
        """Selective checkpointing under an outer saved-tensors hook."""
        return hooked_selective_calls(self.calls, context_of)

    # -- CKP404 -----------------------------------------------------------------------------

    def double_checkpointings(self) -> Iterator[DoubleCheckpointing]:
        """A model checkpointed by its own gradient checkpointing and by FSDP's or accelerate's."""
        enablings = HfEnablings(self.module, self.finder, self.classes)
        return DoubleCheckpointings(self.module, self.calls, self._name, enablings.is_trainer, self._own_checkpoints).hazards()

    def _own_checkpoints(self, built: Binding, scope: Scope) -> str:
        """How the model a binding builds checkpoints itself on every forward (`Net, whose own code
        checkpoints at net.py:12`), or "" when its project classes hold no checkpoint call outside an `if`."""
        checkpoints, name = self._model_checkpoints(self.inference.types(built.value, self.module, scope), reentrant_only=False)
        unconditional = [call for call in checkpoints if _unconditional(call)]
        if not unconditional:
            return ""
        first = unconditional[0]
        return f"{name}, whose own code checkpoints at {first.path}:{first.line}"

    def _name(self, func: ast.expr, scope: Scope, last_words: frozenset[str] | None = None) -> str | None:
        """The callee's project-wide name; with `last_words`, only for a callee whose
        module-local name ends in one of them (the project-wide name loads modules: asked for
        every call of transformers, it cost a third of a cold run)."""
        if last_words is not None and not self._may_end_in(func, scope, last_words):
            return None
        name = self.module.qualified_name(func, scope, noting=last_words is None)
        if name is None or (last_words is not None and name.rsplit(".", 1)[-1] not in last_words):
            return None
        if last_words is not None:
            self.module.qualified_name(func, scope)  # the name is read on: note the imports it went through
        return self.finder.project.canonical_name(name)

    def _may_end_in(self, func: ast.expr, scope: Scope, last_words: frozenset[str]) -> bool:
        """Whether the callee's module-local name can end in one of `last_words`, read off the
        syntax: an attribute's name is its last word, and so is an unbound name's (a builtin,
        or a star import's, whose lookup would load every star-imported module); only a bound
        name can be an alias of another (`DDP` for `DistributedDataParallel`)."""
        if isinstance(func, ast.Attribute):
            return func.attr in last_words
        if isinstance(func, ast.Name):
            return func.id in last_words or self.module.binding(scope, func.id, func.lineno) is not None
        return False


def _literal(call: ast.Call, name: str, default: object) -> object:
    """A keyword's literal value, `default` when it is not passed, None when it is not a literal."""
    value = keyword_value(call, name)
    if value is None:
        return default
    return value.value if isinstance(value, ast.Constant) else None


def _counts(call: CheckpointCall, reentrant_only: bool) -> bool:
    """Whether a checkpoint call takes part: any recognised call, or only a reentrant one.
    Hugging Face's own calls are left out: they run only once gradient checkpointing is
    enabled, which CKP305 follows."""
    if call.api.region_kind == LAYER_CLASS or call.api.library == "transformers":
        return False
    return call.reentrant is True if reentrant_only else True


def _unconditional(call: CheckpointCall) -> bool:
    """Whether the checkpoint call runs whenever its function does: under no `if` (a flag that
    chooses whether to checkpoint leaves it to the caller)."""
    line = call.line
    for node in own_nodes(function_scope(call.scope).node):
        if isinstance(node, ast.If) and any(first.lineno <= line <= (last.end_lineno or last.lineno) for body in (node.body, node.orelse) if body for first, last in [(body[0], body[-1])]):
            return False
        if isinstance(node, ast.IfExp) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return False
    return True


def _differentiated_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` of `node`, leaving out what `x.detach()` and `x.data` cut from the graph."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute) and current.func.attr in _DETACHING:
            continue
        if isinstance(current, ast.Attribute) and current.attr == "data":
            continue
        yield current
        stack.extend(ast.iter_child_nodes(current))


_DETACHING = frozenset({"detach", "detach_"})


def _unique(calls: Iterable[CheckpointCall]) -> tuple[CheckpointCall, ...]:
    seen: dict[int, CheckpointCall] = {}
    for call in calls:
        seen.setdefault(id(call.node), call)
    return tuple(sorted(seen.values(), key=lambda c: (c.path, c.line, c.column)))


