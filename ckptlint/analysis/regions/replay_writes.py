"""Which writes a replay repeats with a different effect: the hazard principle, as policy and bookkeeping.

A replay re-runs the region's writes. Accumulating writes (`append`, `+=`, `pop`, in-place
ops) add to what the forward did; a plain store (`self.x = v`, `d[k] = v`, `global g; g = v`)
puts back the value the forward put there, so it changes nothing unless the region read that
state before writing it in the same run (the replay reads the forward's write), or the value
depends on something that differs between forward and replay (a Python or NumPy draw, the
clock, state changed elsewhere).

- `WriteTracker` keeps, for one run of one function, what it read and wrote of state that
  outlives the region, in order, so the two can be told apart, and so a guard that closes
  itself (`if self.pad is None: self.pad = ...`) can excuse what it sets once.
- `mutate`, `store`, `store_item`, `assign_attribute`, `rebind` are the policy: which effect
  a write is (CKP202 module-level state, CKP203 another outliving object, CKP204 tensor
  state; an accumulation, a read-before-write or a volatile store) or none. They are
  functions of the interpreter (`Writer`), not an object it holds: the analysis runs with the
  cyclic garbage collector off, and a helper pointing back at its interpreter is a cycle.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Iterable, Protocol, Sequence

from ckptlint.analysis.regions import binding
from ckptlint.analysis.regions.mutability import (
    Mutability,
    dotted_path,
    lazy_initialised_names,
    set_once_or_restored,
)
from ckptlint.analysis.regions.protocol import Interpreter, SummariesView
from ckptlint.analysis.regions.summary import (
    GLOBAL_STATE,
    OUTER_STATE,
    TENSOR_STATE,
    Effect,
    PendingStore,
    StateKey,
    Summary,
)
from ckptlint.analysis.semantics.values import (
    GLOBAL,
    GRAD_MODE,
    INPUT,
    ClassType,
    ContainerType,
    Value,
    Volatility,
    merge,
)
from ckptlint.syntax import walk

WRITE_KINDS = frozenset({GLOBAL_STATE, OUTER_STATE, TENSOR_STATE})


def state_keys(value: Value) -> frozenset[StateKey]:
    """The names a store or read of `value` is tracked under: its class attribute(s), a
    module-level name, or (for objects of unknown class) the path the code uses."""
    keys: set[StateKey] = set()
    if value.attribute is not None:
        keys.add(value.attribute)
        _, name = value.attribute
        keys.update((t.name, name) for t in value.types if isinstance(t, ClassType))
    elif value.path and "." not in value.path and "[" not in value.path:
        keys.update(("global", name) for name in value.global_names if name == value.path)
    if not keys and value.path:
        keys.add(("path", value.path))
    return frozenset(keys)


@dataclass
class GuardMark:
    """Where the logs stood when an `if` began: what its test read and its body did come after."""

    reads: int
    writes: int
    effects: int
    pending: int
    read_first: frozenset[StateKey]


class WriteTracker:
    """Reads and writes of outliving state in one run of one function (callees merged in)."""

    def __init__(self) -> None:
        self.written: set[StateKey] = set()
        self.settled: set[StateKey] = set()  # last written by a plain store the replay repeats identically
        self.accumulated: set[StateKey] = set()  # added to or changed in place (not only stored)
        self.read_first: set[StateKey] = set()  # read before this run wrote it
        self.exit_reads: set[StateKey] = set()  # read first on a path that returned
        self.pending: list[PendingStore] = []  # plain stores: hazards only where a caller read the state first
        self.reads: list[StateKey] = []  # every read, in order
        self.writes: list[tuple[StateKey, bool]] = []  # every write, in order: (state, a plain store?)

    # -- reads and writes -------------------------------------------------------

    def read(self, keys: Iterable[StateKey]) -> None:
        for key in keys:
            self.reads.append(key)
            if key not in self.written:
                self.read_first.add(key)

    def accumulate(self, keys: Iterable[StateKey]) -> None:
        """`append`, `+=`, in-place ops: the replay adds to the forward's result. On state
        this run stored plainly first (`self.n = 0; self.n += 1`) the result is still fixed."""
        for key in keys:
            self.written.add(key)
            self.accumulated.add(key)
            self.writes.append((key, False))

    def store(self, keys: Iterable[StateKey], stable: bool) -> None:
        for key in keys:
            self.written.add(key)
            self.writes.append((key, True))
            if stable:
                self.settled.add(key)
            else:
                self.settled.discard(key)

    def read_before_written(self, keys: frozenset[StateKey]) -> bool:
        """This store is the run's first write of state it read before (later stores follow it)."""
        return bool((keys - self.written) & self.read_first)

    def first_write(self, keys: frozenset[StateKey]) -> bool:
        return not keys & self.written

    def unstable_reasons(self, value: Value) -> list[Volatility]:
        """Why a stored value may differ in the replay: draws, the clock, state changed
        elsewhere; not grad mode (a value, not a path), not state this run wrote before (a
        write the replay repeats identically, or one already reported)."""
        return sorted(
            reason
            for reason in value.volatile
            if reason != GRAD_MODE and not (reason.state is not None and reason.state in self.written)
        )

    # -- alternatives ---------------------------------------------------------------

    def before_alternatives(self) -> tuple[frozenset[StateKey], frozenset[StateKey]]:
        return frozenset(self.read_first), frozenset(self.written)

    def enter_alternative(self, start: tuple[frozenset[StateKey], frozenset[StateKey]]) -> tuple[set[StateKey], set[StateKey]]:
        """Begin one of exclusive arms (`if`/`else`) from what ran before them: a read in the
        decode arm does not precede the prefill arm's write. Returns what the previous arm
        left, for `after_alternatives`."""
        left = (self.read_first, self.written)
        self.read_first, self.written = set(start[0]), set(start[1])
        return left

    def after_alternatives(self, arms: list[tuple[set[StateKey], set[StateKey]]]) -> None:
        """What follows the arms saw the reads and writes of any of them."""
        for read_first, written in arms:
            self.read_first |= read_first
            self.written |= written

    # -- calls --------------------------------------------------------------------

    def merge_callee(self, summary: Summary, name: str) -> list[Effect]:
        """Fold a callee's reads and writes into this run; returns the callee's pending stores
        that are hazards here (this run read that state before calling), reached through `name`."""
        chained = [with_chain(store, name) for store in summary.pending if not store.keys & self.written]
        hazards = [store.effect for store in chained if store.keys & self.read_first]
        self.pending.extend(store for store in chained if not store.keys & self.read_first)
        for key in summary.reads:
            self.reads.append(key)
            if key not in self.written:
                self.read_first.add(key)
        self.accumulated |= summary.accumulated
        for key in sorted(summary.writes):
            stable = key in summary.settled or key in self.settled  # accumulating onto a settled value stays fixed
            self.written.add(key)
            self.writes.append((key, key not in summary.accumulated))
            if stable:
                self.settled.add(key)
            else:
                self.settled.discard(key)
        return hazards

    # -- guards that close themselves ---------------------------------------------

    def mark(self, effects: int) -> GuardMark:
        return GuardMark(len(self.reads), len(self.writes), effects, len(self.pending), frozenset(self.read_first))

    def tested_since(self, mark: GuardMark) -> frozenset[StateKey]:
        return frozenset(self.reads[mark.reads :])

    def leave_reads(self, mark: GuardMark) -> None:
        """Reads on a path that returns since `mark` precede no later write of this function;
        a caller still sees them (they happen before whatever it does next)."""
        left = self.read_first - mark.read_first
        self.read_first -= left
        self.exit_reads |= left

    def forget_reads(self, mark: GuardMark) -> None:
        """Undo the reads logged since `mark` (loading a container only to store into it)."""
        del self.reads[mark.reads :]
        self.read_first &= mark.read_first

    def closes(self, tested: frozenset[StateKey], mark: GuardMark) -> bool:
        """The body stores (plainly) some state its test read and accumulates none of it:
        `if self.pad is None: self.pad = ...`, `if n > self.cached: self._build(n)`."""
        body_writes = self.writes[mark.writes :]
        stored = {key for key, plain in body_writes if plain}
        accumulated = {key for key, plain in body_writes if not plain}
        return bool(tested & stored) and not tested & accumulated

    def excuse_guarded(self, tested: frozenset[StateKey], mark: GuardMark) -> None:
        """What a closing guard's body wrote, the forward wrote once and the replay skips:
        its pending stores go, its writes are settled, and the test's read is no hazard."""
        del self.pending[mark.pending :]
        self.read_first -= tested - mark.read_first
        for key, _ in self.writes[mark.writes :]:
            self.settled.add(key)


