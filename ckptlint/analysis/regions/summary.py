"""The vocabulary between region analysis and the rules: what a replay does, in data.

The interpreter records an `Effect` for each thing a function does that a replay would do
differently or twice; a `Summary` is all of them for one function in one calling
`Context`. An effect names its `kind` (which rule reads it), its `variant` (which form of
the hazard, keying the rule's message) and `facts` (the code the message quotes). Rules own
their wording: they format the facts, so the analysis never writes a sentence.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from ckptlint.analysis.regions.coverage import CallEdge
from ckptlint.analysis.semantics.values import LOCAL_VALUE, Value
from ckptlint.symbols import ModuleSymbols

# effect kinds, each read by one rule
RANDOM_DRAW = "random-draw"  # CKP201
GLOBAL_STATE = "global-state"  # CKP202
OUTER_STATE = "outer-state"  # CKP203
TENSOR_STATE = "tensor-state"  # CKP204
RUNNING_STATS = "running-stats"  # CKP204, undone by wrappers that neutralise running stats
DEVICE_MOVE = "device-move"  # CKP205
UNSTABLE_BRANCH = "unstable-branch"  # CKP206
GRAD_MODE_BRANCH = "grad-mode-branch"  # CKP206 when the replay is reentrant
TORCH_RANDOM = "torch-random"  # not a finding: tells CKP102 whether RNG matters
COLLECTIVE_OP = "collective-op"  # CKP401
PEER_EXCHANGE = "peer-exchange"  # CKP402: point-to-point ops, all-to-alls with split sizes the region computes
SAVED_OUTPUT_MUTATED = "saved-output-mutated"  # CKP501: in-place op on an output a selective-checkpoint policy may save
NONDETERMINISTIC_OP = "nondeterministic-op"  # CKP504: an op whose recompute may differ (routing selections, accumulations)

Facts = tuple[tuple[str, str], ...]
StateKey = tuple[str, str]  # state that outlives the region: (class, attribute), ("global", name), ("path", path)
BUILT_FOR, BUILT_BY = "built_for", "built_by"  # facts of an effect reached through an over-approximated module
ONLY_WHEN = "only_when"  # fact of an effect under a test of an optional argument: `past_key_values` is not None


def approximation_note(module: str, builder: str) -> Facts:
    """Facts saying the module's class came from a builder or registry with an unknown key."""
    return ((BUILT_FOR, f"`{module}`"), (BUILT_BY, f"`{builder}`"))


def with_note(effect: Effect, note: Facts) -> Effect:
    """The effect, noted as reached through an over-approximated module (the innermost note wins)."""
    if not note or any(name == BUILT_BY for name, _ in effect.facts):
        return effect
    return replace(effect, facts=effect.facts + note)


@dataclass(frozen=True, eq=False)
class Effect:
    kind: str
    module: ModuleSymbols
    node: ast.AST
    variant: str  # which form of the hazard: keys the rule's message
    facts: Facts = ()  # what the message quotes: ("subject", "`self.cache`"), ("action", "assigns"), ...
    chain: tuple[str, ...] = ()  # functions called from the region entry down to this one
    depends_on: frozenset[tuple[str, str]] = frozenset()  # for branches: the mutable state they read (all of it)
    # for communication and CKP501/CKP504: the ops it emits (`_c10d_functional.all_reduce`,
    # `aten.mm`); a selective-checkpoint policy that saves all of them keeps them from replaying
    saved_as: frozenset[str] = frozenset()
    # for a push onto or a pop off a stack that outlives the region (`s.append(v)`, `s.pop()`):
    # "push" or "pop", and the state it changes; a region that does both leaves it as it was
    stack: str = ""
    state: frozenset[tuple[str, str]] = frozenset()

    @property
    def key(self) -> tuple[str, int]:
        return (self.kind, id(self.node))

    @property
    def fact_map(self) -> dict[str, str]:
        return dict(self.facts)

    def saved_by(self, saved_ops: frozenset[str]) -> bool:
        """Whether a policy saving `saved_ops` keeps this op's output, so the replay does not run it."""
        return bool(self.saved_as) and self.saved_as <= saved_ops


