"""CKP301: a ModuleList of early layers, frozen by a loop, feeds a reentrant block. The input features
do not require grad and the frozen early layers add no parameter that does, so the reentrant
checkpoint of the trainable block receives an input outside the graph: the block's parameters get no
gradient (only the head trains).
"""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class PartlyFrozenTower(nn.Module):
    def __init__(self, width=8, frozen_depth=2):
        super().__init__()
        self.early = nn.ModuleList([nn.Linear(width, width) for _ in range(frozen_depth)])
        for layer in self.early:
            for p in layer.parameters():
                p.requires_grad = False
        self.block = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
        self.head = nn.Linear(width, 1)

    def forward(self, features):
        for layer in self.early:
            features = torch.relu(layer(features))
        features = checkpoint(self.block, features, use_reentrant=True)  # expect: CKP301@20
        return self.head(features)


def train_step(model, features, targets):
    loss = nn.functional.mse_loss(model(features), targets)
    loss.backward()
    return loss
