"""Safe twin: the closure captures only the boolean padding mask; the context goes positionally. The
reentrant checkpoint detaches the context it receives as a positional input and returns its gradient
to the encoder through the outer graph, once per layer; the mask needs no grad, so capturing it is
harmless and training matches the run without checkpointing.
"""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class CrossAttention(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)

    def forward(self, hidden, context, mask):
        scores = self.query(hidden) @ self.key(context).transpose(-1, -2) / hidden.shape[-1] ** 0.5
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        return hidden + torch.softmax(scores, dim=-1) @ self.value(context)


class EncoderDecoder(nn.Module):
    def __init__(self, width=8, depth=2):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(width, width), nn.Tanh())
        self.target_proj = nn.Linear(width, width)
        self.layers = nn.ModuleList([CrossAttention(width) for _ in range(depth)])

    def forward(self, source, target):
        mask = source.abs().sum(dim=-1) > 0
        context = self.encoder(source)
        hidden = self.target_proj(target)
        for layer in self.layers:
            def attend(h, ctx, layer=layer):
                return layer(h, ctx, mask)
            hidden = checkpoint(attend, hidden, context, use_reentrant=True)
        return hidden


def train_step(model, source, target):
    loss = model(source, target).pow(2).mean()
    loss.backward()
    return loss