def drop_effects(effects: list[Effect], start: int, kinds: frozenset[str] | None = None) -> list[Effect]:
    """The effects recorded since `start` (of `kinds`, or all): removed from `effects`, returned."""
    dropped = [effect for effect in effects[start:] if kinds is None or effect.kind in kinds]
    effects[start:] = [effect for effect in effects[start:] if kinds is not None and effect.kind not in kinds]
    return dropped


def body_rebinds(body: Sequence[ast.stmt], bound_before: Iterable[str]) -> bool:
    """Whether a guard body changes what the code after it sees other than through the state
    it initialises: rebinding a name bound before, or leaving early (`return`, `break`)."""
    before = set(bound_before)
    for statement in body:
        for node in walk(statement):
            if isinstance(node, (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Raise)):
                return True
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in before:
                return True
    return False


def with_chain(store: PendingStore, name: str) -> PendingStore:
    return replace(store, effect=replace(store.effect, chain=(name, *store.effect.chain)))


# -- the write policy ------------------------------------------------------------


class _TensorAttributes(SummariesView, Protocol):
    """The analyses, also asked which class attributes hold tensors."""

    @property
    def mutability(self) -> Mutability: ...


class Writer(Interpreter, Protocol):
    """The interpreter as its write policy sees it: also its run's log, and which class
    attributes hold tensors (a write to one is CKP204)."""

    tracker: WriteTracker

    @property
    def analysis(self) -> _TensorAttributes: ...


