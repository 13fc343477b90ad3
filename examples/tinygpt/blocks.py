"""Transformer blocks of a tiny GPT. Each block is run under activation checkpointing by model.py."""
import random

import torch
from torch import nn

AUX_LOSSES = []


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.down(torch.nn.functional.gelu(self.up(x))))


class Router(nn.Module):
    """Mixture-of-experts routing with an auxiliary load-balancing loss."""

    def __init__(self, width: int, experts: int):
        super().__init__()
        self.gate = nn.Linear(width, experts)
        self.experts = nn.ModuleList([MLP(width) for _ in range(experts)])
        self.register_buffer("usage", torch.zeros(experts))

    def forward(self, x):
        weights = self.gate(x).softmax(-1)
        AUX_LOSSES.append(weights.mean(0).pow(2).sum())
        self.usage.mul_(0.99).add_(weights.detach().mean((0, 1)), alpha=0.01)
        if random.random() < 0.1:  # occasionally route to a random expert
            return self.experts[random.randrange(len(self.experts))](x)
        return sum(w.unsqueeze(-1) * e(x) for w, e in zip(weights.unbind(-1), self.experts))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, experts: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.BatchNorm1d(width)
        self.router = Router(width, experts)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        h = self.norm2(x.transpose(1, 2)).transpose(1, 2)
        return x + self.router(h)
