"""Parts of benchmarks/real_models.py (the real-model truth corpus); see its docstring."""
