"""Every checkpointing API ckptlint recognises, as data.

A call is a checkpoint call when its callee's *qualified name* (after resolving
imports and aliases) is one of these, never because it reads "checkpoint".
Configured in-house wrappers (`checkpoint-functions`) become entries of the same type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ckptlint.versions import Release, release

# How the region is given to the API.
CALLABLE = "callable"  # a function, lambda, partial or bound method, run now
MODULE = "module"  # an nn.Module whose forward is replayed
MODULES = "modules"  # a sequence of modules (checkpoint_sequential, checkpoint_seq)
MODEL = "model"  # a model whose submodules are selected by check_fn
LAYER_CLASS = "layer-class"  # subclasses are checkpointed at each call of an instance

# How the API decides between reentrant and non-reentrant replay.
FROM_ARGUMENT = "argument"  # takes use_reentrant; omitted means reentrant, with a warning (CKP101)
REENTRANT = "reentrant"  # fixed by the library
NON_REENTRANT = "non-reentrant"  # fixed by the library
LIBRARY_DEFAULT = "library-default"  # takes use_reentrant, with a library default (no CKP101)
IMPL_ARGUMENT = "impl-argument"  # torch's checkpoint_wrapper: `checkpoint_impl=CheckpointImpl.X`
UNKNOWN = "unknown"  # in-house wrappers declared without a mode

# how a call gives `use_reentrant` (CheckpointCall.use_reentrant)
OMITTED = "omitted"
NONE = "none"  # use_reentrant=None: torch treats it as not passed
TRUE = "true"
FALSE = "false"
DYNAMIC = "dynamic"  # a variable, or **kwargs that may carry it: counts as given

# Hazards an API undoes on replay.
RUNNING_STATS = "running-stats"  # BatchNorm running statistics are not updated twice


@dataclass(frozen=True)
class VersionRange:
    """An API's mode in a range of one library's releases, `since` inclusive, `until`
    exclusive (None: unbounded), with where that was read (`evidence`)."""

    library: str  # the distribution whose version decides (versions.py TRACKED)
    since: str | None
    until: str | None
    mode: str  # REENTRANT or NON_REENTRANT
    evidence: str = ""

    def bounds(self) -> tuple[Release | None, Release | None]:
        return (None if self.since is None else release(self.since)), (None if self.until is None else release(self.until))


@dataclass(frozen=True)
class CheckpointAPI:
    name: str  # canonical qualified name (for attribute APIs: ".attr")
    library: str
    region_kind: str
    mode: str
    region_argument: int | None = 0
    region_keyword: str | None = None
    # where the region's own positional arguments start in the call (None: not in this call)
    arguments_from: int | None = 1
    # for a sequence of modules: (position, keyword) of the first segment's input
    sequence_input: tuple[int, str] | None = None
    use_reentrant_position: int | None = None  # positional index of use_reentrant, if any
    use_reentrant_default: bool | None = None  # for LIBRARY_DEFAULT
    takes_preserve_rng_state: bool = False
    preserve_rng_state_position: int | None = None  # positional index of preserve_rng_state, if any
    preserves_rng: bool = True
    neutralises: frozenset[str] = frozenset()
    # keyword arguments the library sets to None (or False) before checkpointing a call
    cleared_arguments: tuple[str, ...] = ()
    cleared_unless: str | None = None  # a class attribute that, when True, keeps them
    aliases: tuple[str, ...] = ()
    summary: str = ""
    # the mode per release range of the library that decides it (modes.py); `mode` is what a call
    # gets when no known version decides (the conservative default)
    versioned: tuple[VersionRange, ...] = ()

    @property
    def versioned_libraries(self) -> tuple[str, ...]:
        """The libraries whose version can decide this API's mode, in catalogue order."""
        return tuple(dict.fromkeys(r.library for r in self.versioned))

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def checks_use_reentrant(self) -> bool:
        """CKP101 applies: the mode depends on an omitted `use_reentrant`."""
        return self.mode == FROM_ARGUMENT

    @property
    def is_attribute(self) -> bool:
        return self.name.startswith(".")


