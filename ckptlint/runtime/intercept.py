"""Intercept every checkpoint call where torch's implementations meet.

Patching the public `checkpoint` name misses `from torch.utils.checkpoint import checkpoint`,
partials built earlier, `checkpoint_wrapper` and composable `checkpoint(module)`. Every eager
call passes through one of two places at call time in torch 2.x: the non-reentrant
`_checkpoint_without_reentrant_generator` (also bound by name in
`torch.distributed._composable.checkpoint_activation`) and `CheckpointFunction.apply`.
Arguments are bound by parameter name, so a reordered signature still works; a torch
without these is refused with a clear message.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import os
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Generator, Iterator

import torch
import torch.utils.checkpoint as torch_checkpoint

from ckptlint.runtime.witness import Witness

_LOCAL = threading.local()
_GENERATOR_PARAMETERS = ("fn", "preserve_rng_state", "context_fn", "determinism_check", "debug", "early_stop")
_SKIPPED_DIRS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # ckptlint itself
)
_SKIPPED_FILES = frozenset({functools.__file__, contextlib.__file__})


class UnsupportedTorch(RuntimeError):
    """This torch does not have the internals the companion intercepts."""


def probing() -> bool:
    return getattr(_LOCAL, "active", False)


@contextlib.contextmanager
def probe_guard() -> Iterator[None]:
    """While a probe runs, checkpoint calls (its own replays, nested checkpoints) pass through."""
    previous = probing()
    _LOCAL.active = True
    try:
        yield
    finally:
        _LOCAL.active = previous


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    column: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "column": self.column}


def user_site(extra_skipped: tuple[str, ...] = ()) -> Site | None:
    """The first frame outside torch, functools, contextlib, ckptlint and configured wrappers."""
    frame: FrameType | None = sys._getframe(1)
    skipped = _SKIPPED_DIRS + extra_skipped
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skipped) and filename not in _SKIPPED_FILES and not filename.startswith("<frozen"):
            return _site_of(frame)
        frame = frame.f_back
    return None


def _site_of(frame: FrameType) -> Site:
    code = frame.f_code
    line, column = frame.f_lineno, 1
    positions = list(code.co_positions())
    index = frame.f_lasti // 2
    if 0 <= index < len(positions):
        start_line, _, start_column, _ = positions[index]
        if start_line is not None and start_column is not None:
            line = start_line
            text = linecache.getline(code.co_filename, start_line)
            column = len(text.encode("utf-8")[:start_column].decode("utf-8", "replace")) + 1
    return Site(os.path.abspath(code.co_filename), line, column)


def describe_region(fn: Any) -> dict[str, Any]:
    """Where the replayed code is defined: a function, or a module's forward."""
    target = fn
    for _ in range(8):
        if isinstance(target, functools.partial):
            target = target.func
        elif isinstance(target, torch.nn.Module):
            target = type(target).forward
        elif inspect.ismethod(target):
            target = target.__func__
        else:
            break
    target = inspect.unwrap(target) if callable(target) else target
    code = getattr(target, "__code__", None)
    if code is None:
        return {"name": getattr(target, "__qualname__", type(fn).__name__), "path": None, "first_line": None, "last_line": None}
    lines = [line for _, _, line in code.co_lines() if line is not None]
    return {
        "name": getattr(target, "__qualname__", code.co_name),
        "path": os.path.abspath(code.co_filename),
        "first_line": code.co_firstlineno,
        "last_line": max(lines, default=code.co_firstlineno),
    }


