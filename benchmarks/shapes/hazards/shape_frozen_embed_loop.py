"""CKP301: an embedding frozen by a loop over its parameters feeds a reentrant block. The embedding's
output cannot require grad, so the reentrant checkpoint of the first block sees no input that needs
grad: it returns a tensor outside the autograd graph and the block's parameters never receive a
gradient, although the head after it still trains.
"""
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, hidden):
        return hidden + self.proj(hidden).tanh()


class FrozenEmbeddingClassifier(nn.Module):
    def __init__(self, vocab=16, width=8, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        for p in self.embed.parameters():
            p.requires_grad = False
        self.block = Block(width)
        self.head = nn.Linear(width, classes)

    def forward(self, token_ids):
        hidden = self.embed(token_ids)
        hidden = checkpoint(self.block, hidden, use_reentrant=True)  # expect: CKP301@18
        return self.head(hidden.mean(dim=1))


def train_step(model, token_ids, labels):
    loss = nn.functional.cross_entropy(model(token_ids), labels)
    loss.backward()
    return loss
