"""Probe overhead of the runtime companion on a small transformer-block stack (CPU or CUDA).

    python benchmarks/runtime_overhead.py [--steps 100] [--device cpu]

Prints (1) probed step time / plain step time when every step is probed (`sample="all"`;
the floor is about 3x: a plain replay, a checkpointed replay, then the real step),
(2) the same with the witness on (`witness=True`: the real forward's ops logged, the real
recompute compared with them), and (3) the amortised overhead of `sample="first"` over the run. Times are medians of repeated
runs in one process; ratios, not seconds, are what to compare across machines.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import ckptlint.runtime as runtime


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Stack(nn.Module):
    def __init__(self, depth: int = 6, width: int = 128, heads: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(depth)])

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


def run(steps: int, device: str, sample: str | None, witness: bool = False) -> float:
    torch.manual_seed(0)
    model = Stack().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(8, 64, 128, device=device)

    def step() -> None:
        loss = model(data).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()  # warm-up, outside the timing
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    if sample is None:
        for _ in range(steps):
            step()
    else:
        with runtime.audit(sample=sample, witness=witness):
            for _ in range(steps):
                step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    plain_one = statistics.median(run(5, args.device, None) for _ in range(args.repeats)) / 5
    probed_one = statistics.median(run(5, args.device, "all") for _ in range(args.repeats)) / 5
    witnessed_one = statistics.median(run(5, args.device, "all", witness=True) for _ in range(args.repeats)) / 5
    plain_run = statistics.median(run(args.steps, args.device, None) for _ in range(args.repeats))
    first_run = statistics.median(run(args.steps, args.device, "first") for _ in range(args.repeats))
    print(f"device {args.device}, torch {torch.__version__}, 6 blocks x width 128, batch 8 x 64 tokens")
    print(f"plain step {plain_one * 1e3:.1f} ms; probed step (sample=all) {probed_one * 1e3:.1f} ms: {probed_one / plain_one:.2f}x")
    print(
        f"probed and witnessed step (sample=all, witness) {witnessed_one * 1e3:.1f} ms: {witnessed_one / plain_one:.2f}x "
        f"({witnessed_one / probed_one:.2f}x the probed step)"
    )
    print(
        f"{args.steps} steps: plain {plain_run:.2f} s, sample=first {first_run:.2f} s: "
        f"{first_run / plain_run:.3f}x amortised overhead"
    )


if __name__ == "__main__":
    main()
