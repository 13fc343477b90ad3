"""Intercept every checkpoint call where torch's implementations meet.

Patching the public `checkpoint` name misses `from torch.utils.checkpoint import checkpoint`,
partials built earlier, `checkpoint_wrapper` and composable `checkpoint(module)`. Every eager
call passes through one of two places at call time in torch 2.x: the non-reentrant generator
(`_checkpoint_without_reentrant_generator` up to 2.13, `..._generator_impl` from 2.14, also
bound by name in `torch.distributed._composable.checkpoint_activation`) and
`CheckpointFunction.apply` (a Python classmethod up to 2.13, the C `_FunctionBase.apply`
descriptor from 2.14). `resolve_layout` finds them, binding arguments by parameter name so a
reordered signature still works; a torch laid out otherwise is refused with one line.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import os
import sys
import threading
import types
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Generator, Iterator

import torch
import torch.utils.checkpoint as torch_checkpoint

from ckptlint.runtime.frames import is_user_code
from ckptlint.runtime.sites import Site
from ckptlint.runtime.witness import Witness

_LOCAL = threading.local()
_GENERATOR_FLAGS = ("preserve_rng_state", "context_fn", "determinism_check", "debug", "early_stop")
_GENERATOR_NAMES = ("_checkpoint_without_reentrant_generator_impl", "_checkpoint_without_reentrant_generator")
CALLERS = 2  # user frames recorded above a call site (Record.callers)
_ORIGINAL = "__ckptlint_original__"  # on each patch: what it replaced, so a nested install finds torch's own
_BACKWARD_FAILED = "__ckptlint_backward_failed__"  # on a reentrant region we wrapped: told when its backward raises


class UnsupportedTorch(RuntimeError):
    """This torch does not have the internals the companion intercepts; the message is one line."""

    def __init__(self, missing: str):
        super().__init__(
            f"ckptlint's runtime companion does not support torch {torch.__version__}: {missing}; please report it"
        )


def in_backward() -> bool:
    """Whether autograd is running a backward pass on this thread (a recompute runs there)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def inside_checkpointed_forward() -> bool:
    """Whether the forward of a user's non-reentrant checkpoint call is running on this thread
    (a reentrant one runs its forward without grad, where nothing is intercepted)."""
    return getattr(_LOCAL, "forwards", 0) > 0