_TORCH_CHECKPOINT = "torch.utils.checkpoint.checkpoint"

# Hugging Face's gradient checkpointing helper, `self._gradient_checkpointing_func` (also what
# GradientCheckpointingLayer calls), per release. Read in the released wheels:
# - transformers 4.35.0 modeling_utils.py `gradient_checkpointing_enable`: kwargs default `{}`,
#   i.e. torch's omitted use_reentrant (reentrant); the helper first appears in 4.35.0 (4.34.1 has none);
# - transformers 4.57.6 modeling_utils.py:3692: `gradient_checkpointing_kwargs = {"use_reentrant": True}`;
# - transformers 5.0.0 modeling_utils.py:3099: `{"use_reentrant": False}`; 5.24.0 modeling_utils.py:3158
#   (`_activation_checkpointing_enable`) the same;
# - diffusers 0.33.0 models/modeling_utils.py:318-319 and 0.42.1 :315-316: `enable_gradient_checkpointing`
#   binds `{"use_reentrant": False}` (torch >= 1.11); 0.32.2 has no such helper.
# A call passing `gradient_checkpointing_kwargs={"use_reentrant": ...}` to the enabling call is not
# followed here: the version's default is what the call gets.
HF_HELPER_VERSIONS: tuple[VersionRange, ...] = (
    VersionRange("transformers", None, "5.0", REENTRANT, "transformers 4.35.0-4.57.6 modeling_utils.py gradient_checkpointing_enable"),
    VersionRange("transformers", "5.0", None, NON_REENTRANT, "transformers 5.0.0 modeling_utils.py:3099"),
    VersionRange("diffusers", None, None, NON_REENTRANT, "diffusers 0.33.0-0.42.1 models/modeling_utils.py enable_gradient_checkpointing"),
)
_TORCH_WRAPPER = "torch.distributed.algorithms._checkpoint.checkpoint_wrapper"

