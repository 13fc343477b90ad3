"""How each checkpoint call runs, and what that does to a finding.

- `execution.py`: compile, SAC policy and offload hooks around each checkpoint call.
- `verdicts.py`: a finding's severity in the context its site runs in.
"""
