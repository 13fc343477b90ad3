"""What ckptlint knows about communication between ranks, as data (CKP401, CKP402).

A call communicates when its callee's qualified name (imports, aliases and re-exports
resolved) is an entry here: torch.distributed's collectives and point-to-point ops, the
functional collectives, `torch.distributed.nn.functional`, DeepSpeed's `deepspeed.comm`,
and Megatron's tensor-parallel mappings whose *forward* communicates (`copy_to_...` and
`scatter_to_...` only split or copy in forward and are not here). DTensor's `.redistribute()`
and `.full_tensor()` are methods on a tensor value, so they are known by method name.

Each entry says what kind of exchange it is, where its split sizes are passed (an all-to-all
whose split sizes the region computes is a hang risk, CKP402) and which `_c10d_functional`
ops it emits: a selective-checkpoint policy that saves all of them keeps it from replaying.
"""

from __future__ import annotations

from dataclasses import dataclass

COLLECTIVE = "collective"  # every rank of the group takes part: CKP401
POINT_TO_POINT = "point-to-point"  # a send or receive between two ranks: CKP402


@dataclass(frozen=True)
class CommunicationOp:
    family: str  # what the message calls it: "all-reduce", "all-to-all", "receive"
    kind: str = COLLECTIVE
    split_positions: tuple[int, ...] = ()  # where the split sizes go, positionally ...
    split_keywords: tuple[str, ...] = ()  # ... and by keyword
    saved_as: frozenset[str] = frozenset()  # `_c10d_functional` ops it emits (all must be saved)

    @property
    def has_split_sizes(self) -> bool:
        return bool(self.split_positions or self.split_keywords)


def _op(family: str, kind: str = COLLECTIVE, splits: tuple[tuple[int, ...], tuple[str, ...]] = ((), ()), saved: str = "") -> CommunicationOp:
    return CommunicationOp(family, kind, splits[0], splits[1], frozenset(f"_c10d_functional.{op}" for op in saved.split()))


def _table(prefixes: tuple[str, ...], ops: dict[str, CommunicationOp]) -> dict[str, CommunicationOp]:
    return {f"{prefix}.{name}": op for prefix in prefixes for name, op in ops.items()}


_C10D_SPLITS = ((2, 3), ("output_split_sizes", "input_split_sizes"))  # all_to_all_single(output, input, out_splits, in_splits)
_ALL_REDUCE, _ALL_GATHER, _REDUCE_SCATTER, _ALL_TO_ALL = "all-reduce", "all-gather", "reduce-scatter", "all-to-all"

# torch.distributed (c10d): blocking or async collectives and point-to-point ops. DeepSpeed's
# `deepspeed.comm` mirrors these names and argument positions.
_C10D: dict[str, CommunicationOp] = {
    "all_reduce": _op(_ALL_REDUCE),
    "all_reduce_coalesced": _op(_ALL_REDUCE),
    "all_gather": _op(_ALL_GATHER),
    "all_gather_into_tensor": _op(_ALL_GATHER),
    "all_gather_coalesced": _op(_ALL_GATHER),
    "all_gather_object": _op(_ALL_GATHER),
    "_all_gather_base": _op(_ALL_GATHER),
    "reduce_scatter": _op(_REDUCE_SCATTER),
    "reduce_scatter_tensor": _op(_REDUCE_SCATTER),
    "_reduce_scatter_base": _op(_REDUCE_SCATTER),
    "all_to_all": _op(_ALL_TO_ALL),
    "all_to_all_single": _op(_ALL_TO_ALL, splits=_C10D_SPLITS),
    "broadcast": _op("broadcast"),
    "broadcast_object_list": _op("broadcast"),
    "reduce": _op("reduce"),
    "gather": _op("gather"),
    "gather_object": _op("gather"),
    "scatter": _op("scatter"),
    "scatter_object_list": _op("scatter"),
    "barrier": _op("barrier"),
    "monitored_barrier": _op("barrier"),
    "send": _op("send", POINT_TO_POINT),
    "recv": _op("receive", POINT_TO_POINT),
    "isend": _op("send", POINT_TO_POINT),
    "irecv": _op("receive", POINT_TO_POINT),
    "batch_isend_irecv": _op("batched send/receive", POINT_TO_POINT),
    "send_object_list": _op("send", POINT_TO_POINT),
    "recv_object_list": _op("receive", POINT_TO_POINT),
}
_DEEPSPEED: dict[str, CommunicationOp] = {
    **{name: op for name, op in _C10D.items() if not name.startswith("_") and "object" not in name},
    "all_gather_object": _op(_ALL_GATHER),
    "broadcast_object_list": _op("broadcast"),
    "allgather_fn": _op(_ALL_GATHER),
    "reduce_scatter_fn": _op(_REDUCE_SCATTER),
    "inference_all_reduce": _op(_ALL_REDUCE),
}

