"""ckptlint: find code that makes activation checkpointing replay something different."""

__version__ = "0.1.0"
