"""Property: whatever sequence of edits a project goes through, a run that uses the cache
reports exactly what a run without it reports (the contract in docs/performance.md).

Projects are built from a menu of module texts that exercise what the cache must track:
regions in other modules, aliases and partials bound in one module and called in another,
layer subclasses across modules, package re-exports (plain and star), module-attribute
calls, a package reached through attribute chains, an alias and a computed getattr, a namespace package whose
modules come to spell its name (which moves their import root), and package markers that come and go. Each step replaces, adds or deletes one module,
perhaps with a comment appended, trailing a line or taking a line of its own (comments that
spell what text tests look for: dependents' analyses stand when only comments change),
and compares a whole-project run and a pre-commit-style run of the edited file.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptlint.config import load_config
from ckptlint.engine import Linter

EXAMPLES = int(os.environ.get("CKPTLINT_FUZZ_EXAMPLES", "25"))

RANDOM_FN = "import random\n\n\ndef block(x):\n    return x * random.random()\n"
CLEAN_FN = "def block(x):\n    return x * 2\n"
MENU: dict[str, list[str]] = {
    "pkg/__init__.py": ["", "from .blocks import block\n", "from .utils import ckpt as ck\n", "from .blocks import *\n"],
    "pkg/blocks.py": [
        RANDOM_FN,
        CLEAN_FN,
        "from .deep import *\n",
        "import torch.nn as nn\n\nAUX = []\n\n\ndef block(x):\n    AUX.append(x)\n    return x\n",
    ],
    "pkg/deep.py": [RANDOM_FN, CLEAN_FN],
    "pkg/utils.py": [
        "import functools\n\nfrom torch.utils.checkpoint import checkpoint\n\nckpt = functools.partial(checkpoint, use_reentrant=False)\n",
        "def ckpt(fn, *args):\n    return fn(*args)\n",
        "from torch.utils.checkpoint import checkpoint as ckpt\n",
        "from torch.utils.checkpoint import checkpoint\n\nckpt = checkpoint\n",
    ],
    "pkg/layers.py": [
        "from transformers.modeling_layers import GradientCheckpointingLayer\n\n\nclass Base(GradientCheckpointingLayer):\n    pass\n",
        "import torch.nn as nn\n\n\nclass Base(nn.Module):\n    pass\n",
    ],
    "pkg/model.py": [
        "from .blocks import block\nfrom .utils import ckpt\n\n\ndef forward(x):\n    return ckpt(block, x)\n",
        "from torch.utils.checkpoint import checkpoint\n\nfrom . import blocks\n\n\ndef forward(x):\n    return checkpoint(blocks.block, x, use_reentrant=False)\n",
        "import random\n\nfrom .layers import Base as Layer\n\n\nclass Leaf(Layer):\n    def forward(self, x):\n        return x * random.random()\n",
        "from torch.utils.checkpoint import checkpoint\n\nimport pkg\n\n\ndef run(x):\n    return pkg.blocks.block(x)\n\n\ndef forward(x):\n    return checkpoint(run, x, use_reentrant=False)\n",
    ],
    "app.py": [
        "from pkg import block\nfrom pkg.utils import ckpt\n\n\ndef step(x):\n    return ckpt(block, x)\n",
        "from torch.utils.checkpoint import checkpoint\n\nimport pkg.blocks as b\n\n\ndef step(x):\n    return checkpoint(b.block, x, use_reentrant=False)\n",
        "from pkg import ck\nfrom pkg.deep import block\n\n\ndef step(x):\n    return ck(block, x)\n",
        "x = 1\n",
        # a package bound and reached through an attribute chain, and through an alias (any submodule)
        "import pkg\nfrom torch.utils.checkpoint import checkpoint\n\n\ndef step(x):\n    return checkpoint(pkg.deep.block, x, use_reentrant=False)\n",
        "import pkg\nfrom torch.utils.checkpoint import checkpoint\n\np = pkg\n\n\ndef step(x):\n    return checkpoint(p.deep.block, x, use_reentrant=False)\n",
        "import pkg\nfrom torch.utils.checkpoint import checkpoint\n\n\ndef step(x):\n    return checkpoint(getattr(pkg, 'Deep'.lower()).block, x, use_reentrant=False)\n",
    ],
    # a namespace package (no `__init__.py`): a package when its modules spell `ns.`, else a root
    "ns/model.py": [
        "from torch.utils.checkpoint import checkpoint\n\nfrom ns.blocks import block\n\n\ndef forward(x):\n    return checkpoint(block, x, use_reentrant=False)\n",
        "from torch.utils.checkpoint import checkpoint\n\nfrom blocks import block\n\n\ndef forward(x):\n    return checkpoint(block, x, use_reentrant=False)\n",
    ],
    "ns/blocks.py": [RANDOM_FN, CLEAN_FN, "from ns.deep import block\n"],
    "ns/deep.py": [RANDOM_FN, CLEAN_FN],
}
MODULES = sorted(MENU)

COMMENT = "# torch.compile(model) save_on_cpu self.x.flag = 1 checkpoint(block, x) random.random()"
COMMENTED = {
    "appended": lambda text: text + "\n" + COMMENT + "\n",
    "trailing": lambda text: text.replace("\n", "  " + COMMENT + "\n", 1),
    "own line": lambda text: COMMENT + "\n" + text,
}
# a step: (module, index into its menu or None to delete it, how a comment is added)
steps = st.lists(
    st.sampled_from(MODULES).flatmap(
        lambda m: st.tuples(st.just(m), st.none() | st.integers(0, len(MENU[m]) - 1), st.sampled_from([None, *COMMENTED]))
    ),
    min_size=1,
    max_size=5,
)
starts = st.fixed_dictionaries({m: st.none() | st.integers(0, len(MENU[m]) - 1) for m in MODULES})


def _apply(root: Path, module: str, choice: int | None, comment: str | None = None) -> None:
    path = root / module
    if choice is None:
        path.unlink(missing_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = MENU[module][choice]
        path.write_text(COMMENTED[comment](text) if comment is not None else text)


def _findings(root: Path, named: list[str], cache: Path | None) -> list[dict]:
    config = load_config(root / "pyproject.toml", root)
    linter = Linter(config, base=root, cache_dir=cache)
    result = linter.lint_files([root / name for name in named], project_root=root)
    return [finding.to_dict() for finding in result.findings]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(start=starts, edits=steps)
def test_a_warm_run_reports_what_a_cold_run_reports(tmp_path_factory, start: dict, edits: list) -> None:
    root = tmp_path_factory.mktemp("project")
    cache = root / ".ckptlint_cache"
    (root / "pyproject.toml").write_text("[tool.ckptlint]\n")
    for module, choice in start.items():
        _apply(root, module, choice)
    _findings(root, [m for m in MODULES if (root / m).exists()], cache)  # fill the cache
    for module, choice, comment in edits:
        _apply(root, module, choice, comment)
        present = [m for m in MODULES if (root / m).exists()]
        assert _findings(root, present, cache) == _findings(root, present, None), (module, choice, comment)
        if (root / module).exists():  # pre-commit: only the edited file is named
            assert _findings(root, [module], cache) == _findings(root, [module], None), (module, choice, comment)
