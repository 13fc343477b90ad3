"""mmcv 1.x's `BaseModule`, `Sequential`, `ModuleList`: in mmcv 2 they moved to mmengine, whose
stub (or installed code) this re-exports (a stub: ckptlint/stubs/__init__.py)."""
from mmengine.model import BaseModule, ModuleList, Sequential
