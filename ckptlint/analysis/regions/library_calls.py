"""What calls into torch, NumPy, `random` and builtins do inside a region.

The interpreter (interpreter.py) follows project code itself and asks `LibraryCalls` about
everything else: a call by qualified name (`random.random()`, `torch.rand(...)`,
`F.batch_norm(...)`), a method whose meaning comes from the library (`.to(device)`,
`.add_()`, `.append()`, a NumPy generator's `.normal()`), a torch module's call (BatchNorm,
Dropout). Answers are effects recorded on the interpreter and the value the call returns;
`None` means "not a library call: interpret it as project code". The facts themselves
(which names draw, which methods mutate, which modules keep running statistics) are data
in torch_api.py, so a new library fact is a table entry plus, at most, a branch here.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ckptlint.analysis.flow.accumulation import decision_use, result_names
from ckptlint.analysis.flow.integers import INDICES, is_integer, kind_of
from ckptlint.analysis.flow.routing import Returned, handed_on, index_names, index_position, returned_indices, routing_use
from ckptlint.analysis.flow.saved_outputs import producer_of
from ckptlint.analysis.knowledge import aten_ops, collectives, torch_api
from ckptlint.analysis.regions.protocol import Interpreter
from ckptlint.analysis.regions.summary import (
    COLLECTIVE_OP,
    DEVICE_MOVE,
    NONDETERMINISTIC_OP,
    PEER_EXCHANGE,
    RANDOM_DRAW,
    RUNNING_STATS,
    SAVED_OUTPUT_MUTATED,
    TENSOR_STATE,
    TORCH_RANDOM,
    Effect,
    HandedIndices,
    ReturnedSelection,
)
from ckptlint.analysis.semantics import registries
from ckptlint.analysis.semantics.values import (
    CHECKPOINT_PHASE,
    CONST,
    CONST_VALUE,
    GRAD_MODE,
    LOCAL,
    LOCAL_VALUE,
    NONE_TYPE,
    SAME_DEVICE,
    ClassType,
    ContainerType,
    RngType,
    TupleType,
    Value,
    Volatility,
    constructed_rng,
    element_types,
    merge,
    ordered,
)
from ckptlint.symbols import ASSIGN, DEF
from ckptlint.syntax import keyword_value

_ITERATION_BUILTINS = frozenset({"next", "iter", "map", "filter", "zip", "enumerate", "reversed", "sorted"})


class LibraryCalls:
    """The library half of interpreting a function: effects and results of library calls.

    Stateless: each method is given the interpreter (`run`) it records effects on. (Holding
    it would make a reference cycle per interpreted function, and the analysis runs with the
    cyclic garbage collector off.)
    """

    # -- calls by qualified name ------------------------------------------------

    def function(self, run: Interpreter, name: str, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value | None:
        short = torch_api.short_name(name)
        callee = ast.unparse(node.func)
        op = collectives.FUNCTIONS.get(name)
        if op is not None and not _defined_in_project(run, name):  # the installed library's wrapper: not followed
            self._communication(run, name, op, node, arguments, keywords)
            return LOCAL_VALUE
        if torch_api.is_python_draw(name):
            run.add(RANDOM_DRAW, node, "python-global", callee=callee)
            return _drawn(callee)
        if torch_api.is_numpy_draw(name):
            run.add(RANDOM_DRAW, node, "numpy-global", callee=callee)
            return _drawn(callee)
        rng = constructed_rng(name, node)
        if rng is not None:
            return Value(types=frozenset({rng}))
        if name in torch_api.TORCH_RANDOM_FUNCTIONS or (
            name == "torch.nn.functional.scaled_dot_product_attention" and _has_dropout(node)
        ):
            run.add(TORCH_RANDOM, node, "function", callee=callee)
        if name in torch_api.CLOCK_FUNCTIONS:
            return Value(volatile=frozenset({Volatility(f"wall-clock time (`{callee}()`)")}))
        if name in torch_api.GRAD_MODE_FUNCTIONS:
            return Value(volatile=frozenset({GRAD_MODE}))
        if torch_api.is_phase_predicate(name):
            return Value(volatile=frozenset({CHECKPOINT_PHASE}))
        if name == "torch.nn.functional.batch_norm":
            self._functional_batch_norm(run, node, arguments, keywords)
            return LOCAL_VALUE
        if name.startswith("builtins."):
            return self._builtin(run, short, node, arguments, keywords)
        if name.startswith("torch."):
            return self._torch(run, name, node, arguments, keywords)
        return None

    def _builtin(self, run: Interpreter, short: str, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value | None:
        if short == "getattr" and arguments:
            attribute = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
            if isinstance(attribute, str):
                return run.attribute_of(arguments[0], attribute)
            names = registries.keys(arguments[1].types) if len(arguments) > 1 else None
            if names is not None:  # `getattr(self, self.norm1_name)`: the names it can hold
                found = merge([run.attribute_of(arguments[0], name) for name in sorted(names)])
                return found if len(names) == 1 else replace(found, path=f"{arguments[0].path}.<{ast.unparse(node.args[1])}>")
            if len(node.args) > 1:  # `getattr(self, f"layer{i}")`: any module the name can denote
                types = run.inference.dynamic_attribute_types(arguments[0].types, node.args[1])
                return Value(arguments[0].origins, types, arguments[0].volatile, path=f"{arguments[0].path}.<{ast.unparse(node.args[1])}>")
            return Value(arguments[0].origins, volatile=arguments[0].volatile, path=arguments[0].path)
        if short == "setattr" and arguments:
            attribute = node.args[1].value if len(node.args) > 2 and isinstance(node.args[1], ast.Constant) else None
            if isinstance(attribute, str):  # a plain store under a fixed name
                run.store_attribute(arguments[0], attribute, node, "sets (with `setattr()`)", arguments[2])
            elif len(node.args) > 2 and not _reads_back(run.scope.node, node):
                # `setattr(self, f"{name}_fp8", w8)`: a plain store under a computed name, which the replay
                # repeats identically unless its value reads what the object holds under such a name
                name = f"<{ast.unparse(node.args[1])}>"  # an attribute of its own: a read of another one is not a read of it
                run.store_attribute(arguments[0], name, node, "sets (with `setattr()` under a computed name)", arguments[2])
            else:
                run.mutate(arguments[0], node, "`setattr()` on")
            return CONST_VALUE
        if short == "super":
            return CONST_VALUE
        if short == "zip" and arguments and not keywords and not any(isinstance(a, ast.Starred) for a in node.args):
            pairs = TupleType(tuple(element_types(a.types) for a in arguments))  # `for resnet, attn in zip(self.resnets, self.attentions)`
            return _sequence_of(pairs)
        if short == "enumerate" and arguments and not any(isinstance(a, ast.Starred) for a in node.args):
            return _sequence_of(TupleType((frozenset(), element_types(arguments[0].types))))
        if short in torch_api.VOLATILITY_PRESERVING_BUILTINS:
            return Value(volatile=frozenset().union(*(v.volatile for v in [*arguments, *keywords.values()])))
        return None if short in _ITERATION_BUILTINS else LOCAL_VALUE

    def _torch(self, run: Interpreter, name: str, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value:
        callee = ast.unparse(node.func)
        nondeterministic = aten_ops.NONDETERMINISTIC_FUNCTIONS.get(name)
        if nondeterministic is not None:
            self._nondeterministic(run, nondeterministic, torch_api.short_name(name), node, callee, method=False)
        if node.args and (name in aten_ops.INPLACE_FUNCTIONS or (name in aten_ops.INPLACE_KEYWORD_FUNCTIONS and _true_keyword(node, "inplace"))):
            self._saved_output_change(run, node.args[0], node, f"`{callee}(..., inplace=True)`" if name in aten_ops.INPLACE_KEYWORD_FUNCTIONS else f"`{callee}()`")
        if "out" in keywords:
            run.mutate(keywords["out"], node, f"`{callee}(out=...)` writes into", tensor=True)
        if name.startswith("torch.nn.init.") and name.endswith("_") and arguments:
            run.mutate(arguments[0], node, f"in-place `{callee}()` on", tensor=True)
        short = torch_api.short_name(name)
        device = keyword_value(node, "device")
        described = self._explicit_device(run, device) if device is not None and short in torch_api.TORCH_FACTORIES else None
        if described is not None:
            run.add(DEVICE_MOVE, node, "factory", callee=callee, device=described)
        if short[:1].isupper():
            if name.startswith("torch.nn.") and short in torch_api.TORCH_CONTAINERS:
                return Value(types=run.inference.types(node, run.module, run.scope))
            return Value(types=frozenset({run.inference.instance(name, node)}))
        if short in torch_api.VIEW_METHODS and arguments:
            return Value(arguments[0].origins, arguments[0].types, path=arguments[0].path, attribute=arguments[0].attribute)
        return LOCAL_VALUE

    def _functional_batch_norm(self, run: Interpreter, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> None:
        running = keywords.get("running_mean") or (arguments[1] if len(arguments) > 1 else None)
        training = keyword_value(node, "training")
        if training is None and len(node.args) > 5:
            training = node.args[5]
        if running is not None and running.outlives_region and not (isinstance(training, ast.Constant) and not training.value):
            run.add(
                RUNNING_STATS, node, "functional", callee=ast.unparse(node.func), subject=running.path or ""
            )

    def _communication(
        self, run: Interpreter, name: str, op: collectives.CommunicationOp, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]
    ) -> None:
        """A collective (CKP401), or a point-to-point op or an all-to-all whose split sizes the
        region computes (CKP402): the replay communicates again."""
        facts: tuple[tuple[str, str], ...] = (("callee", ast.unparse(node.func)), ("family", op.family))
        splits = _computed_split_sizes(run, op, node, arguments, keywords)
        if op.kind == collectives.POINT_TO_POINT:
            kind, variant = PEER_EXCHANGE, "point-to-point"
        elif splits is not None:
            kind, variant = PEER_EXCHANGE, "computed-splits"
            facts += (("splits", ast.unparse(splits)),)
        else:
            kind, variant = COLLECTIVE_OP, "wrapper" if name.startswith(collectives.FRAMEWORK_PREFIXES) else "collective"
        run.record(Effect(kind, run.module, node, variant, facts, saved_as=op.saved_as))

    # -- selective checkpointing (CKP501, CKP504) -------------------------------

    def augmented_tensor(self, run: Interpreter, target: ast.Name, node: ast.AugAssign, symbol: str) -> None:
        """`h += b`: in place on a tensor (CKP501 when `h` is a saved op's output)."""
        self._saved_output_change(run, target, node, f"`{symbol}`")

    def _saved_output_change(self, run: Interpreter, tensor: ast.expr, node: ast.AST, how: str) -> None:
        """An in-place op on the output of an op a policy may save (CKP501 reports it when the
        region's policy saves that op)."""
        producer = producer_of(run.module, run.scope, tensor, node)
        if producer is None:
            return
        facts = (("callee", how), ("subject", ast.unparse(tensor)), ("producer", producer.text), ("op", producer.op))
        run.record(Effect(SAVED_OUTPUT_MUTATED, run.module, node, "reshaped" if producer.reshaped else "direct", facts, saved_as=frozenset({producer.op})))

    def _nondeterministic(self, run: Interpreter, op: aten_ops.NondeterministicOp, short: str, node: ast.Call, callee: str, method: bool) -> None:
        """A selection whose indices route, or an accumulation whose result reaches a routing
        decision, whose recompute may differ from the forward's (CKP504, unless the region's
        policy saves the op). Not a sort of a selection's indices (the selection is the one
        reported), an accumulation into integers (exact), nor an op on an inference-only path."""
        given = keyword_value(node, op.only_with) if op.only_with else None
        if op.only_with and (given is None or _false_constant(given)):
            return  # `bincount` without weights counts exactly; `index_put` without accumulate writes
        if op.not_with and _true_keyword(node, op.not_with):
            return
        function = run.scope.node
        facts: tuple[tuple[str, str], ...] = (("callee", callee), ("family", op.family), ("op", op.op))
        returned: Returned | None = None
        handed: list[tuple[ast.Call, int | str]] = []
        if op.kind == aten_ops.SELECTION:
            sorted_input = aten_ops.sorted_input(node, method) if short in aten_ops.SORTS else None
            if sorted_input is not None and kind_of(function, sorted_input) == INDICES:
                return  # a sort of a selection's indices recomputes what the forward did exactly when the selection does: the selection is reported
            used = routing_use(function, node, short)
            if used is None:
                returned = returned_indices(function, node, index_position(short))  # the caller may route them
                handed = handed_on(function, node, index_position(short))  # or a callee they are handed to
                if returned is None and not handed:
                    return
            else:
                facts += (("use", ast.unparse(used)), ("use_line", str(getattr(used, "lineno", node.lineno))))
        else:
            if any(is_integer(function, operand) for operand in aten_ops.accumulated_operands(node, short, method)):
                return  # integer sums are exact in any order
            decision = decision_use(function, node, short)
            if decision is None:
                return  # sums that differ in the last bits and decide nothing change nothing the backward reads
            facts += (("feeds", decision.feeds), ("use", ast.unparse(decision.node)), ("use_line", str(getattr(decision.node, "lineno", node.lineno))))
        follow = index_names if op.kind == aten_ops.SELECTION else result_names
        if run.inference_only(node, lambda: follow(function, node, short)):
            return  # eval mode, or grad off with a result that stays there: the backward differentiates nothing it decides
        effect = Effect(NONDETERMINISTIC_OP, run.module, node, op.kind, facts, saved_as=frozenset({op.op}))
        if returned is not None or handed:
            if returned is not None:
                run.returned_selections.append(ReturnedSelection(effect, returned.position))  # reported where a caller routes them
            run.handed_indices.extend(HandedIndices(effect, call, slot) for call, slot in handed)  # or where a callee does
        else:
            run.record(effect)

    # -- methods whose meaning comes from the library ---------------------------

    def method(self, run: Interpreter, receiver: Value, method: str, node: ast.Call, written: Value = CONST_VALUE) -> Value | None:
        """Random draws on generator objects, device moves, in-place tensor ops, container
        mutators, buffer registration; None for any other method. `written`: what the call's
        arguments give (the value an overwrite such as `.copy_(v)` puts in the tensor)."""
        text = f"{receiver.path}.{method}" if receiver.path else method
        rngs = [t for t in receiver.types if isinstance(t, RngType)]
        if rngs and method not in torch_api.RNG_METHODS_NOT_DRAWS:
            if receiver.outlives_region or any(not rng.seeded for rng in rngs):
                library = "Python" if rngs[0].library == "python" else "NumPy"
                run.add(RANDOM_DRAW, node, "generator", callee=text, library=library)
                return _drawn(text)
            return LOCAL_VALUE
        op = collectives.TENSOR_METHODS.get(method)
        if op is not None and not self._project_method(run, receiver, method):  # DTensor's
            facts = (("callee", text), ("family", op.family))
            run.record(Effect(COLLECTIVE_OP, run.module, node, "tensor-method", facts, saved_as=op.saved_as))
            return LOCAL_VALUE
        subject = receiver.path or "a tensor"
        if method in torch_api.DEVICE_MOVE_METHODS:
            run.add(DEVICE_MOVE, node, "method", method=method, subject=subject)
            return LOCAL_VALUE
        if method == "to":
            device = node.args[0] if node.args else keyword_value(node, "device")
            described = self._explicit_device(run, device) if device is not None else None
            if described is not None:
                run.add(DEVICE_MOVE, node, "to", subject=subject, device=described)
            elif device is not None and isinstance(node.func, ast.Attribute) and self._built_on_host(run, node.func.value) and not _fills_a_cache(run.scope.node):
                run.add(DEVICE_MOVE, node, "host-built", device=ast.unparse(device))
            return LOCAL_VALUE
        nondeterministic = aten_ops.NONDETERMINISTIC_METHODS.get(method)
        if nondeterministic is not None and isinstance(node.func, ast.Attribute) and not self._project_method(run, receiver, method):
            if not any(isinstance(t, ContainerType) for t in receiver.types):  # a list's `.sort()`
                self._nondeterministic(run, nondeterministic, method, node, text, method=True)
        if method.endswith("_") and not method.startswith("_") and method not in torch_api.NOT_INPLACE:
            if isinstance(node.func, ast.Attribute):
                self._saved_output_change(run, node.func.value, node, f"`.{method}()`")
            if method in torch_api.OVERWRITE_METHODS:
                run.overwrite(receiver, node, f"in-place `.{method}()` on", written)
            else:
                run.mutate(receiver, node, f"in-place `.{method}()` on", tensor=True)
            if method in torch_api.TORCH_RANDOM_INPLACE_METHODS:
                run.add(TORCH_RANDOM, node, "method", method=method)
            return receiver
        if method == "setdefault" and not self._project_method(run, receiver, method):
            # a memo fill: the replay finds the key the forward set and returns what it stored
            return Value(receiver.origins, element_types(receiver.types), path=f"{text}()")
        if method in torch_api.CONTAINER_MUTATORS or (
            method in torch_api.CONTAINER_ONLY_MUTATORS and any(isinstance(t, ContainerType) for t in receiver.types)
        ):
            run.mutate(receiver, node, f"`.{method}()` on")
            if method in ("pop", "setdefault", "popitem", "popleft"):
                return Value(receiver.origins, element_types(receiver.types), path=f"{text}()")
            return LOCAL_VALUE
        if method in ("register_buffer", "register_parameter"):
            run.mutate(receiver, node, f"`.{method}()` on", tensor=True)
            return CONST_VALUE
        return None

    def _project_method(self, run: Interpreter, receiver: Value, method: str) -> bool:
        """The receiver may be an instance of a project class that defines `method` itself."""
        classes = run.analysis.classes
        for item in receiver.types:
            if isinstance(item, ClassType):
                info = classes.by_name(item.name)
                if info is not None and classes.find_method(info, method) is not None:
                    return True
        return False

    # -- torch modules ----------------------------------------------------------

    def module_call(self, run: Interpreter, path: str, item: ClassType, node: ast.Call) -> bool:
        """Effects of calling a torch module (running statistics, dropout); True when the
        module is a dropout layer, whose forward needs no further interpretation."""
        if item.running_stats:
            self.running_stats(run, node, path, item.short)
        if torch_api.torch_class(item.name) in torch_api.TORCH_DROPOUT_MODULES:
            self.dropout(run, node, item.short)
            return True
        return False

    def inherited_forward(self, run: Interpreter, node: ast.Call, ancestors: list[str], short: str) -> None:
        """A project module whose forward is a torch base class's (a Dropout subclass)."""
        if any(torch_api.torch_class(a) in torch_api.TORCH_DROPOUT_MODULES for a in ancestors):
            self.dropout(run, node, short)

    def torch_super_forward(self, run: Interpreter, node: ast.Call, path: str, ancestor: str) -> None:
        """`super().forward(x)` reaching a torch norm class: its statistics update."""
        short = torch_api.torch_class(ancestor)
        if short in torch_api.TORCH_BATCH_NORM_MODULES:
            self.running_stats(run, node, path, short)

    def dropout(self, run: Interpreter, node: ast.Call, short: str) -> None:
        run.add(TORCH_RANDOM, node, "module", callee=ast.unparse(node.func), module_class=short)

    def running_stats(self, run: Interpreter, node: ast.AST, path: str, short: str) -> None:
        run.add(RUNNING_STATS, node, "module", subject=path, module_class=short)

    # -- devices ----------------------------------------------------------------

    def _built_on_host(self, run: Interpreter, expr: ast.expr, hops: int = 2) -> bool:
        """Whether a tensor is made in the region by a torch factory with no `device=` (on the CPU),
        each call: `torch.tril(torch.ones(s, s)).to(x.device)`, or a name the function binds to one
        (`freqs = torch.exp(... torch.arange(half) ...)`). Its `.to(x.device)` copies it from the host
        in the forward and again in the replay."""
        if isinstance(expr, ast.Name):
            bindings = run.scope.bindings.get(expr.id, [])
            single = bindings[0] if len(bindings) == 1 and bindings[0].kind == ASSIGN and not bindings[0].unpack else None
            return hops > 0 and single is not None and single.value is not None and self._built_on_host(run, single.value, hops - 1)
        for inner in ast.walk(expr):
            if isinstance(inner, ast.Call) and keyword_value(inner, "device") is None:
                name = run.module.qualified_name(inner.func, run.scope) or ""
                if name.startswith("torch.") and torch_api.short_name(name) in _HOST_FACTORIES:
                    return True
        return False

    def _explicit_device(self, run: Interpreter, device: ast.expr) -> str | None:
        """How the code names a device other than an input's, or None (a dtype, `x.device`, a tensor)."""
        if isinstance(device, ast.Constant):
            return repr(device.value) if isinstance(device.value, str) else None
        if isinstance(device, ast.Call):
            name = run.module.qualified_name(device.func, run.scope)
            return ast.unparse(device) if name == "torch.device" else None
        value = run.eval(device)
        if SAME_DEVICE in value.types or NONE_TYPE in value.types and len(value.types) == 1:
            return None  # a tensor's own device, or `device=None` (the default device)
        if isinstance(device, ast.Name):
            lowered = device.id.lower()
            return f"`{device.id}`" if "device" in lowered or lowered in ("dev", "gpu", "cuda") else None
        if isinstance(device, ast.Attribute):
            return f"`{ast.unparse(device)}`" if "device" in device.attr.lower() else None
        return None

    def own_device(self, run: Interpreter, base: Value, path: str) -> Value | None:
        """`obj.device` is where the region's tensors already are, unless obj's class chooses
        a device (`self.device = ...`): a tensor's device or a property giving a model's."""
        classes = run.analysis.classes
        for item in ordered(base.types):
            if isinstance(item, ClassType):
                info = classes.by_name(item.name)
                if info is not None and classes.attribute_assignments(info, "device"):
                    return None
        return Value(frozenset({LOCAL}), frozenset({SAME_DEVICE}), path=path)


def _true_keyword(node: ast.Call, name: str) -> bool:
    value = keyword_value(node, name)
    return isinstance(value, ast.Constant) and value.value is True


def _false_constant(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Constant) and not value.value


def _sequence_of(element: TupleType) -> Value:
    """An iterator of `element` tuples: the types of what it yields, so that the modules a loop
    over `zip(self.resnets, self.attentions)` calls are known. Ownership and volatility stay
    unknown, as for any iterator: which elements a replay mutates or branches on is the loop
    body's business, read through the elements' own values."""
    return Value(types=frozenset({ContainerType(torch_api.SEQUENCE, frozenset({element}))}))


def _drawn(callee: str) -> Value:
    return Value(volatile=frozenset({Volatility(f"a random draw (`{callee}()`)")}))


def _reads_back(function: ast.AST, call: ast.Call) -> bool:
    """Whether `setattr(obj, name, value)`'s value reads `obj` through `getattr` (`getattr(self, n) + 1`),
    directly or through a name the function assigns from such a read: an accumulation, not a store."""
    base = ast.unparse(call.args[0])

    def reads(expression: ast.AST) -> bool:
        return any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" and n.args and ast.unparse(n.args[0]) == base
            for n in ast.walk(expression)
        )

    value = call.args[2]
    if reads(value):
        return True
    names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    return any(
        isinstance(s, ast.Assign) and reads(s.value) and any(isinstance(t, ast.Name) and t.id in names for t in s.targets) for s in ast.walk(function)
    )


