"""Facts as data: what torch, NumPy, aten and c10d do. Imports nothing from ckptlint but `syntax`.

- `torch_api.py`: torch, NumPy and standard-library calls (random draws, creation, moves, in-place ops).
- `aten_ops.py`: which aten ops a torch call dispatches (SAC policies, CKP501, CKP504).
- `collectives.py`: collectives and point-to-point ops between ranks (CKP401, CKP402).
- `method_names.py`: torch.Tensor's, nn.Module's and built-in types' method names (coverage).
"""
