"""Calls computed from constants, as a compiler folds them: `decode_arch_def([['ds_r1_k3_s1_c16_d1']])`.

Model zoos describe an architecture in a small language of strings (timm's
`'ir_r2_k3_s2_e6_c24_se0.25'`) that pure functions decode into the dicts a builder builds
blocks from; which blocks a model holds is then written nowhere but in those strings. A call of
a project function whose arguments are all constants is evaluated here on the function's
syntax: literals, local names, arithmetic, comparisons, the methods of str/list/dict/tuple, a
few builtins and `re.split`/`math.ceil`/`copy.deepcopy`, and the project functions it calls,
under a step budget. Nothing is imported or executed: every value is a Python constant or
container built here. Anything else (an unknown call, an attribute of an object) is `OPAQUE`, a
value that can be stored and passed but not tested: a test on it, a raise, a failed assert or
a spent budget ends the fold, and the evaluator falls back to what the types say.
"""

from __future__ import annotations

import ast
import copy
import itertools
import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ckptlint.symbols import IMPORT, ModuleSymbols, Scope

MAX_STEPS = 20000  # statements and expressions one fold may evaluate
MAX_CALL_DEPTH = 8  # project functions a fold may be inside at once
MAX_SIZE = 10000  # the longest string or list an operation may build
MAX_CANDIDATES = 16  # argument value combinations a call is folded for


class _Opaque:
    """A value the fold does not know (a class, a logger, an unknown call's result)."""

    def __repr__(self) -> str:
        return "OPAQUE"

    def __deepcopy__(self, memo: dict[int, object]) -> _Opaque:
        return self


OPAQUE = _Opaque()


class Unfoldable(Exception):
    """The call cannot be computed from constants (or would raise)."""


@dataclass(frozen=True)
class FunctionRef:
    """A project function named in folded code: calling it folds its body."""

    node: ast.FunctionDef
    module: ModuleSymbols
    scope: Scope


class _Return(Exception):
    def __init__(self, value: object):
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


_METHODS: dict[type, frozenset[str]] = {
    str: frozenset(
        "split rsplit startswith endswith isdigit isalpha isnumeric isalnum lower upper strip lstrip rstrip replace "
        "join format find rfind count partition rpartition title capitalize".split()
    ),
    list: frozenset("append extend insert pop copy index count reverse remove".split()),
    dict: frozenset("get pop setdefault update items keys values copy".split()),
    tuple: frozenset("index count".split()),
}
def _isinstance_of(value: object, kinds: object) -> bool:
    kinds_tuple = kinds if isinstance(kinds, tuple) else (kinds,)
    if value is OPAQUE or not all(isinstance(k, type) for k in kinds_tuple):
        raise Unfoldable
    return isinstance(value, kinds_tuple)


_BUILTINS: dict[str, Callable[..., Any]] = {
    "int": int, "float": float, "str": str, "bool": bool, "len": len, "max": max, "min": min, "sum": sum,
    "round": round, "abs": abs, "enumerate": lambda *a: list(enumerate(*a)), "zip": lambda *a: list(zip(*a)),
    "list": list, "tuple": tuple, "dict": dict, "set": set, "reversed": lambda a: list(reversed(a)),
    "sorted": sorted, "any": any, "all": all, "divmod": divmod, "print": lambda *a, **k: None,
    "range": lambda *a: _bounded(list(range(*a))), "isinstance": _isinstance_of,
}
# callables that move unknown values around without testing them (by the name of a builtin method)
_MOVERS = frozenset({"append", "extend", "insert", "update", "setdefault", "copy", "get", "pop", "items", "values", "keys", "<lambda>"})
_LIBRARY: dict[str, Callable[..., Any]] = {
    "re.split": lambda pattern, text, *a: re.split(pattern, text, *a) if isinstance(pattern, str) and isinstance(text, str) else _unknown(),
    "math.ceil": math.ceil, "math.floor": math.floor, "math.sqrt": math.sqrt,
    "copy.deepcopy": copy.deepcopy, "copy.copy": copy.copy,
}
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not,
}
_ERRORS = (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, AttributeError, OverflowError, re.error, RecursionError)


def _unknown() -> Any:
    raise Unfoldable


def _bounded(value: Any) -> Any:
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_SIZE:
        raise Unfoldable
    return value