def _defined_in_project(run: Interpreter, name: str) -> bool:
    """A function of that name the linted project defines (a vendored copy of Megatron's mappings): its
    code is followed, so the collective inside is reported at its own line, not at the call."""
    found = run.analysis.project.global_binding(name)
    return found is not None and found[1].kind == DEF and not found[0].library


def _has_dropout(node: ast.Call) -> bool:
    dropout = keyword_value(node, "dropout_p")
    if dropout is None and len(node.args) > 4:
        dropout = node.args[4]
    return dropout is not None and not (isinstance(dropout, ast.Constant) and not dropout.value)


def _computed_split_sizes(
    run: Interpreter, op: collectives.CommunicationOp, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]
) -> ast.expr | None:
    """The split-size argument of an all-to-all that the region computes (from `.tolist()` of
    a routing count, say), or None: split sizes that are None, literals, or come in from
    outside the region (an input, an attribute) are the same in the replay."""
    given: list[tuple[ast.expr, Value]] = []
    for position in op.split_positions:
        if position < len(node.args) and not any(isinstance(a, ast.Starred) for a in node.args[: position + 1]):
            given.append((node.args[position], arguments[position]))
    for keyword in node.keywords:
        if keyword.arg is not None and keyword.arg in op.split_keywords:
            given.append((keyword.value, keywords[keyword.arg]))
    for expression, value in given:
        if LOCAL in value.origins and CONST not in value.origins and not _literal_sizes(run, expression):
            return expression
    return None


