"""A hazard is a replay that changes something: which writes are reported, in small sources."""

from __future__ import annotations

from ckptlint.engine import lint_source

TEMPLATE = """
import torch
from torch.utils.checkpoint import checkpoint


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.state = 0
        self.items = []

{methods}

    def run(self, x{parameters}):
        return checkpoint(self.forward, x{arguments}, use_reentrant=False)
"""


def _found(methods: str, parameters: str = "", arguments: str = "") -> set[tuple[str, int]]:
    source = TEMPLATE.format(methods=methods, parameters=parameters, arguments=arguments)
    return {(f.code, f.line) for f in lint_source(source)}


def test_a_toggle_is_read_before_written() -> None:
    methods = """    def forward(self, x):
        self.state = not self.state
        return x.sin()"""
    assert _found(methods) == {("CKP203", 13)}


def test_a_store_in_a_callee_is_a_hazard_where_the_caller_read_first() -> None:
    methods = """    def remember(self, x):
        self.state = x.detach()

    def forward(self, x):
        y = x + self.state
        self.remember(x)
        return y.sin()"""
    [(code, line)] = _found(methods)
    assert (code, line) == ("CKP203", 13)  # the store in the callee, reached through the caller's read


def test_a_store_in_a_callee_is_scratch_when_nothing_read_it_first() -> None:
    methods = """    def remember(self, x):
        self.state = x.detach()

    def forward(self, x):
        self.remember(x)
        return (x + self.state).sin()"""
    assert _found(methods) == set()


def test_only_the_first_store_after_the_read_is_reported() -> None:
    methods = """    def forward(self, x):
        self.state = self.state + 1
        self.state = self.state * 2
        return x.sin()"""
    assert _found(methods) == {("CKP203", 13)}


def test_a_key_that_differs_per_call_is_reported() -> None:
    methods = """    def bump(self):
        self.state += 1

    def forward(self, x):
        cache = {}
        cache[0] = x
        self.items[self.state] = x.detach()
        return x.sin()"""
    assert ("CKP203", 18) in _found(methods)


def test_a_keyword_false_at_the_call_prunes_the_guarded_write() -> None:
    methods = """    def forward(self, x, use_cache=True):
        if use_cache:
            self.items.append(x.detach())
        return x.sin()"""
    assert _found(methods, arguments=", use_cache=True") == {("CKP203", 14)}
    assert _found(methods, arguments=", use_cache=False") == set()


def test_a_name_switched_off_under_gradient_checkpointing_prunes_the_write() -> None:
    methods = """    def forward(self, x, use_cache=True):
        if use_cache:
            self.items.append(x.detach())
        return x.sin()"""
    source = TEMPLATE.format(methods=methods, parameters="", arguments="").replace(
        "def run(self, x):\n",
        "def run(self, x, use_cache=True):\n"
        "        if self.gradient_checkpointing and self.training:\n"
        "            use_cache = False\n",
    ).replace("checkpoint(self.forward, x, use_reentrant=False)", "checkpoint(self.forward, x, use_cache, use_reentrant=False)")
    assert "use_cache = False" in source and "x, use_cache, use_reentrant" in source
    assert {(f.code, f.line) for f in lint_source(source)} == set()
    negated = source.replace("if self.gradient_checkpointing and self.training:", "if self.training and not self.gradient_checkpointing:")
    assert {(f.code, f.line) for f in lint_source(negated)} == {("CKP203", 14)}


def test_a_closing_guard_excuses_an_append_once() -> None:
    methods = """    def forward(self, x):
        if self.state == 0:
            self.state = 1
            self.items.append(1)
        return x.sin()"""
    assert _found(methods) == set()
    never_closed = methods.replace("self.state = 1", "self.other = 1")
    assert _found(never_closed) == {("CKP203", 15)}