# torch.distributed._functional_collectives: traceable collectives, each emitting one
# `_c10d_functional` op that a selective-checkpoint policy can save (`all_to_all_single(self,
# output_split_sizes, input_split_sizes, group)`).
_FUNCOL_SPLITS = ((1, 2), ("output_split_sizes", "input_split_sizes"))
_FUNCTIONAL: dict[str, CommunicationOp] = {
    "all_reduce": _op(_ALL_REDUCE, saved="all_reduce"),
    "all_reduce_coalesced": _op(_ALL_REDUCE, saved="all_reduce_coalesced"),
    "all_gather_tensor": _op(_ALL_GATHER, saved="all_gather_into_tensor"),
    "all_gather_tensor_autograd": _op(_ALL_GATHER, saved="all_gather_into_tensor"),
    "all_gather_single": _op(_ALL_GATHER, saved="all_gather_into_tensor"),
    "all_gather_into_tensor_coalesced": _op(_ALL_GATHER, saved="all_gather_into_tensor_coalesced"),
    "reduce_scatter_tensor": _op(_REDUCE_SCATTER, saved="reduce_scatter_tensor"),
    "reduce_scatter_tensor_autograd": _op(_REDUCE_SCATTER, saved="reduce_scatter_tensor"),
    "reduce_scatter_single": _op(_REDUCE_SCATTER, saved="reduce_scatter_tensor"),
    "reduce_scatter_tensor_coalesced": _op(_REDUCE_SCATTER, saved="reduce_scatter_tensor_coalesced"),
    "all_to_all_single": _op(_ALL_TO_ALL, splits=_FUNCOL_SPLITS, saved="all_to_all_single"),
    "all_to_all_single_autograd": _op(_ALL_TO_ALL, splits=_FUNCOL_SPLITS, saved="all_to_all_single"),
    "permute_tensor": _op(_ALL_TO_ALL, saved="all_to_all_single"),
    "broadcast": _op("broadcast", saved="broadcast"),
}

# torch.distributed.nn.functional: autograd-aware c10d collectives (re-exported by torch.distributed.nn).
_AUTOGRAD_C10D = {name: _C10D[name] for name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter")}

# Megatron's tensor-parallel mappings whose forward communicates. `all_to_all(group, input_,
# output_split_sizes_, input_split_sizes)`; the sp2hp/hp2sp forms split evenly.
_MEGATRON: dict[str, CommunicationOp] = {
    "reduce_from_tensor_model_parallel_region": _op(_ALL_REDUCE),
    "gather_from_tensor_model_parallel_region": _op(_ALL_GATHER),
    "gather_from_sequence_parallel_region": _op(_ALL_GATHER),
    "gather_from_sequence_parallel_region_to_moe": _op(_ALL_GATHER),
    "all_gather_last_dim_from_tensor_parallel_region": _op(_ALL_GATHER),
    "reduce_scatter_to_sequence_parallel_region": _op(_REDUCE_SCATTER),
    "reduce_scatter_to_sequence_parallel_region_from_moe": _op(_REDUCE_SCATTER),
    "reduce_scatter_last_dim_to_tensor_parallel_region": _op(_REDUCE_SCATTER),
    "all_to_all": _op(_ALL_TO_ALL, splits=((2, 3), ("output_split_sizes_", "input_split_sizes"))),
    "all_to_all_sp2hp": _op(_ALL_TO_ALL),
    "all_to_all_hp2sp": _op(_ALL_TO_ALL),
}

FUNCTIONS: dict[str, CommunicationOp] = {
    **_table(("torch.distributed", "torch.distributed.distributed_c10d"), _C10D),
    **_table(("torch.distributed._functional_collectives",), _FUNCTIONAL),
    **_table(("torch.distributed.nn", "torch.distributed.nn.functional"), _AUTOGRAD_C10D),
    **_table(("deepspeed.comm", "deepspeed.comm.comm"), _DEEPSPEED),
    **_table(("megatron.core.tensor_parallel", "megatron.core.tensor_parallel.mappings"), _MEGATRON),
}
"""Communicating functions by qualified name."""

FRAMEWORK_PREFIXES = ("megatron.",)  # wrappers whose message says their forward communicates

# DTensor methods: `full_tensor()` all-gathers; `redistribute()` may all-gather, reduce-scatter,
# all-reduce or all-to-all, so a policy must save all four for it not to replay.
TENSOR_METHODS: dict[str, CommunicationOp] = {
    "full_tensor": _op(_ALL_GATHER, saved="all_gather_into_tensor"),
    "redistribute": _op("redistribution", saved="all_gather_into_tensor reduce_scatter_tensor all_reduce all_to_all_single"),
}

SAVABLE_NAMESPACES = ("_c10d_functional",)  # op namespaces a policy entry can name here