@dataclass
class InterceptedCall:
    """One checkpoint call about to run, as the user made it."""

    kind: str  # "non-reentrant", "reentrant" or "composable"
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    flags: dict[str, Any]
    site: Site
    region: dict[str, Any]
    constructed_at: Site | None = None
    composable_module: torch.nn.Module | None = field(default=None, repr=False)

    @property
    def device(self) -> str:
        for value in self.args:
            if isinstance(value, torch.Tensor):
                return str(value.device)
        return "cpu"

    def run_plain(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def run_checkpointed(self, *args: Any, **kwargs: Any) -> Any:
        flags = self.flags
        if self.kind == "reentrant":
            return ORIGINALS["apply"](torch_checkpoint.CheckpointFunction, self.fn, flags["preserve_rng_state"], *args)
        return ORIGINALS["checkpoint"](
            self.fn,
            *args,
            use_reentrant=False,
            preserve_rng_state=flags["preserve_rng_state"],
            context_fn=flags["context_fn"],
            determinism_check=flags["determinism_check"],
            debug=flags["debug"],
            early_stop=flags["early_stop"],
            **kwargs,
        )

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Around a whole replay, forward and backward. Composable checkpoint works through
        forward hooks: they are off while the probe replays, and the user's in-flight state kept."""
        module = self.composable_module
        if module is None:
            yield
            return
        from torch.distributed._composable.checkpoint_activation import checkpoint as composable

        state = composable.state(module)
        # the forward hook resets `_ac_generator` even when disabled: keep the user's in-flight one
        previous = (state.enable_hook, getattr(state, "_ac_generator", None))
        state.enable_hook = False
        try:
            yield
        finally:
            state.enable_hook, state._ac_generator = previous


ORIGINALS: dict[str, Any] = {}


class Interceptor:
    """Installs and removes the patches; hands each call to `on_call`, which may return a
    `Witness` to watch the real call's forward and recompute."""

    def __init__(self, on_call: Callable[[InterceptedCall], Witness | None], wrapper_dirs: tuple[str, ...] = ()):
        self.on_call = on_call
        self.wrapper_dirs = tuple(os.path.abspath(d) + os.sep for d in wrapper_dirs)
        self.installed = False
        self._patches: list[tuple[Any, str, Any, bool]] = []

    # -- installation ---------------------------------------------------------

    def install(self) -> None:
        if self.installed:
            return
        generator = getattr(torch_checkpoint, "_checkpoint_without_reentrant_generator", None)
        function = getattr(torch_checkpoint, "CheckpointFunction", None)
        if generator is None or function is None or not set(_GENERATOR_PARAMETERS) <= set(inspect.signature(generator).parameters):
            raise UnsupportedTorch(
                f"ckptlint's runtime companion needs torch.utils.checkpoint._checkpoint_without_reentrant_generator "
                f"and CheckpointFunction (torch 2.1 to 2.13); torch {torch.__version__} does not have them"
            )
        ORIGINALS.setdefault("generator", generator)
        ORIGINALS.setdefault("apply", inspect.getattr_static(function, "apply").__func__)
        ORIGINALS.setdefault("checkpoint", torch_checkpoint.checkpoint)
        ORIGINALS.setdefault("checkpoint_sequential", torch_checkpoint.checkpoint_sequential)
        signature = inspect.signature(ORIGINALS["generator"])
        interceptor = self

        def _checkpoint_without_reentrant_generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            witness = interceptor._non_reentrant(signature, args, kwargs) if not probing() else None
            if witness is None:
                return (yield from ORIGINALS["generator"](*args, **kwargs))
            bound = signature.bind(*args, **kwargs)
            bound.arguments["fn"] = witness.comparing_function(bound.arguments["fn"])  # only the recompute calls it
            return (yield from _recording_forward(ORIGINALS["generator"](*bound.args, **bound.kwargs), witness))

        def apply(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
            if not probing() and cls is function and len(args) >= 2:
                witness = interceptor._reentrant(args)
                if witness is not None:
                    args = (witness.forward_then_recompute(args[0]), *args[1:])
            return ORIGINALS["apply"](cls, *args, **kwargs)

        self._patch(torch_checkpoint, "_checkpoint_without_reentrant_generator", _checkpoint_without_reentrant_generator)
        self._patch(function, "apply", classmethod(apply))
        self._patch(torch_checkpoint, "checkpoint", _remember_use_reentrant(ORIGINALS["checkpoint"], None))
        self._patch(torch_checkpoint, "checkpoint_sequential", _remember_use_reentrant(ORIGINALS["checkpoint_sequential"], 3))
        self._patch_distributed(_checkpoint_without_reentrant_generator)
        self.installed = True

    def _patch_distributed(self, generator: Callable[..., Any]) -> None:
        if not torch.distributed.is_available():
            return
        try:
            from torch.distributed._composable import checkpoint_activation
            from torch.distributed.algorithms._checkpoint import checkpoint_wrapper
        except ImportError:
            return
        self._patch(checkpoint_activation, "_checkpoint_without_reentrant_generator", generator)
        original_init = checkpoint_wrapper.CheckpointWrapper.__init__

        @functools.wraps(original_init)
        def __init__(wrapper: Any, *args: Any, **kwargs: Any) -> None:
            original_init(wrapper, *args, **kwargs)
            site = user_site(self.wrapper_dirs)
            object.__setattr__(wrapper, "_ckptlint_constructed_at", site)

        self._patch(checkpoint_wrapper.CheckpointWrapper, "__init__", __init__)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        had_own = name in vars(owner)
        self._patches.append((owner, name, vars(owner).get(name), had_own))
        setattr(owner, name, value)

    def uninstall(self) -> None:
        for owner, name, previous, had_own in reversed(self._patches):
            if had_own:
                setattr(owner, name, previous)
            else:
                delattr(owner, name)
        self._patches.clear()
        self.installed = False

    # -- interception ---------------------------------------------------------

    def _non_reentrant(self, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Witness | None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        arguments = bound.arguments
        fn = arguments["fn"]
        region_args = tuple(arguments.get("args", ()))
        region_kwargs = dict(arguments.get("kwargs", {}))
        flags = {name: arguments[name] for name in _GENERATOR_PARAMETERS[1:]}
        flags["use_reentrant"] = False
        composable = _composable_module(fn)
        return self._intercepted("composable" if composable is not None else "non-reentrant", fn, region_args, region_kwargs, flags, composable)

    def _reentrant(self, args: tuple[Any, ...]) -> Witness | None:
        function, preserve, *inputs = args
        flags = {"preserve_rng_state": preserve, "use_reentrant": True}
        return self._intercepted("reentrant", function, tuple(inputs), {}, flags, None)

    def _intercepted(
        self,
        kind: str,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        flags: dict[str, Any],
        composable: torch.nn.Module | None,
    ) -> Witness | None:
        if not torch.is_grad_enabled():
            return None  # no backward, so no replay
        if torch.compiler.is_compiling():
            return None
        flags["use_reentrant_defaulted"] = getattr(_LOCAL, "use_reentrant_defaulted", None)
        _LOCAL.use_reentrant_defaulted = None  # consumed: a nested call must not inherit it
        site = user_site(self.wrapper_dirs)
        if site is None:
            return None
        call = InterceptedCall(kind, fn, args, kwargs, flags, site, describe_region(fn), _wrapper_site(), composable)
        return self.on_call(call)


def _recording_forward(inner: Generator[Any, Any, Any], witness: Witness) -> Generator[Any, Any, Any]:
    """torch's non-reentrant generator, with the witness logging the forward that runs
    between its first and second step (in `checkpoint()`, or between the composable hooks).
    torch steps it with `next()` twice; `yield from` resumes the started generator."""
    value = next(inner)
    recording = witness.recording()
    recording.__enter__()
    try:
        yield value
    except BaseException:
        recording.__exit__(None, None, None)
        inner.close()
        raise
    recording.__exit__(None, None, None)
    return (yield from inner)


def _remember_use_reentrant(original: Callable[..., Any], position: int | None) -> Callable[..., Any]:
    """Wrap the public function only to learn whether the caller passed `use_reentrant`."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        positional = args[position] if position is not None and len(args) > position else None
        given = kwargs.get("use_reentrant", positional)
        previous = getattr(_LOCAL, "use_reentrant_defaulted", None)
        _LOCAL.use_reentrant_defaulted = given is None
        try:
            return original(*args, **kwargs)
        finally:
            _LOCAL.use_reentrant_defaulted = previous

    return wrapper


def _composable_module(fn: Any) -> torch.nn.Module | None:
    if not isinstance(fn, torch.nn.Module) or not torch.distributed.is_available():
        return None
    try:
        from torch.distributed._composable.checkpoint_activation import checkpoint as composable
    except ImportError:
        return None
    state = composable.state(fn)
    return fn if state is not None and getattr(state, "enable_hook", False) else None


def _wrapper_site() -> Site | None:
    """For `checkpoint_wrapper` modules: where the wrapper was built (the static finding's place)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        wrapper = frame.f_locals.get("self") if frame.f_code.co_name == "forward" else None
        site: Site | None = getattr(wrapper, "_ckptlint_constructed_at", None)  # set by the CheckpointWrapper patch
        if site is not None:
            return site
        frame = frame.f_back
    return None
