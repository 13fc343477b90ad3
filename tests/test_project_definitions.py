"""A function the project defines is analysed whatever its name matches in the catalogue (a vendored
copy of Megatron's mappings: the collective is reported inside its own `_reduce`, once), and a name a
module re-exports from `from torch.distributed import *` is torch's (its redefined names are the
module's own). Each project is a fresh folder, linted by the real command line."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli

MAPPINGS = '''\
import torch
import torch.distributed as dist


def get_tensor_model_parallel_world_size():
    return dist.get_world_size()


def _reduce(input_):
    if get_tensor_model_parallel_world_size() == 1:
        return input_
    dist.all_reduce(input_.contiguous())
    return input_


class _ReduceFromModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_):
        return _reduce(input_)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


def reduce_from_tensor_model_parallel_region(input_):
    return _ReduceFromModelParallelRegion.apply(input_)
'''

# a single-device stand-in with the catalogue entry's name: it communicates nothing
IDENTITY_MAPPINGS = '''\
def reduce_from_tensor_model_parallel_region(input_):
    return input_
'''

ROW_PARALLEL = '''\
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from megatron.core.tensor_parallel import reduce_from_tensor_model_parallel_region


class RowParallel(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, dim))

    def forward(self, x):
        return reduce_from_tensor_model_parallel_region(x @ self.weight)


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.row = RowParallel(dim)

    def forward(self, x):
        return checkpoint(self.row, x, use_reentrant=False)
'''

STAR_COMM = '''\
from torch.distributed import *  # noqa: F401,F403
import torch.distributed as _dist


def all_gather(tensors, tensor, group=None):
    return _dist.all_gather(tensors, tensor, group=group)


def broadcast(tensor, src, group=None):
    return tensor
'''

STAR_MODEL = '''\
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from proj import comm as dist


class Block(nn.Module):
    def forward(self, x):
        dist.all_reduce(x)
        dist.broadcast(x, 0)
        tensors = [torch.empty_like(x)]
        dist.all_gather(tensors, x)
        return x * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)
'''


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _findings(root: Path) -> list[tuple[str, int, int, str, str]]:
    completed = run_cli(".", "--format", "json", "--no-cache", "--select", "CKP4", cwd=root)
    assert completed.returncode in (0, 1), completed.stderr.decode()
    report = json.loads(completed.stdout)
    return [(f["path"], f["line"], f["column"], f["code"], f["message"]) for f in report["findings"]]


def _vendored(root: Path, mappings: str) -> None:
    _write(
        root,
        {
            "pyproject.toml": "[project]\nname = 'vendor'\n",
            "megatron/__init__.py": "",
            "megatron/core/__init__.py": "",
            "megatron/core/tensor_parallel/__init__.py": "from .mappings import reduce_from_tensor_model_parallel_region\n",
            "megatron/core/tensor_parallel/mappings.py": mappings,
            "model.py": ROW_PARALLEL,
        },
    )


def test_a_vendored_mapping_is_followed_to_its_own_collective(tmp_path: Path) -> None:
    _vendored(tmp_path, MAPPINGS)
    [(path, line, column, code, message)] = _findings(tmp_path)
    assert (path, line, column, code) == ("megatron/core/tensor_parallel/mappings.py", 12, 5, "CKP401")
    assert message.endswith(
        "(in region checkpointed at model.py:23 via RowParallel.forward -> reduce_from_tensor_model_parallel_region"
        " -> _ReduceFromModelParallelRegion.forward -> _reduce)"
    )


def test_a_project_function_named_like_a_catalogue_wrapper_that_communicates_nothing_is_clean(tmp_path: Path) -> None:
    _vendored(tmp_path, IDENTITY_MAPPINGS)
    assert _findings(tmp_path) == []


def test_names_a_star_import_of_torch_distributed_gives_are_torch_s_and_redefined_ones_the_module_s(tmp_path: Path) -> None:
    _write(tmp_path, {"pyproject.toml": "[project]\nname = 'proj'\n", "proj/__init__.py": "", "proj/comm.py": STAR_COMM, "proj/model.py": STAR_MODEL})
    found = {(path, line, column, code) for path, line, column, code, _ in _findings(tmp_path)}
    # all_reduce: torch's, at the call; broadcast: the module's own no-op; all_gather: the module's, followed to torch's inside
    assert found == {("proj/model.py", 10, 9, "CKP401"), ("proj/comm.py", 6, 12, "CKP401")}
