"""Which tensors of a function hold integers, read from its own lines (CKP504).

Integer addition is associative, so an accumulation into an integer tensor (`counts =
torch.zeros(n, dtype=torch.long); counts.scatter_add_(0, idx, torch.ones_like(idx))`, the
tokens-per-expert count of MoE routers) sums the same whatever order CUDA's atomics take:
its recompute cannot differ. And a sort of a selection's indices (`torch.argsort(experts.
view(-1))` after `torch.topk`) depends only on those indices: it recomputes what the
forward did exactly when the selection does, so the selection is the one to report.

`kind_of(function, expr)` says what `expr` holds: INDICES (a selection's indices, or a view,
cast or subset of them), INTEGER (any other integer tensor), or None (floating point, or not
known: conservative). Known integer tensors are those the function creates with an integer
dtype (`torch.zeros(n, dtype=torch.long)`, `x.new_zeros(n, dtype=torch.int32)`), `_like` and
`new_*` of an integer tensor, `.long()`/`.int()` and `.to(torch.long)` results, the indices
of `topk`/`sort`/`argsort`/`argmax`/`argmin`, integer arithmetic on them, and a parameter the
function passes as the index of a call that only takes integer indices (`gather`,
`scatter_add_`, `index_add_`, ...: the call raises for any other). A name is known when every
binding of it in the function is; a name bound otherwise (a loop variable, `with ... as`)
or a parameter used no such way is not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ckptlint.syntax import keyword_value, own_statements

INDICES = "indices"  # a selection's indices, or a view, cast or subset of them
INTEGER = "integer"  # another integer tensor

_INTEGER_DTYPES = frozenset({"long", "int", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64", "short"})
# torch factories: default dtype float, except those listed as integer
_FACTORIES = frozenset({"zeros", "ones", "full", "empty", "tensor", "as_tensor", "arange", "randint", "eye", "linspace"})
_LIKE = frozenset({"zeros_like", "ones_like", "full_like", "empty_like", "randint_like"})
_NEW = frozenset({"new_zeros", "new_ones", "new_full", "new_empty", "new_tensor"})
_INTEGER_RESULTS = frozenset({"randint", "randperm", "nonzero", "argwhere", "searchsorted", "bucketize", "one_hot"})
_INTEGER_CASTS = frozenset({"long", "int", "short", "char", "byte"})
_FLOAT_CASTS = frozenset({"float", "double", "half", "bfloat16", "bool"})
# methods whose result has the receiver's dtype and its values (rearranged or a subset)
_SAME_VALUES = frozenset(
    {"view", "reshape", "flatten", "contiguous", "clone", "detach", "expand", "expand_as", "unsqueeze", "squeeze", "t",
     "transpose", "permute", "repeat", "repeat_interleave", "narrow", "select", "flip", "roll", "cpu", "cuda", "view_as",
     "reshape_as", "ravel", "masked_select", "split", "chunk", "unbind"}
)  # fmt: skip
_INTEGER_REDUCTIONS = frozenset({"sum", "cumsum"})  # integer inputs sum into int64 (unless `dtype=`)
# calls returning (values, indices): `torch.topk(...)[1]` and `values, indices = torch.topk(...)`
# take the indices; `torch.max(x, dim).indices` too (`torch.max(a, b)[1]` is a row of values)
_VALUES_AND_INDICES = frozenset({"topk", "sort"})
_NAMED_INDICES = frozenset({"topk", "sort", "max", "min", "kthvalue", "mode", "median"})
_INDEX_RESULTS = frozenset({"argsort", "argmax", "argmin"})
# calls that raise unless the tensor at their index position holds integers
_INTEGER_INDEX_CALLS = frozenset(
    {"gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_add",
     "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_", "index_select", "take_along_dim", "take"}
)  # fmt: skip
_INDEX_POSITION = {"take_along_dim": (1, 0, "indices"), "take": (1, 0, "index")}  # else (2, 1, "index")
_MODULE_ROOTS = frozenset({"torch", "F", "functional", "nn"})  # `torch.zeros(...)`, `F.one_hot(...)`: the function form
_INTEGER_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)


def kind_of(function: ast.AST, expr: ast.expr) -> str | None:
    """INDICES, INTEGER or None (see the module docstring) for `expr`, an expression of `function`."""
    return _Reader(function).kind(expr)


def is_integer(function: ast.AST, expr: ast.expr | None) -> bool:
    return expr is not None and kind_of(function, expr) is not None


class _Reader:
    def __init__(self, function: ast.AST):
        self.function = function
        self._bindings: dict[str, list[ast.AST]] | None = None
        self._active: set[str] = set()
        self._names: dict[str, str | None] = {}

    def kind(self, expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return self._name(expr.id)
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, ast.Subscript):
            if _constant(expr.slice) == 1 and _selection_call(expr.value, _VALUES_AND_INDICES):
                return INDICES
            return self.kind(expr.value)
        if isinstance(expr, ast.Attribute):
            if expr.attr == "indices":
                return INDICES if _selection_call(expr.value, _NAMED_INDICES) else None
            return self.kind(expr.value) if expr.attr in ("T", "mT", "data") else None
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.Invert)):
            return INTEGER if self.kind(expr.operand) is not None else None
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, _INTEGER_OPERATORS):
            kinds = [self.kind(o) if not _integer_constant(o) else "" for o in (expr.left, expr.right)]
            return INTEGER if None not in kinds and any(kinds) else None  # an int constant alone is no tensor
        return None

    def _call(self, call: ast.Call) -> str | None:
        name = _called(call)
        method = _method_form(call.func)
        dtype = keyword_value(call, "dtype")
        if name in _INDEX_RESULTS:
            return INDICES
        if not method and name in _FACTORIES | _LIKE or (method and name in _NEW):
            if dtype is not None:
                return _dtype(dtype)
            if name in _LIKE:
                return INTEGER if call.args and self.kind(call.args[0]) is not None else None
            if name in _NEW:
                return INTEGER if isinstance(call.func, ast.Attribute) and self.kind(call.func.value) is not None else None
            if name == "arange" and call.args and all(_integer_constant(a) for a in call.args):
                return INTEGER
            return INTEGER if name == "randint" else None
        if name in _INTEGER_RESULTS or (name == "bincount" and keyword_value(call, "weights") is None and len(call.args) <= (0 if method else 1)):
            return INTEGER
        if not method:
            return None
        assert isinstance(call.func, ast.Attribute)
        receiver = call.func.value
        if name in _INTEGER_CASTS:
            return INDICES if self.kind(receiver) == INDICES else INTEGER
        if name in _FLOAT_CASTS:
            return None
        if name in ("to", "type"):
            target = dtype if dtype is not None else call.args[0] if call.args else None
            if target is None or _device(target):
                return self.kind(receiver)
            judged = _dtype(target)
            return (INDICES if self.kind(receiver) == INDICES else INTEGER) if judged is not None else None
        if name == "view" and len(call.args) == 1 and _torch_attribute(call.args[0]) is not None:
            return None  # `x.view(torch.float32)`: the same bits read as another dtype
        if name in _SAME_VALUES:
            return self.kind(receiver)
        if name in _INTEGER_REDUCTIONS:
            if dtype is not None:
                return _dtype(dtype)
            return INTEGER if self.kind(receiver) is not None else None
        return None

    def _name(self, name: str) -> str | None:
        if name in self._names:
            return self._names[name]
        if name in self._active:
            return INDICES  # a binding from itself (`x = x.view(-1)`): its other bindings decide
        self._active.add(name)
        try:
            kinds = [self._binding(name, b) for b in self._all_bindings().get(name, [])]
        finally:
            self._active.discard(name)
        found = None if not kinds or None in kinds else INTEGER if INTEGER in kinds else INDICES
        if not self._active:  # inside a cycle the answer assumed the name in progress: not final
            self._names[name] = found
        return found

    def _binding(self, name: str, binding: ast.AST) -> str | None:
        if isinstance(binding, ast.arg):
            return INTEGER if self._used_as_integer_index(name) else None
        if isinstance(binding, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and binding.value is not None:
            targets = binding.targets if isinstance(binding, ast.Assign) else [binding.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == name:
                    return self.kind(binding.value)
                if isinstance(target, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == name for e in target.elts):
                    position = next(i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == name)
                    return INDICES if position == 1 and len(target.elts) == 2 and _selection_call(binding.value, _VALUES_AND_INDICES) else None
            return None
        if isinstance(binding, ast.AugAssign):
            return INTEGER  # `counts += ...` on a tensor keeps its dtype (or raises): its other bindings decide
        return None

    def _all_bindings(self) -> dict[str, list[ast.AST]]:
        """Every binding of each name in the function's own lines."""
        if self._bindings is None:
            bindings: dict[str, list[ast.AST]] = {}
            arguments = getattr(self.function, "args", None)
            if isinstance(arguments, ast.arguments):
                for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg):
                    if arg is not None:
                        bindings.setdefault(arg.arg, []).append(arg)
            for statement, target in _binding_targets(self.function):
                for node in ast.walk(target):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        bindings.setdefault(node.id, []).append(statement)
            self._bindings = bindings
        return self._bindings

    def _used_as_integer_index(self, name: str) -> bool:
        """`name` is passed as the index of a call that raises unless it holds integers, and the
        function never binds it again."""
        if len(self._all_bindings().get(name, [])) != 1:
            return False
        for node in _own_nodes(self.function):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
                called = _called(node)
                if called not in _INTEGER_INDEX_CALLS:
                    continue
                function_index, method_index, keyword = _INDEX_POSITION.get(called, (2, 1, "index"))
                index = method_index if _method_form(node.func) else function_index
                given = node.args[index] if index < len(node.args) else keyword_value(node, keyword)
                if isinstance(given, ast.Name) and given.id == name:
                    return True
        return False