@dataclass(frozen=True)
class PendingStore:
    """A plain store whose replay changes something only if the state was read before it in
    the same run: a caller that read `keys` first reports `effect`."""

    keys: frozenset[StateKey]
    effect: Effect


@dataclass(frozen=True)
class ReturnedSelection:
    """A selection whose indices a function returns without routing them (`route()` returning
    `topk(...).indices`): its caller reports `effect` where it routes them (CKP504), adding
    the use to its facts, or returns them on at `position` (None: the value is the indices)."""

    effect: Effect
    position: int | None


@dataclass(frozen=True)
class HandedIndices:
    """A selection's indices that a function hands to a later call of its own (`self.experts(x,
    top_k_index, w)`) at argument `slot` (a position or a keyword): reported (CKP504) when the
    callee routes with the parameter they bind."""

    effect: Effect
    call: ast.Call
    slot: int | str


@dataclass(frozen=True)
class Context:
    """What a function is called with: `self`, its arguments, its closure; entries take inputs."""

    receiver: Value | None = None
    arguments: tuple[tuple[str, Value], ...] = ()
    closure: tuple[tuple[str, Value], ...] = ()
    entry: bool = False  # a region entry: its parameters are inputs of the checkpoint call
    # how many positional arguments and which keywords the checkpoint call passes (None: unknown, all)
    entry_positional: int | None = None
    entry_keywords: tuple[str, ...] = ()
    # parameters the checkpoint call passes a value that is false in a checkpointed training
    # step (`use_cache` after `if self.gradient_checkpointing and self.training: use_cache = False`)
    entry_false_positions: tuple[int, ...] = ()
    entry_false_keywords: tuple[str, ...] = ()
    closure_in_region: bool = False  # the closure's variables belong to a frame inside the region


@dataclass(frozen=True)
class Summary:
    effects: tuple[Effect, ...] = ()
    returns: Value = LOCAL_VALUE
    writes: frozenset[StateKey] = frozenset()  # attributes and globals it (or its callees) writes
    reads: frozenset[StateKey] = frozenset()  # outliving state it reads before writing it
    settled: frozenset[StateKey] = frozenset()  # written state whose last write the replay repeats identically
    accumulated: frozenset[StateKey] = frozenset()  # written state it added to or changed in place
    pending: tuple[PendingStore, ...] = ()  # plain stores, hazards where a caller read the state first
    calls: tuple[CallEdge, ...] = ()  # the calls it and its callees make, when coverage is asked for (coverage.py)
    # what a method leaves in its receiver's attributes (`self.input_splits = counts.tolist()`): the
    # caller's later reads in the same run see these values, not the attribute's outside state
    stored_attributes: tuple[tuple[str, Value], ...] = ()
    returned_selections: tuple[ReturnedSelection, ...] = ()  # indices left to the caller (CKP504)


EMPTY_SUMMARY = Summary()


@dataclass(frozen=True)
class UntrackedOutput:
    """A region all of whose reachable returns hand reentrant checkpoint an untracked container."""

    region: str  # `Transformer2DModel.forward`
    container: str  # `Transformer2DModelOutput`, `dict`
    path: str  # the region's file, as displayed
    line: int  # the return
    defaulted: tuple[str, ...] = ()  # parameters left at their default that chose that return (`return_dict`)


def under_condition(effect: Effect, condition: str) -> Effect:
    """The effect, noted as running only under `condition` (the innermost condition wins)."""
    if not condition or any(name == ONLY_WHEN for name, _ in effect.facts):
        return effect
    return replace(effect, facts=effect.facts + ((ONLY_WHEN, condition),))
