"""CKP304: input saliency by `torch.autograd.grad` through a classifier whose encoder checkpoints
reentrantly. The gradient with respect to the input has to pass back through the reentrant region,
which refuses to run its nested backward inside `autograd.grad`: the saliency call raises. Ordinary
training with `loss.backward()` on the same model works.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Classifier(nn.Module):
    def __init__(self, in_dim=6, width=8, classes=3):
        super().__init__()
        self.stem = nn.Linear(in_dim, width)
        self.encoder = nn.Sequential(nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, classes)

    def encode(self, x):
        return checkpoint(self.encoder, self.stem(x), use_reentrant=True)

    def forward(self, x):
        return self.head(self.encode(x))


def train_step(model, x, labels):
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    return loss


def input_saliency(model, x, labels):
    x = x.clone().requires_grad_(True)
    loss = F.cross_entropy(model(x), labels)
    (saliency,) = torch.autograd.grad(loss, x)  # expect: CKP304@19
    return saliency.abs()
