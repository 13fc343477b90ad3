"""How the code around a checkpoint uses it (CKP301-305, 403-405, 502/503/505).

- `facts.py`: the records rules read: why an input cannot require grad, untracked tensors.
- `protocol.py`: `GradOracle`, the questions the gradient evaluator asks `grad_flow.py`.
- `gradients.py`: can this value require grad? The evaluator of one function's expressions.
- `grad_flow.py`: what reaches a reentrant region, and how (CKP301, CKP302).
- `layer_calls.py`: which calls of a module run a reentrant checkpoint.
- `embedded_inputs.py`: a region's inputs it embeds itself (token ids, CKP301).
- `model_inputs.py`: which parameter of a library model's `forward` holds its training data.
- `composition.py`: DDP, `autograd.grad`, `torch.func` around a checkpointed model (CKP303, CKP304).
- `instance_guards.py`: whether a checkpoint call runs in one instance, from the flags it was built with.
- `model_parameters.py`: which model a training script's untyped parameter holds (`critic`, `model`).
- `huggingface.py`: Hugging Face gradient checkpointing on frozen or PEFT models (CKP305).
- `sharding.py`: where FSDP shards a module, and checkpointing around or reentrant in it (CKP403, CKP405).
- `fsdp_units.py`: a model's own checkpoints around units a setup function makes (auto-wrap, `fully_shard` from outside).
- `double_checkpointing.py`: one model checkpointed twice (CKP404).
- `sac_forms.py`: how selective-checkpoint policies and context functions are written (CKP502, CKP503).
"""
