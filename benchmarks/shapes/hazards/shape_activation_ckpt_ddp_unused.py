"""CKP303: reentrant activation checkpointing applied to a model that DDP wraps with
find_unused_parameters. DDP searches the autograd graph for used parameters at the end of forward.
Reentrant regions run under no_grad, so the checkpointed blocks' parameters look unused and are
marked ready at once; when the recompute then produces their gradients, DDP marks them ready a
second time and raises.
"""
import functools

import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)
from torch.nn.parallel import DistributedDataParallel


class ResidualBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return x + self.proj(x).relu()


class Tower(nn.Module):
    def __init__(self, width=8, depth=2):
        super().__init__()
        self.stem = nn.Linear(width, width)
        self.blocks = nn.Sequential(*[ResidualBlock(width) for _ in range(depth)])
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def wrap_for_training(model):
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT),
        check_fn=lambda module: isinstance(module, ResidualBlock),
    )
    return DistributedDataParallel(model, find_unused_parameters=True)  # expect: CKP303@12


def train_step(ddp_model, x, targets):
    loss = nn.functional.mse_loss(ddp_model(x), targets)
    loss.backward()
    return loss
