"""CKP301: integer token ids are the only positional input of a reentrant block that embeds them. Token
ids can never require grad, so the reentrant checkpoint runs the block under no_grad and returns a
tensor with no graph: the block's embedding and projection never receive a gradient, while the head
after the region trains as usual.
"""
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class TokenStem(nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)

    def forward(self, token_ids):
        return self.mix(self.embed(token_ids)).relu()


class TokenClassifier(nn.Module):
    def __init__(self, vocab=16, width=8, classes=3):
        super().__init__()
        self.stem = TokenStem(vocab, width)
        self.head = nn.Linear(width, classes)

    def forward(self, token_ids):
        hidden = checkpoint(self.stem, token_ids, use_reentrant=True)  # expect: CKP301@18
        return self.head(hidden.mean(dim=1))


def train_step(model, token_ids, labels):
    loss = nn.functional.cross_entropy(model(token_ids), labels)
    loss.backward()
    return loss
