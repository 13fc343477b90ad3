"""Safe twin: the same block that embeds token ids, checkpointed in non-reentrant mode. Non-reentrant
checkpointing records the graph from the parameters used inside the region, so the embedding and
projection get the same gradients as without checkpointing even though the only input is an integer
tensor.
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
        hidden = checkpoint(self.stem, token_ids, use_reentrant=False)
        return self.head(hidden.mean(dim=1))


def train_step(model, token_ids, labels):
    loss = nn.functional.cross_entropy(model(token_ids), labels)
    loss.backward()
    return loss
