"""How values choose what a builder builds: short-circuit operators, one value at a time,
string methods on keys (and on values that are never strings) (analysis/semantics/values.py, registries.py)."""

from __future__ import annotations

import ast

from ckptlint.analysis.semantics import registries
from ckptlint.analysis.semantics.values import (
    FALSE_TYPE,
    NONE_TYPE,
    TRUE_TYPE,
    ClassObjectType,
    ContainerType,
    LiteralType,
    short_circuit,
)
from ckptlint.engine import lint_source

SE = ClassObjectType("zoo.SqueezeExcite")
BN = LiteralType("bn")


def test_or_drops_the_values_that_pass_the_chain_on() -> None:
    assert short_circuit(True, [frozenset({NONE_TYPE}), frozenset({SE})]) == {SE}
    assert short_circuit(True, [frozenset({NONE_TYPE, FALSE_TYPE, LiteralType(""), LiteralType("0", number=True)}), frozenset({BN})]) == {BN}
    # a value that may be true ends the chain: kept beside what follows
    assert short_circuit(True, [frozenset({NONE_TYPE, SE}), frozenset({BN})]) == {SE, BN}
    assert short_circuit(True, [frozenset(), frozenset({BN})]) == {BN}  # nothing known of the first operand


def test_and_drops_the_values_that_pass_the_chain_on() -> None:
    assert short_circuit(False, [frozenset({TRUE_TYPE}), frozenset({BN})]) == {BN}
    assert short_circuit(False, [frozenset({TRUE_TYPE, FALSE_TYPE}), frozenset({BN})]) == {FALSE_TYPE, BN}
    assert short_circuit(False, [frozenset({SE, LiteralType("x")}), frozenset({NONE_TYPE})]) == {NONE_TYPE}


def test_a_builder_call_is_split_into_one_value_at_a_time() -> None:
    passed = (("attn_type", frozenset({NONE_TYPE, SE})),)
    assert sorted(registries.case_split(passed), key=str) == sorted(
        [(("attn_type", frozenset({NONE_TYPE})),), (("attn_type", frozenset({SE})),)], key=str
    )
    two = (("a", frozenset({NONE_TYPE, SE})), ("b", frozenset({BN, LiteralType("ln")})))
    assert len(registries.case_split(two)) == 4 and all(len(v) == 1 for case in registries.case_split(two) for _, v in case)


def test_no_split_for_one_combination_or_too_many() -> None:
    single = (("attn_type", frozenset({SE})),)
    assert registries.case_split(single) == [single]
    many = (("a", frozenset(LiteralType(str(i)) for i in range(registries.MAX_CASES + 1))),)
    assert registries.case_split(many) == [many]


def test_a_string_method_on_none_or_a_class_selects_no_key() -> None:
    assert registries.string_method_call(frozenset({NONE_TYPE, SE}), "lower", []) == registries.NO_KEY
    assert registries.string_method_call(frozenset({NONE_TYPE, BN}), "lower", []) == {BN}
    unknown = ClassObjectType("zoo.Other")
    assert registries.string_method_call(frozenset({NONE_TYPE, unknown}), "replace", [ast.Constant("_"), ast.Constant("")]) == registries.NO_KEY


def test_split_gives_the_parts_of_a_literal_key() -> None:
    [parts] = registries.string_method_call(frozenset({LiteralType("bn-relu")}), "split", [ast.Constant("-")])
    assert isinstance(parts, ContainerType) and parts.elements == {LiteralType("bn"), LiteralType("relu")}
    [first] = registries.string_method_call(frozenset({LiteralType("a-b-c")}), "split", [ast.Constant("-"), ast.Constant(1)])
    assert first.elements == {LiteralType("a"), LiteralType("b-c")}
    assert registries.string_method_call(frozenset({LiteralType("a b")}), "split", [ast.Name("sep")]) is None


SPLIT_KEY = """
from torch import nn
from torch.utils.checkpoint import checkpoint

NORM_ACT = dict(batchnorm=nn.BatchNorm2d, layernorm=nn.GroupNorm)


class Block(nn.Module):
    def __init__(self, norm_layer="layernorm-relu"):
        super().__init__()
        self.norm = NORM_ACT[norm_layer.replace("_", "").lower().split("-")[0]](1, 8)

    def forward(self, x):
        return self.norm(x)


def run(x):
    return checkpoint(Block({argument}), x, use_reentrant=False)
"""


def test_a_key_split_from_a_literal_selects_its_part() -> None:
    assert lint_source(SPLIT_KEY.format(argument="")) == []
    [finding] = lint_source(SPLIT_KEY.format(argument='"batch_norm-relu"'))
    assert (finding.code, finding.line, finding.column) == ("CKP204", 14, 16) and "built by" not in finding.message


def test_a_split_with_keywords_is_not_known() -> None:
    """`split('-', maxsplit=1)` keeps 'b-c' whole: with the count given by keyword the parts are
    not guessed (every entry is assumed, as for any unknown key)."""
    [finding] = lint_source(SPLIT_KEY.format(argument='"batch_norm-relu"').replace('.split("-")', '.split("-", maxsplit=1)'))
    assert "built by" in finding.message