BUILTIN_APIS: tuple[CheckpointAPI, ...] = (
    CheckpointAPI(
        _TORCH_CHECKPOINT,
        "torch",
        CALLABLE,
        FROM_ARGUMENT,
        region_keyword="function",
        takes_preserve_rng_state=True,
        summary="torch.utils.checkpoint.checkpoint(fn, *args): replays fn in backward",
    ),
    CheckpointAPI(
        "torch.utils.checkpoint.CheckpointFunction.apply",
        "torch",
        CALLABLE,
        REENTRANT,
        arguments_from=2,
        takes_preserve_rng_state=True,
        preserve_rng_state_position=1,
        summary="CheckpointFunction.apply(fn, preserve_rng_state, *args): torch's reentrant checkpoint, applied directly",
    ),
    CheckpointAPI(
        "torch.utils.checkpoint.checkpoint_sequential",
        "torch",
        MODULES,
        FROM_ARGUMENT,
        region_keyword="functions",
        sequence_input=(2, "input"),
        use_reentrant_position=3,
        takes_preserve_rng_state=True,
        summary="checkpoint_sequential(functions, segments, input): replays all but the last segment",
    ),
    CheckpointAPI(
        f"{_TORCH_WRAPPER}.checkpoint_wrapper",
        "torch",
        MODULE,
        IMPL_ARGUMENT,
        region_keyword="module",
        takes_preserve_rng_state=True,
        aliases=("torch.distributed.fsdp.wrap.checkpoint_wrapper",),
        summary="checkpoint_wrapper(module): replays module.forward (non-reentrant unless CheckpointImpl.REENTRANT)",
    ),
    CheckpointAPI(
        f"{_TORCH_WRAPPER}.CheckpointWrapper",
        "torch",
        MODULE,
        IMPL_ARGUMENT,
        region_keyword="mod",
        takes_preserve_rng_state=True,
        summary="CheckpointWrapper(mod): the class checkpoint_wrapper() returns, constructed directly; replays mod.forward",
    ),
    CheckpointAPI(
        f"{_TORCH_WRAPPER}.apply_activation_checkpointing",
        "torch",
        MODEL,
        IMPL_ARGUMENT,
        region_keyword="model",
        summary="apply_activation_checkpointing(model, check_fn=...): wraps the submodules check_fn selects",
    ),
    CheckpointAPI(
        "torch.distributed._composable.checkpoint_activation.checkpoint",
        "torch",
        MODULE,
        NON_REENTRANT,
        region_keyword="module",
        aliases=("torch.distributed._composable.checkpoint",),
        summary="composable checkpoint(module): replays module.forward, non-reentrant",
    ),
    CheckpointAPI(
        "deepspeed.checkpointing.checkpoint",
        "deepspeed",
        CALLABLE,
        REENTRANT,
        aliases=("deepspeed.runtime.activation_checkpointing.checkpointing.checkpoint",),
        summary="DeepSpeed checkpoint(fn, *args): reentrant, restores torch and CUDA tracker RNG",
    ),
    CheckpointAPI(
        "deepspeed.checkpointing.non_reentrant_checkpoint",
        "deepspeed",
        CALLABLE,
        NON_REENTRANT,
        aliases=("deepspeed.runtime.activation_checkpointing.checkpointing.non_reentrant_checkpoint",),
        summary="DeepSpeed non_reentrant_checkpoint(fn, *args)",
    ),
    CheckpointAPI(
        "megatron.core.tensor_parallel.random.checkpoint",
        "megatron",
        CALLABLE,
        REENTRANT,
        arguments_from=2,
        aliases=("megatron.core.tensor_parallel.checkpoint", "megatron.mpu.checkpoint", "megatron.mpu.random.checkpoint"),
        summary="Megatron tensor_parallel.checkpoint(fn, distribute_saved_activations, *args): reentrant",
    ),
    CheckpointAPI(
        "megatron.core.tensor_parallel.random.CheckpointWithoutOutput.checkpoint",
        "megatron",
        CALLABLE,
        REENTRANT,
        aliases=("megatron.core.tensor_parallel.CheckpointWithoutOutput.checkpoint",),
        summary="Megatron CheckpointWithoutOutput().checkpoint(fn, *args)",
    ),
    CheckpointAPI(
        "megatron.core.extensions.transformer_engine.te_checkpoint",
        "megatron",
        CALLABLE,
        REENTRANT,
        arguments_from=4,
        aliases=("megatron.core.transformer.custom_layers.transformer_engine.te_checkpoint",),
        summary="Megatron te_checkpoint(fn, distribute_saved_activations, get_rng_state_tracker, tp_group, *args)",
    ),
    CheckpointAPI(
        "transformer_engine.pytorch.distributed.checkpoint",
        "transformer_engine",
        CALLABLE,
        LIBRARY_DEFAULT,
        use_reentrant_default=True,
        aliases=("transformer_engine.pytorch.checkpoint",),
        summary="Transformer Engine checkpoint(fn, *args, use_reentrant=True by default)",
    ),
    CheckpointAPI(
        "fairscale.nn.checkpoint.checkpoint_activations.checkpoint_wrapper",
        "fairscale",
        MODULE,
        REENTRANT,
        neutralises=frozenset({RUNNING_STATS}),
        aliases=(
            "fairscale.nn.checkpoint.checkpoint_wrapper",
            "fairscale.nn.checkpoint_wrapper",
            "fairscale.nn.misc.checkpoint_activations.checkpoint_wrapper",
        ),
        summary="fairscale checkpoint_wrapper(module): reentrant; skips BatchNorm stat updates on recompute",
    ),
    CheckpointAPI(
        "fairseq.modules.checkpoint_activations.checkpoint_wrapper",
        "fairseq",
        MODULE,
        REENTRANT,
        summary="fairseq checkpoint_wrapper(module): reentrant",
    ),
    CheckpointAPI(
        "xformers.checkpoint.checkpoint",
        "xformers",
        CALLABLE,
        NON_REENTRANT,
        takes_preserve_rng_state=True,
        summary="xformers checkpoint(fn, *args, policy_fn=...): selective, non-reentrant",
    ),
    CheckpointAPI(
        "timm.models._manipulate.checkpoint_seq",
        "timm",
        MODULES,
        LIBRARY_DEFAULT,
        region_keyword="functions",
        sequence_input=(1, "x"),
        use_reentrant_position=6,
        use_reentrant_default=False,
        takes_preserve_rng_state=True,
        aliases=("timm.models.checkpoint_seq", "timm.models.helpers.checkpoint_seq", "timm.models._helpers.checkpoint_seq"),
        summary="timm checkpoint_seq(functions, x, every=1): non-reentrant in current timm",
    ),
    CheckpointAPI(
        "timm.models._manipulate.checkpoint",
        "timm",
        CALLABLE,
        LIBRARY_DEFAULT,
        use_reentrant_default=False,
        aliases=("timm.models.checkpoint",),
        summary="timm checkpoint(fn, *args): torch checkpoint with use_reentrant=False by default",
    ),
    CheckpointAPI(
        "transformers.modeling_layers.GradientCheckpointingLayer",
        "transformers",
        LAYER_CLASS,
        REENTRANT,
        region_argument=None,
        # transformers sets use_cache=False and drops the KV cache when it checkpoints a layer
        # (`cache`/`layer_past` in 5.x, `past_key_value(s)` before), unless the layer only reads it
        cleared_arguments=("use_cache", "cache", "layer_past", "past_key_value", "past_key_values"),
        cleared_unless="_can_checkpoint_with_cache",
        aliases=("transformers.GradientCheckpointingLayer",),
        summary="subclasses of GradientCheckpointingLayer: forward replayed when gradient checkpointing is on",
        versioned=tuple(r for r in HF_HELPER_VERSIONS if r.library == "transformers"),
    ),
    CheckpointAPI(
        "._gradient_checkpointing_func",
        "transformers",
        CALLABLE,
        REENTRANT,
        summary="Hugging Face self._gradient_checkpointing_func(fn, *args): reentrant in transformers 4.x, "
        "non-reentrant in transformers 5.x and diffusers",
        versioned=HF_HELPER_VERSIONS,
    ),
)