def _literal_sizes(run: Interpreter, expression: ast.expr) -> bool:
    """`[4, 4]`, `[n] * 2` with literals, or a local name only ever bound to such a display."""
    if isinstance(expression, ast.Name):
        bindings = run.module.lookup(run.scope, expression.id)
        return bool(bindings) and all(b.kind == ASSIGN and b.value is not None and _literal(b.value) for b in bindings)
    return _literal(expression)


def _literal(expression: ast.expr) -> bool:
    if isinstance(expression, ast.Constant):
        return True
    if isinstance(expression, (ast.List, ast.Tuple)):
        return all(_literal(element) for element in expression.elts)
    if isinstance(expression, ast.BinOp):
        return _literal(expression.left) and _literal(expression.right)
    return False


def own_running_statistics(effect: Effect) -> bool:
    """An effect of a norm module's own forward that is its running statistics' update (reported
    once, at the line that calls the module): `F.batch_norm(x, self.running_mean, ...)`,
    `self.num_batches_tracked.add_(1)`, `super().forward(x)`. Effects of what it calls are kept."""
    if effect.chain or effect.kind not in (RUNNING_STATS, TENSOR_STATE):
        return False
    subject = effect.fact_map.get("subject", "").strip("`")
    receiver, _, attribute = subject.partition(".")
    if receiver == "self" and attribute in torch_api.RUNNING_STAT_BUFFERS:
        return True
    return effect.kind == RUNNING_STATS and effect.variant == "module" and subject == "self"  # super().forward(x)


# factories that make a tensor from sizes or Python data, on the CPU unless given `device=`
# (`ones_like(x)`, `as_tensor(t)` and their kin follow the tensor they are given)
_HOST_FACTORIES = frozenset(
    {"zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye", "tensor", "rand", "randn",
     "randint", "randperm", "tril_indices", "triu_indices", "scalar_tensor"}
)  # fmt: skip


def _fills_a_cache(function: ast.AST) -> bool:
    """A function that keeps what it builds on the module (`self.register_buffer("inv_freq", ...)`,
    `self.cos_cached = ...`): a lazy cache fill, which stays on the device it moved to."""
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register_buffer":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" for t in node.targets):
            return True
    return False
