"""What ckptlint knows about torch, NumPy and the standard library, as data.

Region analysis asks these questions of qualified names and method names: does this
draw from an RNG that checkpoint does not save, is it a stochastic torch op, does
this module update running statistics, does this method mutate its receiver.
"""

from __future__ import annotations

# Python's `random` module: module-level draws use the global generator.
PYTHON_RANDOM_DRAWS = frozenset(
    {
        "random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample",
        "gauss", "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate",
        "gammavariate", "betavariate", "paretovariate", "weibullvariate", "triangular",
        "getrandbits", "randbytes", "binomialvariate",
    }
)  # fmt: skip
PYTHON_RNG_CLASSES = frozenset({"random.Random", "random.SystemRandom"})

# numpy.random: everything that is not a constructor or state management draws.
NUMPY_RANDOM_NOT_DRAWS = frozenset(
    {"default_rng", "RandomState", "Generator", "SeedSequence", "BitGenerator", "PCG64", "PCG64DXSM",
     "MT19937", "Philox", "SFC64", "seed", "get_state", "set_state", "get_bit_generator",
     "set_bit_generator"}
)  # fmt: skip
NUMPY_RNG_CONSTRUCTORS = frozenset({"default_rng", "RandomState", "Generator"})
RNG_METHODS_NOT_DRAWS = frozenset(
    {"seed", "getstate", "setstate", "get_state", "set_state", "bit_generator", "spawn", "jumped"}
)

# torch ops that draw from torch's generators (restored on replay when RNG is preserved).
TORCH_RANDOM_FUNCTIONS = frozenset(
    {
        "torch.rand", "torch.rand_like", "torch.randn", "torch.randn_like", "torch.randint",
        "torch.randint_like", "torch.randperm", "torch.bernoulli", "torch.multinomial",
        "torch.normal", "torch.poisson", "torch.dropout", "torch.alpha_dropout",
        "torch.feature_dropout", "torch.feature_alpha_dropout", "torch.rrelu",
        "torch.nn.functional.dropout", "torch.nn.functional.dropout1d",
        "torch.nn.functional.dropout2d", "torch.nn.functional.dropout3d",
        "torch.nn.functional.alpha_dropout", "torch.nn.functional.feature_alpha_dropout",
        "torch.nn.functional.gumbel_softmax", "torch.nn.functional.rrelu",
    }
)  # fmt: skip
TORCH_RANDOM_INPLACE_METHODS = frozenset(
    {"bernoulli_", "uniform_", "normal_", "random_", "exponential_", "geometric_", "cauchy_", "log_normal_"}
)
TORCH_DROPOUT_MODULES = frozenset(
    {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "RReLU"}
)
TORCH_BATCH_NORM_MODULES = frozenset(
    {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d", "LazyBatchNorm2d",
     "LazyBatchNorm3d"}
)  # fmt: skip
# the buffers a norm module with running statistics updates in training
RUNNING_STAT_BUFFERS = frozenset({"running_mean", "running_var", "num_batches_tracked"})
TORCH_INSTANCE_NORM_MODULES = frozenset(
    {"InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
     "LazyInstanceNorm3d"}
)  # fmt: skip
TORCH_MODULE_PREFIXES = ("torch.nn.", "torch.nn.modules.")

# Module containers: what calling or indexing them does.
SEQUENTIAL = "sequential"  # calling runs every element
SEQUENCE = "sequence"  # indexing or iterating gives elements
MAPPING = "mapping"
TORCH_CONTAINERS = {
    "Sequential": SEQUENTIAL,
    "ModuleList": SEQUENCE,
    "ParameterList": SEQUENCE,
    "ModuleDict": MAPPING,
    "ParameterDict": MAPPING,
}
# Project classes deriving from a torch container behave as one (calling a Sequential subclass
# without its own forward runs every registered module).
TORCH_CONTAINER_BASES = {f"torch.nn.{name}": kind for name, kind in TORCH_CONTAINERS.items() if name.startswith("Module") or name == "Sequential"}
TORCH_CONTAINER_BASES.update({f"torch.nn.modules.container.{name[len('torch.nn.'):]}": kind for name, kind in list(TORCH_CONTAINER_BASES.items())})
BARE_MODULE = "torch.nn.Module"  # `nn.Module()` used as a namespace: its ClassType keeps the attributes set on it
# nn.Module methods that return the module itself (`Block().to(device)`, `make_stage().train()`).
MODULE_RETURNING_METHODS = frozenset(
    {"to", "cuda", "cpu", "xpu", "ipu", "mtia", "float", "half", "bfloat16", "double", "type", "train", "eval",
     "requires_grad_", "apply", "share_memory", "to_empty"}
)  # fmt: skip
# nn.Module methods iterating its registered submodules: direct ones, or recursively; `named_*` yield (name, module).
CHILDREN_METHODS = frozenset({"children", "named_children"})
DESCENDANT_METHODS = frozenset({"modules", "named_modules"})
# External bases that say nothing about being an nn.Module (a class with only these is a plain object).
NON_MODULE_BASE_PREFIXES = ("builtins.", "typing.", "typing_extensions.", "abc.", "enum.", "collections.", "dataclasses.")

