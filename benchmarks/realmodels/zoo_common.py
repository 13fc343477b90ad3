"""What every zoo adapter shares: a built model, its inputs and loss, line coverage, the
torchvision import shim. Runs inside the corpus venv (imports torch)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable

import torch


@dataclass
class Built:
    """One model ready for a training step."""

    model: torch.nn.Module
    inputs: Callable[[], dict[str, Any]]  # fresh random inputs (seeded by the caller)
    enable: Callable[[bool], None]  # turn checkpointing on, reentrant or not
    arch: str  # the model class's qualified name
    variant: str  # which configuration or entrypoint was built
    extra: dict[str, Any] = field(default_factory=dict)


def torchvision_without_native_ops() -> None:
    """Let a CUDA torchvision wheel import against a CPU torch.

    torchvision registers fake kernels for `torchvision::nms`/`qnms` unconditionally; when its
    native library cannot load, those operators do not exist and the import fails. Defining the
    two schemas (never implemented: no model here calls them) lets the pure-Python parts load.
    """
    if "torchvision" in sys.modules or hasattr(torchvision_without_native_ops, "library"):
        return
    library = torch.library.Library("torchvision", "DEF")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    torchvision_without_native_ops.library = library  # type: ignore[attr-defined]  # keep it alive


def floating_tensors(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """The differentiable tensors in a model output (ModelOutput, tuple, dict, dataclass)."""
    if depth > 6:
        return []
    if isinstance(value, torch.Tensor):
        return [value] if value.requires_grad and (value.is_floating_point() or value.is_complex()) else []
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif hasattr(value, "__dataclass_fields__"):
        items = [getattr(value, name, None) for name in value.__dataclass_fields__]
    else:
        return []
    found: list[torch.Tensor] = []
    for item in items:
        found.extend(floating_tensors(item, depth + 1))
    return found


def loss_of(output: Any) -> torch.Tensor:
    """Mean of every differentiable output, summed: a loss that reaches every head."""
    tensors = floating_tensors(output)
    if not tensors:
        raise RuntimeError("the model returned no tensor that requires grad")
    total = torch.zeros(())
    for tensor in tensors:
        value = tensor.float().mean() if not tensor.is_complex() else tensor.abs().float().mean()
        total = total + value
    return total


class LineCoverage:
    """Which lines of the libraries under test ran (sys.settrace, library frames only).

    The runtime records only function-level ranges; the report needs lines, to tell a finding
    whose line never ran in this configuration from one that ran without a divergence.
    """

    def __init__(self, directories: tuple[str, ...]) -> None:
        self.directories = tuple(os.path.join(d, "") for d in directories)
        self.lines: dict[str, set[int]] = {}
        self._previous: Any = None

    def __enter__(self) -> LineCoverage:
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._previous)

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        filename = frame.f_code.co_filename
        if not filename.startswith(self.directories):
            return None
        lines = self.lines.setdefault(filename, set())
        lines.add(frame.f_lineno)

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local

    def to_dict(self) -> dict[str, list[int]]:
        return {path: sorted(lines) for path, lines in sorted(self.lines.items())}


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def error_kind(exc: BaseException) -> str:
    """A short bucket for the report's 'failed, by reason' table."""
    message = str(exc)
    if isinstance(exc, ImportError) or "requires the" in message and "library" in message:
        return "missing dependency"
    if isinstance(exc, MemoryError) or "too large" in message:
        return "too large"
    if isinstance(exc, (TypeError, ValueError, KeyError, AttributeError, AssertionError, IndexError)):
        return f"{type(exc).__name__}"
    if isinstance(exc, RuntimeError):
        return "RuntimeError"
    return type(exc).__name__