def mutate(run: Writer, target: Value, node: ast.AST, action: str, tensor: bool = False) -> None:
    """`target` is changed in place or added to by `node` (`append`, `+=`, `.add_()`): a
    hazard when it outlives the region, since the replay adds to the forward's result."""
    if not target.outlives_region:
        return
    keys = state_keys(target)
    run.tracker.accumulate(keys)
    run.tracker.accumulate(("global", name) for name in target.global_names)
    effect = write_effect(run, target, node, "mutation", tensor, action=action)
    role = _stack_role(node)
    run.record(replace(effect, stack=role, state=keys) if role else effect)


def _stack_role(node: ast.AST) -> str:
    """`s.append(v)` pushes and `s.pop()` pops the top: what a balanced stack does (balanced_stacks.py)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)) or node.keywords:
        return ""
    if node.func.attr == "append" and len(node.args) == 1:
        return "push"
    if node.func.attr == "pop" and not node.args:
        return "pop"
    return ""


def overwrite(run: Writer, target: Value, node: ast.AST, action: str, value: Value) -> None:
    """`t.copy_(v)`, `t.fill_(v)`, `t.zero_()`, `t[i] = v` on tensor state that outlives the
    region: the contents are replaced, not added to, so a replay that computes `v` again from
    the region's inputs writes what the forward wrote (DESIGN.md: per-forward scratch, such as
    a prefill's cache `copy_`). The plain-store policy decides, as CKP204: a hazard when this
    run read that state (or a part of it) first, when `v` differs in the replay, or where a
    caller read it first."""
    if not target.outlives_region:
        return
    keys = state_keys(target)
    _replayed_store(run, target, keys, node, action, value, _contents_read_first(run.tracker, target, keys), tensor=True)


def _contents_read_first(tracker: WriteTracker, target: Value, keys: frozenset[StateKey]) -> bool:
    """This run read the target, or a part of it, before writing it: under its class
    attribute, or (an object of unknown class) under its path or a longer one
    (`cache.states` read, `cache.states[...]` written); not the object that holds it."""
    if tracker.read_before_written(keys):
        return True
    if keys & tracker.written or not target.path:
        return False
    base = target.path.split("[", 1)[0]
    return any(
        kind == "path" and (path == base or path.startswith((base + ".", base + "[")))
        for kind, path in tracker.read_first
    )


def store(run: Writer, target: Value, node: ast.AST, action: str, value: Value, what: str = "a value") -> None:
    """A plain store into `target` (`self.x = v`, `d[k] = v`): the replay stores again, which
    changes something only if this run read the state first or the value is unstable."""
    if not target.outlives_region:
        return
    tracker = run.tracker
    keys = state_keys(target)
    if _is_tensor_state(run, target):  # buffer reassignment stays CKP204
        tracker.store(keys, stable=True)
        run.record(write_effect(run, target, node, "mutation", False, action=action))
        return
    _replayed_store(run, target, keys, node, action, value, tracker.read_before_written(keys), tensor=False, what=what)


def _replayed_store(
    run: Writer, target: Value, keys: frozenset[StateKey], node: ast.AST, action: str, value: Value, read_first: bool, tensor: bool, **facts: str
) -> None:
    """The store policy: a read-before-write when the run read the state first, a volatile
    store when the value differs in the replay, else identical in the replay (and a hazard
    only where a caller read the state first: kept pending)."""
    tracker = run.tracker
    reasons = tracker.unstable_reasons(value)
    if read_first:
        tracker.store(keys, stable=False)
        run.record(write_effect(run, target, node, "read-before-write", tensor, action=action))
    elif reasons:
        tracker.store(keys, stable=False)
        text = "; ".join(reason.text for reason in reasons)
        run.record(write_effect(run, target, node, "volatile-store", tensor, action=action, reasons=text, **facts))
    else:
        if tracker.first_write(keys):  # a caller that read this state first makes it a hazard
            tracker.pending.append(PendingStore(keys, write_effect(run, target, node, "read-before-write", tensor, action=action)))
        tracker.store(keys, stable=True)


def store_item(run: Writer, target: ast.Subscript, base: Value, key: Value, value: Value) -> None:
    """`base[key] = value`: a keyed memo fills once; into a tensor it overwrites part of it in
    place (the overwrite policy); a store under an unstable key is volatile whatever the value."""
    if dotted_path(target.value) in lazy_initialised_names(run.scope.node):
        run.tracker.store(state_keys(base), stable=True)
    elif input_tensor(base) or _is_tensor_state(run, base):  # `x[mask] = 0`: an overwrite of part of a tensor
        overwrite(run, base, target, "item assignment into", merge([key, value]))
    elif run.tracker.unstable_reasons(key):
        store(run, base, target, "stores an item in", key, what="under a key")
    else:
        store(run, base, target, "stores an item in", value)


def assign_attribute(run: Writer, target: ast.Attribute, base: Value, value: Value) -> None:
    """`base.attr = value` in the code: unless set behind a "done" flag, saved and put back,
    or converted into itself (the replay leaves it as the forward did), a plain store."""
    once = isinstance(target.value, ast.Name) and f"{target.value.id}.{target.attr}" in set_once_or_restored(run.scope.node)
    if once:
        run.tracker.store(state_keys(attribute_target(run, base, target.attr)), stable=True)
    else:
        store_attribute(run, base, target.attr, target, "assigns", value)


def store_attribute(run: Writer, base: Value, attribute: str, node: ast.AST, action: str, value: Value) -> None:
    """`base.attribute = value` (also `setattr(base, "attribute", value)`)."""
    store(run, attribute_target(run, base, attribute), node, action, value)


def rebind(run: Writer, target: ast.Name, key: StateKey, value: Value, variant: str, accumulating: bool) -> None:
    """`global g; g = v` or `nonlocal n; n = v`: CKP202 when the replay's rebinding differs."""
    name = target.id
    if key[0] == "global" and name in set_once_or_restored(run.scope.node):  # behind `if _READY: return`
        run.tracker.store([key], stable=True)
        return
    if accumulating:
        run.tracker.accumulate([key])
        run.add(GLOBAL_STATE, target, variant, name=name)
        return
    subject = Value(frozenset({GLOBAL + name}), path=name)
    store(run, subject, target, "rebinds", value, what="to a value")


