"""Folding calls from constants (analysis/semantics/folding.py): what is computed, what stops a fold,
and that nothing of the linted code is executed."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, run_cli

from ckptlint.analysis.semantics.constant_calls import constant_types
from ckptlint.analysis.semantics.folding import MAX_STEPS, OPAQUE, Folder, FunctionRef, Unfoldable
from ckptlint.analysis.semantics.values import FALSE_TYPE, ContainerType, KeyedType, LiteralType
from ckptlint.source import SourceFile
from ckptlint.symbols import DEF, ModuleSymbols

DECODER = '''
import re
import math
from copy import deepcopy

def _parse(ss):
    return int(ss) if ss.isdigit() else [int(k) for k in ss.split('.')]

def decode(block_str):
    ops = block_str.split('_')
    block_type = ops[0]
    options = {}
    skip = None
    for op in ops[1:]:
        if op == 'noskip':
            skip = False
        else:
            splits = re.split(r'(\\d.*)', op)
            if len(splits) >= 2:
                key, value = splits[:2]
                options[key] = value
    args = dict(block_type=block_type, kernel=_parse(options['k']), noskip=skip is False)
    if 'cc' in options:
        args['num_experts'] = int(options['cc'])
    return args, int(options['r'])

def decode_all(arch, multiplier=1.0):
    out = []
    for strings in arch:
        stage = []
        for s in strings:
            ba, repeats = decode(s)
            stage.extend([deepcopy(ba) for _ in range(int(math.ceil(repeats * multiplier)))])
        out.append(stage)
    return out
'''


def _fold(source: str, function: str, *args: object, **kwargs: object) -> object:
    text = textwrap.dedent(source)
    module = ModuleSymbols("m", SourceFile("m.py", "m.py", text), ast.parse(text))

    def local_function(at: ModuleSymbols, scope: object, node: ast.expr) -> FunctionRef | None:
        binding = at.binding(at.scope, node.id) if isinstance(node, ast.Name) else None
        if binding is None or binding.kind != DEF:
            return None
        return FunctionRef(binding.node, at, at.scope_of[id(binding.node)])  # type: ignore[arg-type]  # a def

    return Folder(local_function).call(local_function(module, module.scope, ast.Name(function)), list(args), kwargs)  # type: ignore[arg-type]  # defined above


def test_architecture_strings_decode_to_the_block_arguments_they_name() -> None:
    folded = _fold(DECODER, "decode_all", [["ds_r1_k3"], ["ir_r2_k3.5_cc4", "ir_r1_k5_noskip"]])
    assert folded == [
        [{"block_type": "ds", "kernel": 3, "noskip": False}],
        [
            {"block_type": "ir", "kernel": [3, 5], "noskip": False, "num_experts": 4},
            {"block_type": "ir", "kernel": [3, 5], "noskip": False, "num_experts": 4},
            {"block_type": "ir", "kernel": 5, "noskip": True},
        ],
    ]
    assert len(_fold(DECODER, "decode_all", [["ds_r2_k3"]], multiplier=2.0)[0]) == 4  # type: ignore[index]  # a list


def test_folded_values_are_typed_as_literals_flags_lists_and_keyed_dicts() -> None:
    types = constant_types([{"block_type": "ir", "s2d": False, "num_experts": 4}])
    (container,) = types
    assert isinstance(container, ContainerType)
    keyed = next(t for t in container.elements if isinstance(t, KeyedType))
    assert keyed.get("block_type") == {LiteralType("ir")}
    assert keyed.get("s2d") == {FALSE_TYPE}
    assert keyed.get("num_experts") == {LiteralType("4", number=True)}
    assert constant_types(OPAQUE) == frozenset()


@pytest.mark.parametrize(
    "body",
    [
        "return open(path).read() or 1",  # an unknown call's result, then tested
        "if registry[path]: return 1\n    return 2",  # a module-level object the fold does not know
        "import os\n    return os.listdir(path)",  # an import inside the function
        "raise ValueError(path)",
        "assert path == 'other'\n    return 1",  # a failed assert: the call would raise
        "x = 0\n    while True:\n        x += 1",  # never ends: the step budget stops it
        "return 'a' * 10 ** 9",  # a value too large to build
        "return path.encode()",  # a method outside the known pure ones
        "d = {'a': 1}\n    d.clear()\n    return d",  # one that changes a value built here
    ],
)
def test_what_the_fold_cannot_know_stops_it(body: str) -> None:
    source = f"registry = {{}}\n\ndef f(path):\n    {body}\n"
    with pytest.raises(Unfoldable):
        _fold(source, "f", "x")


def test_unknown_values_may_be_stored_and_passed_but_not_tested() -> None:
    source = """
    def f(name):
        layer = get_layer(name)
        return dict(kind=name, layer=layer)
    """
    assert _fold(source, "f", "relu") == {"kind": "relu", "layer": OPAQUE}


def test_a_project_function_that_does_not_fold_gives_an_unknown_value_unless_handed_a_container() -> None:
    source = """
    def helper(x):
        return open(x)

    def mutate(items):
        items.append(len(open('f')))

    def f(name):
        return [helper(name)]

    def g(name):
        items = []
        mutate(items)
        return items
    """
    assert _fold(source, "f", "a") == [OPAQUE]
    with pytest.raises(Unfoldable):
        _fold(source, "g", "a")


def test_the_linted_code_is_never_executed(tmp_path: object) -> None:
    """A body that would write a file, if run, is folded (or not) without running it."""
    marker = f"{tmp_path}/ran"
    source = f"""
    def f(name):
        open({marker!r}, 'w').write(name)
        return name
    """
    assert _fold(source, "f", "x") == "x"  # the write is an unknown call whose result is dropped
    import os

    assert not os.path.exists(marker)


def test_the_step_budget_bounds_a_fold() -> None:
    source = f"""
    def f(n):
        total = 0
        for i in range({MAX_STEPS}):
            total += i
        return total
    """
    with pytest.raises(Unfoldable):
        _fold(source, "f", 1)


def test_a_list_changed_in_place_after_its_assignment_is_not_folded_from_that_assignment(tmp_path: Path) -> None:
    """`arch_def[0] = [...]` under a branch changes what the decoder is handed: folding the list as
    first assigned would hide the four-expert BatchNorm block the branch builds."""
    source = (REPO / "fixtures/regions/safe/architecture_strings.py").read_text()
    changed = source.replace(
        '    arch_def = [["ir_r2_c16"], ["ds_r1_c8"], ["ir_r1_c16"]]\n',
        '    arch_def = [["ir_r2_c16"], ["ds_r1_c8"], ["ir_r1_c16"]]\n    if variant == "net_deep":\n        arch_def[0] = ["ir_r2_c16_cc4"]\n',
    )
    assert changed != source
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "model.py").write_text(changed)
    completed = run_cli("model.py", "--no-cache", "--format", "json", cwd=tmp_path)
    found = {(f["code"], f["line"]) for f in json.loads(completed.stdout)["findings"]}
    assert ("CKP204", 57) in found  # ExpertsBlock's BatchNorm, built only by the changed list


def test_strings_built_by_a_nested_function_and_multipliers_built_by_operators_are_folded(tmp_path: Path) -> None:
    """timm's EdgeTPU models build their strings in a nested `_arch_def(chs)` with f-strings, and
    its V2 models pass `depth_multiplier=(1.2,) * 4 + (1.6,) * 2`: both fold, so only the blocks
    the strings name are followed (the four-expert block, not the attention block)."""
    source = (REPO / "fixtures/regions/hazards/architecture_strings.py").read_text()
    changed = source.replace(
        '    arch_def = [["ir_r2_c16_cc4"], ["ds_r1_c8"], ["ir_r1_c16"]]\n'
        "    model_kwargs = dict(block_args=decode_arch_def(arch_def, depth_multiplier), **kwargs)\n",
        "    def _arch_def(chs):\n"
        '        return [[f"ir_r2_c{chs[0]}_cc4"], [f"ds_r1_c{chs[1]}"], [f"ir_r1_c{chs[2]}"]]\n\n'
        "    arch_def = _arch_def([16, 8, 16])\n"
        "    model_kwargs = dict(block_args=decode_arch_def(arch_def, (depth_multiplier,) * 2 + (1.0,)), **kwargs)\n",
    )
    changed = changed.replace("            stack_args.extend(deepcopy(ba) for _ in range(max(1, round(repeats * depth_multiplier))))",
                              "            stack_args.extend(deepcopy(ba) for _ in range(max(1, round(repeats * depth_multiplier[0]))))")
    assert "def _arch_def(chs):" in changed and "depth_multiplier[0]" in changed
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "model.py").write_text(changed)
    completed = run_cli("model.py", "--no-cache", "--format", "json", cwd=tmp_path)
    found = {(f["code"], f["line"]) for f in json.loads(completed.stdout)["findings"]}
    assert found == {("CKP204", 58)}  # the experts block's BatchNorm; the attention block's (68) is never built


def test_a_dict_changed_after_it_was_built_answers_no_lookup_of_a_key_it_lacks(tmp_path: Path) -> None:
    """`args = dict(kind=kind)` then `args["num_experts"] = experts` under a branch, with `experts` not
    known (nothing folds): `ba.get("num_experts", 0)` may be either, so the experts block and its
    BatchNorm are followed, not decided away by the default."""
    source = '''from torch import nn
from torch.utils.checkpoint import checkpoint


def block_args(kind, experts):
    args = dict(kind=kind)
    if experts:
        args["num_experts"] = experts
    return args


class Experts(nn.Module):
    def __init__(self, kind, num_experts=0):
        super().__init__()
        self.norm = nn.BatchNorm1d(8)

    def forward(self, x):
        return self.norm(x)


class Plain(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x)


def make_block(ba):
    return Experts(**ba) if ba.get("num_experts", 0) else Plain(**ba)


class Net(nn.Module):
    def __init__(self, experts):
        super().__init__()
        self.block = make_block(block_args("ir", experts))

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)
'''
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "model.py").write_text(source)
    completed = run_cli("model.py", "--no-cache", "--format", "json", cwd=tmp_path)
    found = {(f["code"], f["line"]) for f in json.loads(completed.stdout)["findings"]}
    assert ("CKP204", 18) in found
