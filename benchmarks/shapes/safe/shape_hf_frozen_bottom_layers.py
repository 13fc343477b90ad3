"""Safe twin: the same frozen bottom layers and reentrant gradient checkpointing, after
`enable_input_require_grads()`. The local class mirrors the Hugging Face API (`transformers` is not
installed here). The hook on the input embeddings makes their output require grad, so every layer's
reentrant checkpoint has a positional input that needs grad and the unfrozen top layers get the
gradients of the run without checkpointing.
"""
import functools

import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class TinyDecoderLayer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, hidden_states):
        return hidden_states + self.mlp(hidden_states)


class TinyCausalLM(nn.Module):
    supports_gradient_checkpointing = True

    def __init__(self, vocab_size=16, width=8, num_layers=4):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, width)
        self.layers = nn.ModuleList([TinyDecoderLayer(width) for _ in range(num_layers)])
        self.lm_head = nn.Linear(width, vocab_size)
        self.gradient_checkpointing = False

    def get_input_embeddings(self):
        return self.embed_tokens

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        if gradient_checkpointing_kwargs is None:
            gradient_checkpointing_kwargs = {"use_reentrant": True}
        self._gradient_checkpointing_func = functools.partial(checkpoint, **gradient_checkpointing_kwargs)
        self.gradient_checkpointing = True

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, inputs, output):
            output.requires_grad_(True)

        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden_states = self._gradient_checkpointing_func(layer.__call__, hidden_states)
            else:
                hidden_states = layer(hidden_states)
        return self.lm_head(hidden_states)


def prepare_for_finetuning(model, num_frozen_layers=2):
    for module in [model.embed_tokens, *model.layers[:num_frozen_layers]]:
        for parameter in module.parameters():
            parameter.requires_grad = False
    model.enable_input_require_grads()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    return model


def train_step(model, input_ids):
    logits = model(input_ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), input_ids[:, 1:].flatten())
    loss.backward()
    return loss