def write_effect(run: Writer, target: Value, node: ast.AST, variant: str, tensor: bool, **facts: str) -> Effect:
    """The effect a write to `target` is reported as: module-level state (CKP202), tensor
    state (CKP204) or another outliving object (CKP203)."""
    subject = f"`{target.path}`" if target.path else "an object"
    if target.global_names:
        kind, extra = GLOBAL_STATE, {}
    elif tensor or _is_tensor_state(run, target):
        kind, extra = TENSOR_STATE, {"tensor_kind": _tensor_kind(run, target)}
    else:
        kind, extra = OUTER_STATE, {}
    return Effect(kind, run.module, node, variant, tuple({**facts, **extra, "subject": subject}.items()))


def attribute_target(run: Writer, base: Value, attribute: str) -> Value:
    """`base.attribute` as something written to (whatever its type)."""
    classes = run.analysis.classes
    owners = sorted(t.name for t in base.types if isinstance(t, ClassType) and classes.by_name(t.name))
    path = f"{base.path}.{attribute}" if base.path else attribute
    if not owners:
        return Value(base.origins, path=path)
    run.tracker.written.update((owner, attribute) for owner in owners[1:])
    return Value(base.origins, path=path, attribute=(owners[0], attribute))


def input_tensor(value: Value) -> bool:
    """A tensor, or an input without a non-tensor annotation (checkpoint inputs are tensors)."""
    if binding.TENSOR in value.types:
        return True
    if value.types & binding.SCALAR_TYPES:
        return False
    if any(isinstance(t, ContainerType) for t in value.types):
        return False
    return INPUT in value.origins and not value.types


def _is_tensor_state(run: Writer, value: Value) -> bool:
    if value.attribute is not None and _is_buffer_or_parameter(run, value.attribute):
        return True
    return binding.TENSOR in value.types


def _tensor_kind(run: Writer, value: Value) -> str:
    if value.attribute is not None and _is_buffer_or_parameter(run, value.attribute):
        return "buffer/parameter"
    if INPUT in value.origins:
        return "input"
    return "tensor"


def _is_buffer_or_parameter(run: Writer, attribute: tuple[str, str]) -> bool:
    class_name, name = attribute
    info = run.analysis.classes.by_name(class_name)
    return info is not None and name in run.analysis.mutability.tensor_attributes(info)
