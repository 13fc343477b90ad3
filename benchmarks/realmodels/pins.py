"""The pinned library releases the corpus replays, and the venv that holds them.

torch is never installed here: the venv sees the system torch (`--system-site-packages`) and a
constraints file pins it, so no resolver can pull another (CUDA) build. torchvision is needed
by timm for pure-Python pieces only (FrozenBatchNorm2d, transforms); the wheel the package
index offers for torch 2.13 is a CUDA build whose native ops cannot load against a CPU torch,
so it is installed without dependencies and `zoo_common.torchvision_without_native_ops()`
lets it import without them (no model here calls a torchvision op).
"""

from __future__ import annotations

import os
import subprocess
import sys

TORCH = "2.13.0"
PINS = {
    "transformers": "5.24.0",
    "timm": "1.0.31",
    "diffusers": "0.42.1",
}
# The use_reentrant each library's own switch selects when the user does not choose one, at the
# pinned release (the mode the static analysis reads the source in): transformers
# `_activation_checkpointing_enable` defaults to {"use_reentrant": False}; timm's
# `use_reentrant_ckpt()` is False unless TIMM_REENTRANT_CKPT is set; diffusers'
# `enable_gradient_checkpointing` passes use_reentrant=False. The other mode is opt-in.
# mmpretrain's blocks omit it, so torch's default (reentrant) is theirs.
DEFAULT_MODE = {"transformers": "non-reentrant", "timm": "non-reentrant", "diffusers": "non-reentrant", "mmpretrain": "reentrant"}
# mmpretrain requires full mmcv (compiled ops) by metadata; its backbones run on mmcv-lite, so it
# is installed without dependencies and these are installed for it
MMPRETRAIN_DEPENDENCIES = {"mmcv-lite": "2.2.0", "mmengine": "0.10.7", "mat4py": "0.6.0", "modelindex": "0.0.2", "einops": "0.8.2"}
NO_DEPS_PINS = {"torchvision": "0.28.0", "mmpretrain": "1.2.0"}  # torchvision needs numpy, pillow, torch: pillow comes with diffusers
LIBRARIES = (*PINS, "mmpretrain")


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def setup(venv: str, benchmarks_dir: str) -> int:
    """Create `venv` (sharing the system torch) and install the pins; then check every library imports."""
    import torch  # the system torch the venv will share

    if not torch.__version__.startswith(TORCH):
        print(f"warning: system torch is {torch.__version__}, the corpus was pinned against {TORCH}", file=sys.stderr)
    if not os.path.exists(venv_python(venv)):
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    constraints = os.path.join(venv, "constraints.txt")
    with open(constraints, "w", encoding="utf-8") as handle:
        handle.write(f"torch=={torch.__version__.split('+')[0]}\n")
    pip = [venv_python(venv), "-m", "pip", "install", "--disable-pip-version-check", "-c", constraints]
    subprocess.run([*pip, *(f"{name}=={version}" for name, version in {**PINS, **MMPRETRAIN_DEPENDENCIES}.items())], check=True)
    subprocess.run([*pip, "--no-deps", *(f"{name}=={version}" for name, version in NO_DEPS_PINS.items())], check=True)
    check = subprocess.run(
        [venv_python(venv), "-m", "realmodels.worker", "check"],
        env={**os.environ, "PYTHONPATH": benchmarks_dir, "HF_HUB_OFFLINE": "1"},
    )
    return check.returncode
