"""mmengine, as ckptlint reads it where it is not installed (ckptlint/stubs/__init__.py)."""