@dataclass(frozen=True)
class Catalogue:
    """Lookup of recognised APIs by qualified name or attribute name."""

    apis: tuple[CheckpointAPI, ...]
    _by_name: dict[str, CheckpointAPI] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, CheckpointAPI] = {}
        for api in self.apis:
            for name in api.names:
                by_name[name] = api
        object.__setattr__(self, "_by_name", by_name)

    def by_qualified_name(self, qualified_name: str | None) -> CheckpointAPI | None:
        if not qualified_name:
            return None
        api = self._by_name.get(qualified_name)
        return None if api is None or api.is_attribute else api

    def by_attribute(self, attribute: str) -> CheckpointAPI | None:
        return self._by_name.get("." + attribute)

    def layer_classes(self) -> frozenset[str]:
        return frozenset(name for api in self.apis if api.region_kind == LAYER_CLASS for name in api.names)

    def extended(self, apis: Iterable[CheckpointAPI]) -> Catalogue:
        return Catalogue(self.apis + tuple(apis))


DEFAULT_CATALOGUE = Catalogue(BUILTIN_APIS)

# Words that make a file worth analysing without a checkpoint call in it: the code around a
# checkpointed model (CKP303-CKP305, CKP404, CKP405) — its DDP wrapper, `torch.autograd.grad` and
# `torch.func` transforms, Hugging Face's enabling calls, FSDP's sharding and checkpointing — often lives in a training script
# that never names checkpointing. (`x.backward(inputs=...)` and `torch.func.grad` spelled
# through `func` are found only in files analysed anyway: `backward` and `func` are too common.)
COMPOSITION_WORDS = frozenset(
    {
        "DistributedDataParallel",
        "autograd",
        "functorch",
        "jacrev",
        "jacfwd",
        "vjp",
        "jvp",
        "hessian",
        "grad_and_value",
        "gradient_checkpointing_enable",
        "gradient_checkpointing",
        "fully_shard",  # CKP405: a model that checkpoints reentrantly, sharded in a script that never names checkpointing
        "activation_checkpointing",  # CKP404: accelerate's FSDP plugin and transformers' fsdp_config
        "activation_checkpointing_policy",  # CKP403: Lightning's FSDPStrategy
    }
)