def _marking_forward(inner: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """torch's non-reentrant generator, with `inside_checkpointed_forward()` true between its
    first step and its second, where torch runs the region's forward."""
    try:
        value = next(inner)
    except StopIteration as stop:
        return stop.value
    _LOCAL.forwards = getattr(_LOCAL, "forwards", 0) + 1
    try:
        sent = yield value
    finally:
        _LOCAL.forwards -= 1
    try:
        value = inner.send(sent)
    except StopIteration as stop:
        return stop.value
    return (yield from _rest(inner, value))


def _rest(inner: Generator[Any, Any, Any], value: Any) -> Generator[Any, Any, Any]:
    """The rest of a started generator, whose last step gave `value`."""
    while True:
        sent = yield value
        try:
            value = inner.send(sent)
        except StopIteration as stop:
            return stop.value


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


def user_site(extra_skipped: tuple[str, ...] = ()) -> Site | None:
    """The first frame outside torch, functools, contextlib, ckptlint and configured wrappers."""
    sites = user_sites(extra_skipped, 1)
    return sites[0] if sites else None


def user_sites(extra_skipped: tuple[str, ...] = (), count: int = 1 + CALLERS) -> list[Site]:
    """The first `count` such frames, innermost first: the call site, then its callers (a
    library helper's site, `checkpoint_seq` in timm, is called from the model's own line)."""
    found: list[Site] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and len(found) < count:
        if is_user_code(frame.f_code.co_filename, extra_skipped):
            found.append(_site_of(frame))
        frame = frame.f_back
    return found


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
    callers: tuple[Site, ...] = ()  # the user frames that called the site's frame, innermost first
    composable_module: torch.nn.Module | None = field(default=None, repr=False)
    # set by whoever probed the call: told the exception the user's backward raises through a
    # reentrant region (DDP's "mark a variable ready only once" is only seen there)
    backward_failed: Callable[[BaseException], None] | None = field(default=None, repr=False)
    # told the exception checkpoint's own forward raises (a torch.func transform refuses a region)
    forward_failed: Callable[[BaseException], None] | None = field(default=None, repr=False)

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
        # the generator's own flags, by name: torch 2.14 added respect_saved_tensors_hooks
        config = {name: value for name, value in flags.items() if name not in _OWN_FLAGS}
        return ORIGINALS["checkpoint"](self.fn, *args, use_reentrant=False, **config, **kwargs)

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
_OWN_FLAGS = frozenset({"use_reentrant", "use_reentrant_defaulted"})  # ckptlint's, not the generator's


@dataclass(frozen=True)
class Layout:
    """Where this torch's checkpoint implementations meet: what `install` patches and replays with."""

    function: type[Any]  # CheckpointFunction
    generator_name: str  # the non-reentrant generator's name in torch.utils.checkpoint
    generator: Callable[..., Any]  # torch's own generator
    flags: tuple[str, ...]  # the generator's configuration parameters, in order
    apply: Callable[..., Any]  # torch's own reentrant apply, always called as apply(cls, *args)
    apply_raw: Any  # the class attribute that apply came from
    apply_binds_class: bool  # a classmethod (receives cls) or static-like
    use_reentrant_at: dict[str, int | None]  # entry points that take `use_reentrant`: its position, None if keyword-only
    backward: Callable[..., Any] | None = None  # torch's own CheckpointFunction.backward, where a staticmethod
    backward_raw: Any = None  # the class attribute it came from


def resolve_layout() -> Layout:
    """Inspect torch (seeing through a patch of ours, for nested audits) before patching anything,
    so a refusal leaves torch untouched; any shape not recognised raises UnsupportedTorch."""
    function = getattr(torch_checkpoint, "CheckpointFunction", None)
    if not isinstance(function, type):
        raise UnsupportedTorch(f"torch.utils.checkpoint.CheckpointFunction is {_kind(function)}")
    generator_name, generator, flags = _resolve_generator()
    apply, binds_class, raw = _resolve_apply(function)
    use_reentrant_at: dict[str, int | None] = {}
    for name in ("checkpoint", "checkpoint_sequential", "_checkpoint_impl"):
        entry = _own(getattr(torch_checkpoint, name, None))
        if entry is None and name == "_checkpoint_impl":
            continue  # only torch 2.14 and later route `checkpoint` through it
        parameters = _parameters(entry, f"torch.utils.checkpoint.{name}")
        if "use_reentrant" in parameters:
            use_reentrant_at[name] = _position(parameters, "use_reentrant")
        if name == "checkpoint":
            # a replay passes the user's flags to `checkpoint` by name: each must be accepted there
            unknown = [flag for flag in flags if flag not in _GENERATOR_FLAGS and flag not in parameters]
            if unknown:
                raise UnsupportedTorch(
                    f"torch.utils.checkpoint.{generator_name} takes {', '.join(unknown)}, "
                    f"which torch.utils.checkpoint.checkpoint does not"
                )
    backward_raw = _own(inspect.getattr_static(function, "backward", None))
    backward = backward_raw.__func__ if isinstance(backward_raw, staticmethod) else None  # else not watched
    return Layout(function, generator_name, generator, flags, apply, raw, binds_class, use_reentrant_at, backward, backward_raw)


def _resolve_generator() -> tuple[str, Callable[..., Any], tuple[str, ...]]:
    """torch 2.14 moved the body to `..._impl(fn, args, kwargs, *, flags)` and left the old name as
    a shim; where `_impl` exists it is the one every caller reaches."""
    for name in _GENERATOR_NAMES:
        if not hasattr(torch_checkpoint, name):
            continue
        generator = _own(getattr(torch_checkpoint, name))
        where = f"torch.utils.checkpoint.{name}"
        if not inspect.isgeneratorfunction(generator):
            raise UnsupportedTorch(f"{where} is {_kind(generator)}, not a generator function")
        parameters = _parameters(generator, where)
        missing = [p for p in ("fn", "args", "kwargs", *_GENERATOR_FLAGS) if p not in parameters]
        if missing:
            raise UnsupportedTorch(f"{where} has no parameter {', '.join(missing)}")
        return name, generator, tuple(p for p in parameters if p not in ("fn", "args", "kwargs"))
    raise UnsupportedTorch(f"torch.utils.checkpoint has neither {' nor '.join(_GENERATOR_NAMES)}")


def _resolve_apply(function: type[Any]) -> tuple[Callable[..., Any], bool, Any]:
    """torch's own `CheckpointFunction.apply`, normalised to be called as apply(cls, *args)."""
    raw = _own(inspect.getattr_static(function, "apply", None))
    if isinstance(raw, classmethod):  # up to 2.13: torch.autograd.Function.apply, in Python
        return raw.__func__, True, raw
    if isinstance(raw, types.ClassMethodDescriptorType):  # from 2.14: torch._C._FunctionBase.apply, in C
        descriptor = raw

        def bound(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
            return descriptor.__get__(None, cls)(*args, **kwargs)

        return bound, True, raw
    target = raw.__func__ if isinstance(raw, staticmethod) else raw
    if isinstance(raw, (staticmethod, types.FunctionType)) and callable(target):  # called on the class: no cls

        def unbound(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
            return target(*args, **kwargs)

        return unbound, False, raw
    raise UnsupportedTorch(f"torch.utils.checkpoint.CheckpointFunction.apply is {_kind(raw)}")


def _parameters(entry: Any, where: str) -> dict[str, inspect.Parameter]:
    if not callable(entry):
        raise UnsupportedTorch(f"{where} is {_kind(entry)}")
    try:
        return dict(inspect.signature(entry).parameters)
    except (TypeError, ValueError):
        raise UnsupportedTorch(f"{where} has no readable signature") from None


def _position(parameters: dict[str, inspect.Parameter], name: str) -> int | None:
    if parameters[name].kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
        return None
    return list(parameters).index(name)


def _own(value: Any) -> Any:
    """torch's own object behind a patch of ours (a nested audit), else the value itself."""
    inner = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
    if isinstance(inner, types.FunctionType):
        return inner.__dict__.get(_ORIGINAL, value)
    return value


def _kind(value: Any) -> str:
    """What was found instead, in a few words for a one-line message."""
    return "missing" if value is None else f"an object of type {type(value).__qualname__!r}"


def _marked(patch: Callable[..., Any], original: Any) -> Callable[..., Any]:
    setattr(patch, _ORIGINAL, original)
    return patch


class Interceptor:
    """Installs and removes the patches; hands each call to `on_call`, which may return a
    `Witness` to watch the real call's forward and recompute."""

    def __init__(self, on_call: Callable[[InterceptedCall], Witness | None], wrapper_dirs: tuple[str, ...] = ()):
        self.on_call = on_call
        self.wrapper_dirs = tuple(os.path.abspath(d) + os.sep for d in wrapper_dirs)
        self.installed = False
        self._patches: list[tuple[Any, str, Any, bool]] = []
        self._last_call: InterceptedCall | None = None  # the call `_intercepted` built last, for `_reentrant`

    # -- installation ---------------------------------------------------------

    def install(self) -> None:
        if self.installed:
            return
        layout = resolve_layout()
        ORIGINALS.update(
            generator=layout.generator,
            apply=layout.apply,
            checkpoint=_own(torch_checkpoint.checkpoint),
            checkpoint_sequential=_own(torch_checkpoint.checkpoint_sequential),
        )
        signature = inspect.signature(layout.generator)
        function, original_apply = layout.function, layout.apply
        interceptor = self

        def _checkpoint_without_reentrant_generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            call, witness = interceptor._non_reentrant(signature, layout.flags, args, kwargs) if not probing() else (None, None)
            if witness is None:
                inner = _telling(layout.generator(*args, **kwargs), call)
                return (yield from (_marking_forward(inner) if not probing() else inner))
            bound = signature.bind(*args, **kwargs)
            bound.arguments["fn"] = witness.comparing_function(bound.arguments["fn"])  # only the recompute calls it
            return (yield from _recording_forward(_telling(layout.generator(*bound.args, **bound.kwargs), call), witness))

        def apply(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
            if not probing() and cls is function and len(args) >= 2:
                call, witness = interceptor._reentrant(args)
                region = args[0]
                if witness is not None:
                    region = witness.forward_then_recompute(region)
                if call is not None and call.backward_failed is not None and layout.backward is not None:
                    region = _observed(region, call.backward_failed)
                args = (region, *args[1:])
                if call is not None and call.forward_failed is not None:
                    try:
                        return original_apply(cls, *args, **kwargs)
                    except BaseException as error:
                        _tell(call.forward_failed, error)
                        raise
            return original_apply(cls, *args, **kwargs)

        def static_apply(*args: Any, **kwargs: Any) -> Any:
            return apply(function, *args, **kwargs)

        generator = _marked(_checkpoint_without_reentrant_generator, layout.generator)
        self._patch(torch_checkpoint, layout.generator_name, generator)
        if layout.apply_binds_class:
            self._patch(function, "apply", classmethod(_marked(apply, layout.apply_raw)))
        else:
            self._patch(function, "apply", staticmethod(_marked(static_apply, layout.apply_raw)))
        if layout.backward is not None:
            self._patch(function, "backward", staticmethod(_marked(_observing_backward(layout.backward), layout.backward_raw)))
        for name, position in layout.use_reentrant_at.items():
            original = _own(getattr(torch_checkpoint, name))
            self._patch(torch_checkpoint, name, _marked(_remember_use_reentrant(original, position), original))
        self._patch_distributed(layout.generator, generator)
        self.installed = True

    def _patch_distributed(self, original: Callable[..., Any], generator: Callable[..., Any]) -> None:
        if not torch.distributed.is_available():
            return
        try:
            from torch.distributed._composable import checkpoint_activation
            from torch.distributed.algorithms._checkpoint import checkpoint_wrapper
        except ImportError:
            return
        # composable checkpoint binds the generator by name at import (whichever name this torch uses)
        for name, value in list(vars(checkpoint_activation).items()):
            if _own(value) is original:
                self._patch(checkpoint_activation, name, generator)
        self._patch_ddp()
        original_init = checkpoint_wrapper.CheckpointWrapper.__init__

        @functools.wraps(original_init)
        def __init__(wrapper: Any, *args: Any, **kwargs: Any) -> None:
            original_init(wrapper, *args, **kwargs)
            site = user_site(self.wrapper_dirs)
            object.__setattr__(wrapper, "_ckptlint_constructed_at", site)

        self._patch(checkpoint_wrapper.CheckpointWrapper, "__init__", __init__)

    def _patch_ddp(self) -> None:
        """Remember where each DistributedDataParallel is built (where CKP303 reports)."""
        from torch.nn.parallel import DistributedDataParallel

        from ckptlint.runtime.ddp import CONSTRUCTED

        original_init = DistributedDataParallel.__init__

        @functools.wraps(original_init)
        def __init__(ddp: Any, *args: Any, **kwargs: Any) -> None:
            original_init(ddp, *args, **kwargs)
            CONSTRUCTED[ddp] = user_site(self.wrapper_dirs)

        self._patch(DistributedDataParallel, "__init__", __init__)

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

    def _non_reentrant(
        self, signature: inspect.Signature, flag_names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[InterceptedCall | None, Witness | None]:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None, None
        bound.apply_defaults()
        arguments = bound.arguments
        fn = arguments["fn"]
        region_args = tuple(arguments["args"] or ())
        region_kwargs = dict(arguments["kwargs"] or {})
        flags = {name: arguments[name] for name in flag_names}
        flags["use_reentrant"] = False
        composable = _composable_module(fn)
        self._last_call = None
        witness = self._intercepted("composable" if composable is not None else "non-reentrant", fn, region_args, region_kwargs, flags, composable)
        call, self._last_call = self._last_call, None
        return call, witness

    def _reentrant(self, args: tuple[Any, ...]) -> tuple[InterceptedCall | None, Witness | None]:
        function, preserve, *inputs = args
        flags = {"preserve_rng_state": preserve, "use_reentrant": True}
        self._last_call = None
        witness = self._intercepted("reentrant", function, tuple(inputs), {}, flags, None)
        call, self._last_call = self._last_call, None
        return call, witness

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
        if in_backward() or inside_checkpointed_forward():
            # a checkpoint nested in another's forward or recompute: probed in both (so the recompute
            # saves what the forward saved), judged by the enclosing call's record (report.NESTED)
            flags["nested"] = True
        flags["use_reentrant_defaulted"] = getattr(_LOCAL, "use_reentrant_defaulted", None)
        _LOCAL.use_reentrant_defaulted = None  # consumed: a nested call must not inherit it
        sites = user_sites(self.wrapper_dirs)
        if not sites:
            return None
        call = InterceptedCall(kind, fn, args, kwargs, flags, sites[0], describe_region(fn), _wrapper_site(), tuple(sites[1:]), composable)
        self._last_call = call
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


def _telling(inner: Generator[Any, Any, Any], call: InterceptedCall | None) -> Generator[Any, Any, Any]:
    """torch's non-reentrant generator, telling the call when it raises (a torch.func transform
    refuses its saved-tensor hooks); the exception goes on unchanged. Unwrapped unless watched."""
    observer = call.forward_failed if call is not None else None
    if observer is None:
        return inner

    def telling() -> Generator[Any, Any, Any]:
        try:
            return (yield from inner)
        except BaseException as error:
            _tell(observer, error)
            raise

    return telling()


def _tell(observer: Callable[[BaseException], None], error: BaseException) -> None:
    with probe_guard(), contextlib.suppress(Exception):
        observer(error)


def _observed(region: Callable[..., Any], backward_failed: Callable[[BaseException], None]) -> Callable[..., Any]:
    """The region as torch will call it, carrying whom to tell when its backward raises."""

    def observed_region(*args: Any, **kwargs: Any) -> Any:
        return region(*args, **kwargs)

    setattr(observed_region, _BACKWARD_FAILED, backward_failed)
    return observed_region


def _observing_backward(original: Callable[..., Any]) -> Callable[..., Any]:
    """CheckpointFunction.backward, telling the probed call when it raises; the exception
    itself goes on to the user unchanged."""

    def backward(ctx: Any, *grads: Any) -> Any:
        try:
            return original(ctx, *grads)
        except BaseException as error:
            observer = getattr(getattr(ctx, "run_function", None), _BACKWARD_FAILED, None)
            if observer is not None:
                _tell(observer, error)
            raise

    return backward


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
