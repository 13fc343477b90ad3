"""What a checkpoint call replays, and what the replay does twice or differently.

`resolve.py` finds the functions a region starts in; `interpreter.py` summarises what a
function does (once per calling context), consulting `library_calls.py` for torch, NumPy,
`random` and builtins, `inference.py` for types and `mutability.py` for state that changes;
`summary.py` is the vocabulary the rules read; `effects.py` joins them per checkpoint call.

This face imports nothing, so a rule that reads `regions.summary` loads no interpreter.
"""
