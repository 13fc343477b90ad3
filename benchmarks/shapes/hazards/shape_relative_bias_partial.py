"""CKP302: a relative position bias gathered from a trainable table reaches reentrant blocks by
keyword. `functools.partial(block, bias=...)` hides the bias from reentrant checkpointing, which
detaches only positional inputs. Each block's recompute then backpropagates through the gather from
the bias table inside its own nested backward; the second block finds that graph already freed and
the backward raises.
"""
import functools

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class BiasedSelfAttention(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x, bias=None, scale=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scale = scale or x.shape[-1] ** -0.5
        scores = q @ k.transpose(-1, -2) * scale + bias
        return x + self.out(torch.softmax(scores, dim=-1) @ v)


class RelativeBiasEncoder(nn.Module):
    def __init__(self, width=8, seq_len=6, depth=2):
        super().__init__()
        self.input_proj = nn.Linear(width, width)
        self.bias_table = nn.Parameter(torch.randn(2 * seq_len - 1) * 0.1)
        positions = torch.arange(seq_len)
        self.register_buffer("relative_index", positions[:, None] - positions[None, :] + seq_len - 1)
        self.blocks = nn.ModuleList([BiasedSelfAttention(width) for _ in range(depth)])

    def forward(self, x):
        x = self.input_proj(x)
        bias = self.bias_table[self.relative_index]
        for block in self.blocks:
            x = checkpoint(functools.partial(block, bias=bias), x, use_reentrant=True)  # expect: CKP302@17
        return x


def train_step(model, x):
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss
