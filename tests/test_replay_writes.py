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


def test_a_value_set_unless_already_set_is_kept_by_the_replay() -> None:
    methods = """    def forward(self, x):
        if x.sum() > 0:
            self.state = 2 * x.shape[0]
        else:
            self.state = x.shape[0] if self.state is None else self.state
        self.items = self.items or [x.shape[0]]
        return x.sin()"""
    assert _found(methods) == set()


def test_a_value_rebuilt_from_itself_in_one_arm_is_read_before_written() -> None:
    methods = """    def forward(self, x):
        if x.sum() > 0:
            self.state = x.shape[0]
        else:
            self.state = self.state + 1
        return x.sin()"""
    assert _found(methods) == {("CKP203", 16)}  # masked while the other arm counted as written before it


OVERWRITES = """
import torch
from torch.utils.checkpoint import checkpoint


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(4))

{methods}

    def run(self, x):
        return checkpoint(self.forward, x, use_reentrant=False)
"""


def _overwrites(methods: str) -> set[tuple[str, int, str]]:
    source = OVERWRITES.format(methods=methods)
    return {(f.code, f.line, f.message.split(":")[0]) for f in lint_source(source)}


def test_an_overwrite_from_the_inputs_is_scratch() -> None:
    methods = """    def forward(self, x):
        self.buf.copy_(x.detach())
        self.buf[:2].fill_(1.0)
        return (x * self.buf).sin()"""
    assert _overwrites(methods) == set()


def test_an_overwrite_that_reads_its_target_first_is_a_hazard() -> None:
    methods = """    def forward(self, x):
        self.buf.copy_(self.buf * 0.9 + x.detach())
        return (x * self.buf).sin()"""
    [(code, line, message)] = _overwrites(methods)
    assert (code, line) == ("CKP204", 12)
    assert "read before overwriting it" in message


def test_an_overwrite_of_part_of_state_read_before_is_a_hazard() -> None:
    methods = """    def forward(self, x, cache):
        rolled = torch.roll(cache.states, 1)
        cache.states[0].zero_()
        return (x + rolled).sin()"""
    assert {(c, line) for c, line, _ in _overwrites(methods)} == {("CKP204", 13)}


def test_an_overwrite_in_a_callee_is_a_hazard_where_the_caller_read_first() -> None:
    methods = """    def remember(self, x):
        self.buf.copy_(x.detach())

    def forward(self, x):
        y = x * self.buf
        self.remember(x)
        return y.sin()"""
    assert {(c, line) for c, line, _ in _overwrites(methods)} == {("CKP204", 12)}  # the callee's write


def test_an_accumulating_in_place_op_stays_a_hazard() -> None:
    methods = """    def forward(self, x):
        self.buf.add_(x.detach())
        return x.sin()"""
    assert {(c, line) for c, line, _ in _overwrites(methods)} == {("CKP204", 12)}


def test_a_read_in_one_arm_does_not_precede_a_write_in_the_other() -> None:
    methods = """    def forward(self, x, cache):
        if cache.decoding:
            rolled = torch.roll(cache.states[0], 1)
            cache.states[0].copy_(rolled + x)
        else:
            cache.states[0].copy_(x * 2)
        return x.sin()"""
    assert {(c, line) for c, line, _ in _overwrites(methods)} == {("CKP204", 14)}  # the decode arm's only


def test_a_read_in_either_arm_precedes_a_write_after_them() -> None:
    methods = """    def forward(self, x):
        if x.sum() > 0:
            y = x
        else:
            y = x * self.buf
        self.buf.copy_(y.detach())
        return y.sin()"""
    assert {(c, line) for c, line, _ in _overwrites(methods)} == {("CKP204", 16)}


def test_a_memo_filled_with_setdefault_is_no_hazard_but_growing_its_entry_is() -> None:
    methods = """    def forward(self, x):
        name = self.names.setdefault(x.shape[0], str(x.shape[0]))
        self.names.setdefault(name, []).append(x.shape[0])
        return x.sin()"""
    source = TEMPLATE.format(methods=methods, parameters="", arguments="").replace("self.items = []", "self.names = {}")
    assert {(f.code, f.line) for f in lint_source(source)} == {("CKP203", 14)}


def test_an_item_overwrite_of_a_tensor_follows_the_overwrite_policy() -> None:
    methods = """    def forward(self, x):
        self.buf[0] = 1.0
        y = x * 3
        x[x > 0] = 0
        return y"""
    found = _overwrites(methods)
    assert {(c, line) for c, line, _ in found} == {("CKP204", 14)}  # the input read first; not the buffer's constant
    assert "read before overwriting it" in found.pop()[2]


def test_state_set_after_a_guard_that_returns_it_when_set_is_set_once() -> None:
    methods = """    def load(self):
        if self.state is not None:
            return self.state
        if self.items:
            self.state = 1
        else:
            self.state = 2
        return self.state

    def forward(self, x):
        return x * self.load()"""
    assert _found(methods) == set()


def test_a_guard_that_returns_while_unset_leaves_later_stores_to_the_policy() -> None:
    methods = """    def forward(self, x):
        if self.state is None:
            self.state = x.detach()
            return x.sin()
        y = x + self.state
        self.state = x.detach()
        return y.sin()"""
    assert _found(methods) == {("CKP203", 14)}  # the first store after the test's read


def test_an_item_converted_into_itself_does_not_hide_an_earlier_read() -> None:
    methods = """    def forward(self, x, cache):
        if cache.states[0].device != x.device:
            cache.states[0] = cache.states[0].to(x.device)
        rolled = cache.states[0].roll(1)
        cache.states[0].zero_()
        return (x + rolled).sin()"""
    assert {(c, line) for c, line, _ in _overwrites(methods)} == {("CKP204", 15)}  # transformers' Mamba cache
