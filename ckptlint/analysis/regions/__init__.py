"""What a checkpoint call replays, and what the replay does twice or differently.

- `summary.py`: the vocabulary the rules read (effect kinds, `Effect`, `Summary`).
- `resolve.py`: the functions a region starts in, with their context.
- `training_step.py`: checkpoint-call arguments that are false in a checkpointed training step.
- `checkpoint_choice.py`: a grad-mode branch that only chooses whether to checkpoint.
- `protocol.py`: the interpreter's surface that `library_calls.py` and `dispatch.py` use.
- `interpreter.py`: summarises what a function does, once per calling context.
- `dispatch.py`: how the interpreter runs a call (library, method, module, project function).
- `coverage.py`: which calls a region makes the analysis followed, and why not the others.
- `binding.py`: how a call's values meet a function's parameters.
- `library_calls.py`: what torch, NumPy, `random` and builtins calls do inside a region.
- `mutability.py`: which state can change between forward and replay.
- `replay_writes.py`: which writes a replay repeats with a different effect.
- `balanced_stacks.py`: stacks a region pushes onto and pops off again (a whole-region replay leaves them).
- `libraries.py`: hazards in installed libraries, reported at the project line that reaches them.
- `effects.py`: effects per checkpoint call (resolve, summarise, prefix the chain).
- `frozen_norms.py`: BatchNorms an owner's `train()` keeps in eval mode (`norm_eval`).
- `outputs.py`: what a reentrant region returns (CKP306).
- `cost_hints.py`: where what a checkpoint buys is known from the code.
"""