def _holds_opaque(value: object) -> bool:
    if value is OPAQUE:
        return True
    if isinstance(value, (list, tuple, set)):
        return any(_holds_opaque(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_opaque(v) for v in value.values())
    return False


class Folder:
    """One fold: the steps spent and the project functions under way."""

    def __init__(self, global_function: Callable[[ModuleSymbols, Scope, ast.Name | ast.Attribute], FunctionRef | None]):
        self._global_function = global_function  # a project function a name in folded code refers to
        self._steps = 0
        self._depth = 0

    def call(self, function: FunctionRef, args: list[object], kwargs: dict[str, object]) -> object:
        if self._depth >= MAX_CALL_DEPTH:
            raise Unfoldable
        frame = self._bind(function, args, kwargs)
        self._depth += 1
        try:
            self._block(function.node.body, frame, function)
        except _Return as returned:
            return returned.value
        finally:
            self._depth -= 1
        return None

    def _bind(self, function: FunctionRef, args: list[object], kwargs: dict[str, object]) -> dict[str, object]:
        spec = function.node.args
        positional = [*spec.posonlyargs, *spec.args]
        frame: dict[str, object] = {}
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(spec.defaults) :]], spec.defaults))
        defaults.update({a.arg: d for a, d in zip(spec.kwonlyargs, spec.kw_defaults) if d is not None})
        for parameter, value in zip(positional, args):
            frame[parameter.arg] = value
        if len(args) > len(positional):
            if spec.vararg is None:
                raise Unfoldable
            frame[spec.vararg.arg] = tuple(args[len(positional) :])
        elif spec.vararg is not None:
            frame[spec.vararg.arg] = ()
        extra: dict[str, object] = {}
        for name, value in kwargs.items():
            if name in frame:
                raise Unfoldable
            if name in {a.arg for a in [*positional, *spec.kwonlyargs]}:
                frame[name] = value
            else:
                extra[name] = value
        if spec.kwarg is not None:
            frame[spec.kwarg.arg] = extra
        elif extra:
            raise Unfoldable
        outer = function.scope.parent or function.scope
        for parameter in [*positional, *spec.kwonlyargs]:
            if parameter.arg not in frame:
                if parameter.arg not in defaults:
                    raise Unfoldable
                frame[parameter.arg] = self._expr(defaults[parameter.arg], {}, FunctionRef(function.node, function.module, outer))
        return frame

    # -- statements ---------------------------------------------------------

    def _block(self, body: list[ast.stmt], frame: dict[str, object], where: FunctionRef) -> None:
        for statement in body:
            self._statement(statement, frame, where)

    def _statement(self, node: ast.stmt, frame: dict[str, object], where: FunctionRef) -> None:
        self._step()
        if isinstance(node, ast.Expr):
            self._expr(node.value, frame, where)
        elif isinstance(node, ast.Assign):
            value = self._expr(node.value, frame, where)
            for target in node.targets:
                self._store(target, value, frame, where)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._store(node.target, self._expr(node.value, frame, where), frame, where)
        elif isinstance(node, ast.AugAssign):
            current = self._expr(node.target, frame, where)  # read as a load: the context is not consulted
            self._store(node.target, binary(node.op, current, self._expr(node.value, frame, where)), frame, where)
        elif isinstance(node, ast.If):
            self._block(node.body if self._truth(self._expr(node.test, frame, where)) else node.orelse, frame, where)
        elif isinstance(node, ast.For):
            self._for(node, frame, where)
        elif isinstance(node, ast.While):
            while self._truth(self._expr(node.test, frame, where)):
                try:
                    self._block(node.body, frame, where)
                except _Break:
                    break
                except _Continue:
                    continue
        elif isinstance(node, ast.Return):
            raise _Return(None if node.value is None else self._expr(node.value, frame, where))
        elif isinstance(node, ast.Assert):
            if not self._truth(self._expr(node.test, frame, where)):
                raise Unfoldable  # the call would raise
        elif isinstance(node, ast.Break):
            raise _Break
        elif isinstance(node, ast.Continue):
            raise _Continue
        elif not isinstance(node, ast.Pass):
            raise Unfoldable  # raise, try, with, import, nested definitions: not folded

    def _for(self, node: ast.For, frame: dict[str, object], where: FunctionRef) -> None:
        for item in self._iterate(self._expr(node.iter, frame, where)):
            self._store(node.target, item, frame, where)
            try:
                self._block(node.body, frame, where)
            except _Break:
                return
            except _Continue:
                continue
        self._block(node.orelse, frame, where)

    def _store(self, target: ast.expr, value: object, frame: dict[str, object], where: FunctionRef) -> None:
        if isinstance(target, ast.Name):
            frame[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self._iterate(value)
            if len(items) != len(target.elts) or any(isinstance(e, ast.Starred) for e in target.elts):
                raise Unfoldable
            for element, item in zip(target.elts, items):
                self._store(element, item, frame, where)
        elif isinstance(target, ast.Subscript):
            container = self._expr(target.value, frame, where)
            key = self._expr(target.slice, frame, where)
            if not isinstance(container, (list, dict)) or key is OPAQUE:
                raise Unfoldable
            try:
                container[key] = value
            except _ERRORS:
                raise Unfoldable from None
        else:
            raise Unfoldable  # an attribute store: state outside the fold

    # -- expressions --------------------------------------------------------

    def _expr(self, node: ast.expr, frame: dict[str, object], where: FunctionRef) -> Any:
        self._step()
        try:
            return self._evaluate(node, frame, where)
        except _ERRORS:
            raise Unfoldable from None

    def _evaluate(self, node: ast.expr, frame: dict[str, object], where: FunctionRef) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return frame[node.id] if node.id in frame else self._global(node, where)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    items.extend(self._iterate(self._expr(element.value, frame, where)))
                else:
                    items.append(self._expr(element, frame, where))
            return tuple(items) if isinstance(node, ast.Tuple) else set(items) if isinstance(node, ast.Set) else _bounded(items)
        if isinstance(node, ast.Dict):
            found: dict[object, object] = {}
            for key, value in zip(node.keys, node.values):
                if key is None:
                    merged = self._expr(value, frame, where)
                    if not isinstance(merged, dict):
                        raise Unfoldable
                    found.update(merged)
                else:
                    found[self._hashable(self._expr(key, frame, where))] = self._expr(value, frame, where)
            return found
        if isinstance(node, ast.Subscript):
            base = self._expr(node.value, frame, where)
            if isinstance(node.slice, ast.Slice):
                parts = [None if p is None else self._expr(p, frame, where) for p in (node.slice.lower, node.slice.upper, node.slice.step)]
                return self._known(base)[slice(*parts)]
            key = self._expr(node.slice, frame, where)
            return self._known(base)[self._hashable(key)]
        if isinstance(node, ast.Attribute):
            if _is_module_path(node, where):
                return self._global(node, where)
            base = self._expr(node.value, frame, where)
            if type(base) in _METHODS and node.attr in _METHODS[type(base)]:
                return getattr(base, node.attr)
            if base is OPAQUE:
                return OPAQUE  # a method of an unknown object: its result is not known either
            raise Unfoldable  # another attribute of a value built here (`options.clear`): not modelled
        if isinstance(node, ast.Call):
            return self._call(node, frame, where)
        if isinstance(node, ast.BinOp):
            return binary(node.op, self._expr(node.left, frame, where), self._expr(node.right, frame, where))
        if isinstance(node, ast.UnaryOp):
            operand = self._expr(node.operand, frame, where)
            if isinstance(node.op, ast.Not):
                return not self._truth(operand)
            operand = self._known(operand)
            return -operand if isinstance(node.op, ast.USub) else +operand if isinstance(node.op, ast.UAdd) else ~operand
        if isinstance(node, ast.BoolOp):
            last: object = None
            for operand_node in node.values:
                last = self._expr(operand_node, frame, where)
                if self._truth(last) == isinstance(node.op, ast.Or):
                    return last
            return last
        if isinstance(node, ast.Compare):
            left = self._expr(node.left, frame, where)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._expr(right_node, frame, where)
                if left is OPAQUE or right is OPAQUE:
                    raise Unfoldable  # even `x is None`: an unknown value may be None
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return self._expr(node.body if self._truth(self._expr(node.test, frame, where)) else node.orelse, frame, where)
        if isinstance(node, ast.JoinedStr):
            texts: list[str] = []
            for value_node in node.values:
                if isinstance(value_node, ast.FormattedValue):
                    shown = self._known(self._expr(value_node.value, frame, where))
                    spec = self._expr(value_node.format_spec, frame, where) if value_node.format_spec is not None else ""
                    texts.append(format(shown, spec))
                else:
                    texts.append(str(self._expr(value_node, frame, where)))  # a str constant
            return _bounded("".join(texts))
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            return self._comprehension(node, frame, where)
        raise Unfoldable

    def _comprehension(self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp | ast.DictComp, frame: dict[str, object], where: FunctionRef) -> Any:
        results: list[object] = []
        self._generate(node, 0, dict(frame), where, results)
        if isinstance(node, ast.DictComp):
            return dict(results)  # type: ignore[arg-type]  # (key, value) pairs
        return set(results) if isinstance(node, ast.SetComp) else results

    def _generate(
        self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp | ast.DictComp, index: int, inner: dict[str, object], where: FunctionRef, results: list[object]
    ) -> None:
        """The comprehension's values from its `index`th `for` on (a method, not a closure that
        calls itself: that would be a reference cycle, and a run's analyses are freed without the
        cyclic collector)."""
        if index == len(node.generators):
            if isinstance(node, ast.DictComp):
                results.append((self._hashable(self._expr(node.key, inner, where)), self._expr(node.value, inner, where)))
            else:
                results.append(self._expr(node.elt, inner, where))
            _bounded(results)
            return
        generator = node.generators[index]
        for item in self._iterate(self._expr(generator.iter, inner, where)):
            self._store(generator.target, item, inner, where)
            if all(self._truth(self._expr(test, inner, where)) for test in generator.ifs):
                self._generate(node, index + 1, inner, where, results)

    def _call(self, node: ast.Call, frame: dict[str, object], where: FunctionRef) -> Any:
        function = self._expr(node.func, frame, where)
        args: list[object] = []
        for argument in node.args:
            if isinstance(argument, ast.Starred):
                args.extend(self._iterate(self._expr(argument.value, frame, where)))
            else:
                args.append(self._expr(argument, frame, where))
        kwargs: dict[str, object] = {}
        for keyword in node.keywords:
            value = self._expr(keyword.value, frame, where)
            if keyword.arg is None:
                if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                    raise Unfoldable
                kwargs.update(value)
            else:
                kwargs[keyword.arg] = value
        if isinstance(function, FunctionRef):
            return self._project_call(function, args, kwargs)
        if function is OPAQUE:
            if any(isinstance(a, (list, dict, set)) for a in [*args, *kwargs.values()]):
                raise Unfoldable  # an unknown call may change the containers it is handed
            return OPAQUE
        if _holds_opaque(args) or _holds_opaque(kwargs):
            if function in (copy.deepcopy, copy.copy, list, tuple, dict) or getattr(function, "__name__", "") in _MOVERS:
                return _bounded(function(*args, **kwargs))
            raise Unfoldable
        return _bounded(function(*args, **kwargs))

    def _project_call(self, function: FunctionRef, args: list[object], kwargs: dict[str, object]) -> object:
        """A project function called in folded code; one that does not fold gives OPAQUE, unless
        it was handed a container it may have changed."""
        try:
            return self.call(function, args, kwargs)
        except Unfoldable:
            if any(isinstance(a, (list, dict, set)) for a in [*args, *kwargs.values()]) or self._steps >= MAX_STEPS:
                raise
            return OPAQUE

    def _global(self, node: ast.Name | ast.Attribute, where: FunctionRef) -> Any:
        """A name the frame does not hold: a builtin, a known library function, a project function, else OPAQUE."""
        if isinstance(node, ast.Name) and node.id in _BUILTINS and where.module.binding(where.scope, node.id) is None:
            return _BUILTINS[node.id]
        qualified = where.module.qualified_name(node, where.scope)
        if qualified in _LIBRARY:
            return _LIBRARY[qualified]
        found = self._global_function(where.module, where.scope, node)
        return found if found is not None else OPAQUE

    # -- values -------------------------------------------------------------

    def _truth(self, value: object) -> bool:
        if _holds_opaque(value) and not (isinstance(value, (list, tuple, dict, set)) and len(value) > 0):
            raise Unfoldable
        return bool(value)

    def _iterate(self, value: object) -> list[Any]:
        if isinstance(value, (dict, list, tuple, str, set)):
            return list(value)
        raise Unfoldable

    @staticmethod
    def _known(value: object) -> Any:
        if value is OPAQUE:
            raise Unfoldable
        return value

    @staticmethod
    def _hashable(value: object) -> Any:
        if value is OPAQUE or isinstance(value, (list, dict, set)):
            raise Unfoldable
        return value

    def _step(self) -> None:
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise Unfoldable


def binary(op: ast.operator, left: object, right: object) -> Any:
    """`left <op> right` of two known values, within MAX_SIZE; Unfoldable otherwise (or where Python raises)."""
    if left is OPAQUE or right is OPAQUE or type(op) not in _BINARY:
        raise Unfoldable
    if isinstance(op, ast.Mult) and isinstance(left, (str, list, tuple)) and isinstance(right, int) and len(left) * right > MAX_SIZE:
        raise Unfoldable
    if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
        raise Unfoldable
    try:
        return _bounded(_BINARY[type(op)](left, right))
    except _ERRORS:
        raise Unfoldable from None


def _is_module_path(node: ast.Attribute, where: FunctionRef) -> bool:
    """`re.split`, `math.ceil`: an attribute of an imported module, resolved by its qualified name."""
    base = node.value
    while isinstance(base, ast.Attribute):
        base = base.value
    if not isinstance(base, ast.Name):
        return False
    binding = where.module.binding(where.scope, base.id)
    return binding is not None and binding.kind == IMPORT


def candidates_product(choices: list[list[object]]) -> Iterator[tuple[object, ...]] | None:
    """Every combination of the arguments' possible values; None when there are too many."""
    count = 1
    for options in choices:
        count *= len(options)
    if count == 0 or count > MAX_CANDIDATES:
        return None
    return itertools.product(*choices)