def _binding_targets(function: ast.AST) -> Iterator[tuple[ast.AST, ast.expr]]:
    """(statement or expression, target) for each binding in the function's own lines."""
    for statement in own_statements(function):
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                yield statement, target
        elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
            yield statement, statement.target
        elif isinstance(statement, (ast.For, ast.AsyncFor)):
            yield statement, statement.target
        elif isinstance(statement, (ast.With, ast.AsyncWith)):
            for item in statement.items:
                if item.optional_vars is not None:
                    yield statement, item.optional_vars
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                yield statement, ast.Name(id=(alias.asname or alias.name).partition(".")[0], ctx=ast.Store())
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield statement, ast.Name(id=statement.name, ctx=ast.Store())
        elif isinstance(statement, ast.Try):
            for handler in statement.handlers:
                if handler.name:
                    yield handler, ast.Name(id=handler.name, ctx=ast.Store())
    for node in _own_nodes(function):
        if isinstance(node, ast.NamedExpr):
            yield node, node.target


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The function's nodes, not those of functions, lambdas or classes nested in it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _method_form(func: ast.expr) -> bool:
    """`x.long()`, not `torch.zeros(...)` nor `F.one_hot(...)`."""
    return isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.value.id in _MODULE_ROOTS)


def _selection_call(expr: ast.expr, names: frozenset[str]) -> bool:
    return isinstance(expr, ast.Call) and _called(expr) in names


def _torch_attribute(expr: ast.expr) -> str | None:
    """`torch.long` -> "long"."""
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "torch":
        return expr.attr
    return None


def _dtype(expr: ast.expr) -> str | None:
    """INTEGER for an integer dtype (`torch.long`), None for any other or an unknown one."""
    return INTEGER if _torch_attribute(expr) in _INTEGER_DTYPES else None


def _device(expr: ast.expr) -> bool:
    """A device argument of `.to()`: `"cuda"`, `x.device`, `torch.device(...)`."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return True
    if isinstance(expr, ast.Attribute) and expr.attr == "device":
        return True
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "device"


def _constant(expr: ast.expr) -> object:
    return expr.value if isinstance(expr, ast.Constant) else None


def _integer_constant(expr: ast.expr) -> bool:
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        expr = expr.operand
    return isinstance(expr, ast.Constant) and type(expr.value) is int
