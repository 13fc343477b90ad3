"""Whether a checkpoint call replays reentrantly, and what decided it: `call_mode`.

One function of the API, the call's arguments and the library versions (versions.py), for
every rule that depends on the mode (CKP206's grad-mode branches; the gradient-flow rules
CKP301-CKP305, which only apply in reentrant mode) and for `ckptlint calls`:

- torch's `use_reentrant` when given (`True`/`False`; a variable: unknown); omitted, torch
  falls back to reentrant with a warning (read in torch 2.13's utils/checkpoint.py; no release
  ckptlint knows of does otherwise, so torch's version is not consulted);
- a library default (Transformer Engine, timm) or fixed mode (DeepSpeed, Megatron, fairscale);
- `checkpoint_impl=` of torch's checkpoint_wrapper (non-reentrant unless `CheckpointImpl.REENTRANT`);
- a library's own switch when the project sets it (`library-modes`, versions.py): timm's
  `set_reentrant_ckpt` for its `checkpoint`/`checkpoint_seq` without `use_reentrant`, and the
  `use_reentrant` a project hands Hugging Face's enabling call, for the helper below;
- for Hugging Face's helper (`_gradient_checkpointing_func`, GradientCheckpointingLayer), the
  release range of the library the call belongs to (catalogue.py `versioned`): transformers
  4.x reentrant, 5.x non-reentrant, diffusers non-reentrant. Without a version that decides,
  the API's catalogue mode (reentrant: the conservative default), and the reason says so.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Protocol

from ckptlint.catalogue import (
    BUILTIN_APIS,
    DYNAMIC,
    FALSE,
    FROM_ARGUMENT,
    IMPL_ARGUMENT,
    LIBRARY_DEFAULT,
    MODEL,
    NON_REENTRANT,
    NONE,
    OMITTED,
    REENTRANT,
    TRUE,
    CheckpointAPI,
)
from ckptlint.versions import LibraryVersion, Versions


class CallArguments(Protocol):
    """What the mode reads of a call's arguments (calls.py's CallArguments), so modes.py need not import calls.py."""

    def get(self, position: int | None, keyword: str | None) -> ast.expr | None: ...

    def constant(self, position: int | None, keyword: str | None) -> ast.Constant | None: ...

    def may_carry(self, position: int | None, keyword: str) -> bool: ...


class ModedCall(Protocol):
    """What the mode reads of a checkpoint call (calls.py's CheckpointCall), so modes.py need not import calls.py."""

    @property
    def api(self) -> CheckpointAPI: ...

    @property
    def arguments(self) -> CallArguments: ...

    @property
    def wrapper_arguments(self) -> CallArguments | None: ...

    @property
    def owner(self) -> str | None: ...

    @property
    def versions(self) -> Versions: ...


@dataclass(frozen=True)
class CallMode:
    """A call's replay mode: `reentrant` (None: decided at run time), whether an omitted
    `use_reentrant` decided it (`by_default`), and the words for what decided it (`source`):
    `use_reentrant=False`, `transformers 4.57.0 from the environment`, ..."""

    reentrant: bool | None
    source: str
    by_default: bool = False
    version: LibraryVersion | None = None  # the library version that decided it, if one did

    @property
    def name(self) -> str:
        return {True: "reentrant", False: "non-reentrant", None: "unknown"}[self.reentrant]

    def describe(self) -> str:
        """`reentrant: transformers 4.57.0 from the environment`, for messages."""
        return f"{self.name}: {self.source}"


def call_mode(call: ModedCall) -> CallMode:
    """The mode of `call` with the versions it was found with (`call.versions`)."""
    return mode_of(call.api, call.arguments, call.wrapper_arguments, call.owner, call.versions)


def is_reentrant(call: ModedCall) -> bool | None:
    """Whether the call replays reentrantly; None when run-time values decide."""
    return call_mode(call).reentrant


def mode_of(
    api: CheckpointAPI,
    arguments: CallArguments,
    wrapper_arguments: CallArguments | None,
    owner: str | None,
    versions: Versions,
) -> CallMode:
    """The mode of a call of `api` with these arguments; `owner` is the library the call's
    helper belongs to when the API is shared (diffusers or transformers), None if unknown."""
    mode = api.mode
    if mode in (FROM_ARGUMENT, LIBRARY_DEFAULT):
        flag = use_reentrant_flag(api, arguments)
        if flag == TRUE:
            return CallMode(True, "use_reentrant=True")
        if flag == FALSE:
            return CallMode(False, "use_reentrant=False")
        if flag == DYNAMIC:
            return CallMode(None, "use_reentrant is decided at run time")
        if mode == FROM_ARGUMENT:
            given = "use_reentrant=None" if flag == NONE else "use_reentrant not passed"
            return CallMode(True, f"{given}: torch falls back to reentrant", by_default=True)
        switch = versions.switch(api.library)
        if switch is not None:  # timm's set_reentrant_ckpt / TIMM_REENTRANT_CKPT decides an omitted flag
            return CallMode(switch.reentrant, switch.describe())
        default = api.use_reentrant_default
        return CallMode(default, f"{api.library}'s default use_reentrant={default}")
    if mode == IMPL_ARGUMENT:
        return _impl_mode(api, arguments, wrapper_arguments)
    if mode in (REENTRANT, NON_REENTRANT):
        if api.versioned:
            return _versioned_mode(api, owner, versions)
        return CallMode(mode == REENTRANT, f"fixed by {api.library}")
    return CallMode(None, "mode not configured (checkpoint-functions)")


def use_reentrant_flag(api: CheckpointAPI, arguments: CallArguments) -> str:
    """How `use_reentrant` is given: omitted, none, true, false or dynamic."""
    position = api.use_reentrant_position
    if arguments.get(position, "use_reentrant") is None:
        return DYNAMIC if arguments.may_carry(position, "use_reentrant") else OMITTED
    value = arguments.constant(position, "use_reentrant")
    if value is not None:
        if value.value is None:
            return NONE
        if value.value is True:
            return TRUE
        if value.value is False:
            return FALSE
    return DYNAMIC


def _impl_mode(api: CheckpointAPI, arguments: CallArguments, wrapper_arguments: CallArguments | None) -> CallMode:
    """torch's checkpoint_wrapper: `checkpoint_impl=CheckpointImpl.X`, NO_REENTRANT by default."""
    given = wrapper_arguments if api.region_kind == MODEL else arguments
    if given is None:
        return CallMode(False, "checkpoint_impl not passed: CheckpointImpl.NO_REENTRANT")
    impl = given.get(1 if api.region_kind != MODEL else None, "checkpoint_impl")
    if impl is None:
        if given.may_carry(1, "checkpoint_impl"):
            return CallMode(None, "checkpoint_impl is decided at run time")
        return CallMode(False, "checkpoint_impl not passed: CheckpointImpl.NO_REENTRANT")
    text = ast.unparse(impl)
    if text.endswith("NO_REENTRANT"):
        return CallMode(False, f"checkpoint_impl={text}")
    if text.endswith("REENTRANT"):
        return CallMode(True, f"checkpoint_impl={text}")
    return CallMode(None, "checkpoint_impl is decided at run time")


def _versioned_mode(api: CheckpointAPI, owner: str | None, versions: Versions) -> CallMode:
    """The mode in the release range of the library the call belongs to. A library whose
    every range agrees decides without a version; otherwise an unknown version, or a pinned
    range that spans both modes, keeps the catalogue's mode and says so."""
    candidates = api.versioned_libraries
    library = owner if owner in candidates else None
    if library is None:  # not told by the code: the one candidate library the environment has, if only one
        present = [name for name in candidates if versions.get(name) is not None]
        library = present[0] if len(present) == 1 else api.library
    switch = versions.switch(library)
    if switch is not None:  # what the project passes the library's enabling call beats the release's default
        return CallMode(switch.reentrant, switch.describe(), version=versions.get(library))
    ranges = [r for r in api.versioned if r.library == library]
    fallback = api.mode == REENTRANT
    modes = {r.mode for r in ranges}
    version = versions.get(library)
    if version is not None:
        for entry in ranges:
            since, until = entry.bounds()
            if version.within(since, until):
                return CallMode(entry.mode == REENTRANT, version.describe(), version=version)
        if len(modes) == 1:
            return CallMode(next(iter(modes)) == REENTRANT, f"{version.describe()}, as in every release", version=version)
        return CallMode(fallback, f"{version.describe()}, which spans releases of either mode, so {_switch(api, library)}", version=version)
    if len(modes) == 1:
        return CallMode(next(iter(modes)) == REENTRANT, f"the {library} helper, the same in every release (version unknown)")
    return CallMode(fallback, f"{library} version unknown, so {_switch(api, library)}")


def _switch(api: CheckpointAPI, library: str) -> str:
    """`its default before 5.0`: the conservative assumption, named by the release that changed it."""
    for entry in api.versioned:
        if entry.library == library and entry.since is not None:
            return f"its default before {entry.since}"
    return "the conservative default"


def _name(reentrant: bool) -> str:
    return "reentrant" if reentrant else "non-reentrant"


def hugging_face_enabling_default(versions: Versions) -> CallMode:
    """The mode `gradient_checkpointing_enable()` chooses when not told (no
    `gradient_checkpointing_kwargs` with `use_reentrant`): the transformers helper's, by version."""
    helper = next(api for api in BUILTIN_APIS if api.name == "._gradient_checkpointing_func")
    return _versioned_mode(helper, "transformers", versions)
