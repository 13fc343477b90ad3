"""What one function's own lines say: no types, no project, no other file.

- `statements.py`: statement facts: branches, the enclosing function, which binding reaches a use,
  grad-off blocks.
- `grad_mode.py`: lines no backward differentiates: eval-mode branches and grad-off code (CKP504).
- `integers.py`: which tensors hold integers (CKP504).
- `routing.py`: whether a selection's indices choose what the function computes (CKP504).
- `accumulation.py`: whether an accumulation's sums reach a routing decision (CKP504).
- `saved_outputs.py`: which op's output an in-place change overwrites (CKP501).
- `dict_writes.py`: what a function writes into a dict it unpacks into a call.
"""