PYTHON_CONTAINER_CALLS = {
    "builtins.list": SEQUENCE,
    "builtins.tuple": SEQUENCE,
    "builtins.dict": MAPPING,
    "builtins.set": SEQUENCE,
    "collections.OrderedDict": MAPPING,
    "collections.defaultdict": MAPPING,
    "collections.deque": SEQUENCE,
}

# Methods that mutate a Python container (or a module's structure).
CONTAINER_MUTATORS = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem",
     "appendleft", "extendleft", "popleft", "discard", "add_module", "register_module"}
)  # fmt: skip
# Mutate only when the receiver is known to be a container: tensors have out-of-place versions.
CONTAINER_ONLY_MUTATORS = frozenset({"add", "sort", "reverse"})
# In-place methods that replace what they write whatever was there: repeated with the same
# value they leave the same contents (replay_writes.overwrite).
OVERWRITE_METHODS = frozenset({"copy_", "fill_", "zero_"})
# In-place-looking names that do not change a tensor's values.
NOT_INPLACE = frozenset({"requires_grad_", "share_memory_", "retain_grad", "register_hook", "pin_memory"})
# Tensor methods whose result shares storage with the receiver.
VIEW_METHODS = frozenset(
    {"view", "view_as", "reshape", "reshape_as", "transpose", "permute", "expand", "expand_as", "squeeze",
     "unsqueeze", "flatten", "unflatten", "narrow", "select", "detach", "t", "as_strided", "chunk", "split",
     "unbind", "contiguous", "movedim", "swapaxes", "swapdims", "diagonal", "real", "imag", "data"}
)  # fmt: skip
# Methods whose result is (part of) the receiver: views, and elements of containers.
ALIASING_METHODS = VIEW_METHODS | frozenset({"get", "setdefault", "values", "items", "keys", "__getitem__"})
DEVICE_MOVE_METHODS = frozenset({"cuda", "cpu", "xpu", "mps", "npu"})

CLOCK_FUNCTIONS = frozenset(
    {"time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
     "time.monotonic_ns", "time.process_time", "datetime.datetime.now", "datetime.datetime.utcnow",
     "datetime.datetime.today", "datetime.date.today"}
)  # fmt: skip
GRAD_MODE_FUNCTIONS = frozenset({"torch.is_grad_enabled", "torch.autograd.grad_mode.is_grad_enabled"})
PHASE_PREDICATES = frozenset({"is_checkpointing", "is_recomputing"})


def is_phase_predicate(name: str) -> bool:
    """`fairscale.nn.checkpoint.is_recomputing` and its vendored copies (torchgpipe, PiPPy):
    a function of a checkpoint module that says which pass is running."""
    module, _, short = name.rpartition(".")
    return short in PHASE_PREDICATES and "checkpoint" in module

# Builtins whose result carries the volatility of their arguments (`len(self.cache)`).
VOLATILITY_PRESERVING_BUILTINS = frozenset(
    {"len", "int", "float", "bool", "abs", "min", "max", "sum", "any", "all", "round", "str", "tuple", "list", "sorted"}
)
INIT_LIKE_METHODS = frozenset({"__init__", "__post_init__", "__new__", "__setstate__", "__init_subclass__"})


def short_name(qualified_name: str) -> str:
    return qualified_name.rpartition(".")[2]


def is_torch_module_class(qualified_name: str) -> bool:
    return qualified_name.startswith(TORCH_MODULE_PREFIXES) or qualified_name.startswith("torch.nn.")


def torch_class(qualified_name: str) -> str | None:
    """`BatchNorm2d` for any spelling of torch.nn's BatchNorm2d, else None."""
    if qualified_name.startswith("torch.nn."):
        return short_name(qualified_name)
    return None


def is_numpy_draw(qualified_name: str) -> bool:
    if not qualified_name.startswith("numpy.random."):
        return False
    rest = qualified_name[len("numpy.random.") :]
    return "." not in rest and rest not in NUMPY_RANDOM_NOT_DRAWS


def is_python_draw(qualified_name: str) -> bool:
    module, _, name = qualified_name.rpartition(".")
    return module == "random" and name in PYTHON_RANDOM_DRAWS

# Tensor factories: `device=` on these creates a tensor on that device.
TORCH_FACTORIES = frozenset(
    {"zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye", "tensor", "as_tensor",
     "asarray", "rand", "randn", "randint", "randperm", "normal", "zeros_like", "ones_like", "empty_like",
     "full_like", "rand_like", "randn_like", "randint_like", "empty_strided", "scalar_tensor", "tril_indices",
     "triu_indices", "sparse_coo_tensor", "bernoulli", "polar", "complex"}
)  # fmt: skip
