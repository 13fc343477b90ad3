"""CKP302: encoder context that needs grad is captured by the closure each reentrant layer replays.
Reentrant checkpointing only detaches positional inputs. The captured context keeps its link to the
encoder's graph, so each layer's recompute runs a nested backward through the encoder; the second
layer's backward finds the encoder's saved tensors already freed and raises.
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
            def attend(h, layer=layer):
                return layer(h, context, mask)
            hidden = checkpoint(attend, hidden, use_reentrant=True)  # expect: CKP302@22
        return hidden


def train_step(model, source, target):
    loss = model(source, target).pow(2).mean()
    loss.backward()
    return loss
