"""Which ops a selective-checkpoint policy saved and which backward recomputed (a PyTorch
counterpart of JAX's `print_saved_residuals`), seen during the checkpointed replay.

`create_selective_checkpoint_contexts` returns a caching mode, which asks its `policy_fn`
about every op of the forward, and a cached mode, which serves saved outputs in backward
and runs the others again. The listing wraps the caching mode's `policy_fn` (the wrapper
returns the user's decision unchanged, so the policy decides what it always did) and, in
backward, stacks a counting mode above the cached one: an op the forward's policy did not
save is an op the recompute ran again. Non-reentrant recomputation may stop early, so the
recomputed counts are what backward really ran, not what the policy allowed.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any, Callable, Iterator

from torch.utils import checkpoint as torch_checkpoint
from torch.utils._python_dispatch import TorchDispatchMode

_SAVING = (torch_checkpoint.CheckpointPolicy.MUST_SAVE, torch_checkpoint.CheckpointPolicy.PREFER_SAVE)


class SacListing:
    """The ops saved in forward and recomputed in backward, by op name, with counts."""

    def __init__(self) -> None:
        self.saved: collections.Counter[str] = collections.Counter()
        self.recomputed: collections.Counter[str] = collections.Counter()
        self.seen = False  # the user's context_fn made selective-checkpoint contexts
        self._decisions: dict[str, list[bool]] = collections.defaultdict(list)  # op -> saved? per forward call
        self._wrapped: list[tuple[Any, Callable[..., Any]]] = []  # (caching mode, the user's policy_fn)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {"saved": dict(sorted(self.saved.items())), "recomputed": dict(sorted(self.recomputed.items()))}

    def context_fn(self, user_context_fn: Callable[[], tuple[Any, Any]]) -> Callable[[], tuple[Any, Any]]:
        """The user's `context_fn`, with its selective-checkpoint contexts observed."""

        def contexts() -> tuple[Any, Any]:
            forward, recompute = user_context_fn()
            if not isinstance(forward, torch_checkpoint._CachingTorchDispatchMode):
                return forward, recompute  # not torch's selective checkpointing: nothing to list
            self.seen = True
            self._wrapped.append((forward, forward.policy_fn))
            forward.policy_fn = self._observing(forward.policy_fn)
            return forward, self._counting_recompute(recompute)

        return contexts

    def release(self) -> None:
        """Give each caching mode its own policy back: a `context_fn` may hand out one mode twice."""
        for mode, policy in reversed(self._wrapped):
            mode.policy_fn = policy
        self._wrapped.clear()

    def _observing(self, policy: Callable[..., Any]) -> Callable[..., Any]:
        def observed(context: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            decision = policy(context, func, *args, **kwargs)
            saved = decision is True or decision in _SAVING
            name = str(func)
            self._decisions[name].append(saved)
            if saved:
                self.saved[name] += 1
            return decision

        return observed

    @contextlib.contextmanager
    def _counting_recompute(self, recompute: Any) -> Iterator[None]:
        with recompute, _RecomputeCounter(self._decisions, self.recomputed):
            yield


class _RecomputeCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves __init_subclass__ unannotated
    """Above the cached mode in backward: sees each op the recompute asks for, in order, and
    counts those whose forward call the policy did not save (the cached mode runs them again)."""

    def __init__(self, decisions: dict[str, list[bool]], recomputed: collections.Counter[str]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.decisions = decisions
        self.recomputed = recomputed
        self.index: collections.Counter[str] = collections.Counter()  # each recompute counts anew

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func not in torch_checkpoint.SAC_IGNORED_OPS:
            name = str(func)
            index = self.index[name]
            self.index[name] += 1
            decisions = self.decisions.get(name, [])
            if index < len(decisions) and not decisions[index]:
                self.recomputed[name] += 1
        return func(*args, **(kwargs or {}))


def is_selective(context_fn: Any) -> bool:
    """A `context_fn` other than checkpoint's default (it may make selective contexts)."""
    return context_fn is not None and context_fn is not torch_checkpoint.noop_context_fn

