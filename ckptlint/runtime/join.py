"""Join static findings with what the companion observed, call site by call site.

CKP101/CKP102/CKP301/CKP302/CKP306/CKP403/CKP405 match a record by the call site (a wrapper's by where it was
built, a library helper's by the line that called it); CKP303 by where the DistributedDataParallel holding the region's parameters was
built; CKP304 by the differentiating call (`autograd.grad`, `backward(inputs=...)`, a
`torch.func` transform) a checkpoint refused; CKP2xx match when the finding lies in code the plain replay ran. A finding is then
`confirmed` (a matching divergence was observed), `not triggered as driven` (its code ran,
nothing it predicts diverged) or `not exercised` (no observed call ran its code).
Divergences that no finding explains are listed as missed by static analysis. Under
`--cost`, the static cost hints of the calls the lint found (`ckptlint calls`) join the measured
records the way CKP101 does, by the call site (`static_hints`).
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from ckptlint.rules import ALL_RULES
from ckptlint.runtime.differentiation import DIFFERENTIATION_CATEGORY
from ckptlint.runtime.gradflow import PARAMETER_GRAD_MISSING
from ckptlint.runtime.report import Record

CONFIRMED = "confirmed"
NOT_TRIGGERED = "not triggered as driven"
NOT_EXERCISED = "not exercised"
NEEDS_GPU = "not confirmable without a GPU"
REGION_ONLY = "region changed, line not shown"  # the region diverged as the code predicts, not shown at this line
# what a replay from identical state on CPU cannot show: CKP205's CUDA RNG, CKP504's selections and
# accumulations, whose recompute differs only through non-deterministic (CUDA) kernels upstream
CPU_DETERMINISTIC = frozenset({"CKP205", "CKP504"})

_GRADIENTS = {"output", "input-grad", "parameter-grad"}
# reported at the checkpoint call (or the wrapper: CKP403/CKP405 at `checkpoint_wrapper(block)`;
# CKP503 at its `context_fn` value, on the call's line in the usual spelling)
AT_THE_CALL = frozenset({"CKP101", "CKP102", "CKP301", "CKP302", "CKP306", "CKP403", "CKP405", "CKP503", "CKP505"})
AT_THE_DDP = frozenset({"CKP303"})  # reported at the `DistributedDataParallel(...)` call
AT_THE_DIFFERENTIATING_CALL = frozenset({"CKP304"})  # reported at `torch.autograd.grad(...)`, `.backward(inputs=...)`, `torch.func.grad(f)`


def _categories(record: Record) -> set[str]:
    """Reason categories, with RNG streams told apart: rng-torch for torch's global generators
    (those checkpoint preserves), rng-python for every stream it does not (Python, NumPy,
    generator objects, a private `torch.Generator` included: "region.gen (torch Generator)")."""
    found = set()
    for reason in record.reasons:
        category = reason["category"]
        if category == "rng":
            name = reason["name"]
            category = "rng-torch" if name.startswith("torch ") and name.endswith(" generator") else "rng-python"
        elif category == PARAMETER_GRAD_MISSING:
            category = f"{category}:{reason.get('cause')}"  # gradflow.CONFIRMS_*: which rule it confirms
        found.add(category)
    return found


# which observed divergences confirm each code: each rule says so (Rule.confirmed_by)
CONFIRMS = {rule.code: set(rule.confirmed_by) for rule in ALL_RULES if rule.confirmed_by}


def _explained_by() -> dict[str, set[str]]:
    """Which codes could have predicted each observed divergence: those it confirms; and any
    hazard that changes what the replay computes can show as changed outputs or gradients,
    or as an error. CKP101 (the reentrant default) can only fail, never change a value."""
    explained: dict[str, set[str]] = {}
    for code, categories in CONFIRMS.items():
        for category in categories | _GRADIENTS | {"error"}:
            explained.setdefault(category, set()).add(code)
    explained["error"].add("CKP101")
    return explained


EXPLAINED_BY = _explained_by()


def _same_place(site: dict[str, Any] | None, path: str, line: int) -> bool:
    return site is not None and site.get("path") == path and site.get("line") == line


def _at_the_call(record: Record, path: str, line: int) -> bool:
    """The record's call site, where its wrapper was built, or a line that called the site's
    frame: a library helper's site (timm's `checkpoint_seq`, a `GradientCheckpointingLayer`'s
    forward) is called from the model's own line, where the static finding is."""
    return (
        _same_place(record.site, path, line)
        or _same_place(record.constructed_at, path, line)
        or any(_same_place(caller, path, line) for caller in record.callers)
    )


def _differentiated_at(record: Record) -> list[dict[str, Any]]:
    """Where the user differentiated this record's outputs in a way its checkpoint refused."""
    return [r["differentiated_at"] for r in record.reasons if r["category"] == DIFFERENTIATION_CATEGORY and r.get("differentiated_at")]


def _ran(record: Record, path: str, line: int) -> bool:
    region = record.region
    if region.get("path") == path and region.get("first_line") is not None:
        if region["first_line"] <= line <= region["last_line"]:
            return True
    return any(file == path and first <= line <= last for file, first, last in record.executed)


def _backticked_names(message: str) -> set[str]:
    """The last dotted part of each name a message quotes: `self.cache` -> cache, `.append()` -> append."""
    quoted = message.split("`")[1::2]
    return {text.rstrip("()").rpartition(".")[2] for text in quoted if text.rstrip("()")}


def _buffer_shown(record: Record, finding: dict[str, Any], path: str, line: int) -> bool:
    """A buffer the replay changed belongs to the module this line calls (`self.norm(x)`), whose
    own forward holds the line (`self.usage.mul_()`), or, at the checkpoint call, to a module no
    project line calls: the region itself, or a child a torch container runs (`checkpoint(stem, x)`
    with `stem = nn.Sequential(conv, bn)`)."""
    for reason in record.reasons:
        if reason["category"] != "buffer":
            continue
        owner = reason["name"].rpartition(".")[0]
        spans = _called_at(record, owner)
        if _same_place(record.site, path, line) and not any(first == last for _, first, last in spans):
            return True
        if any(file == path and first <= line <= last for file, first, last in spans):
            return True
    return False


def _called_at(record: Record, owner: str) -> list[tuple[str, int, int]]:
    """Where the project reaches a module: its own spans (the lines that call it, its forward), or,
    when no project line calls it (a BatchNorm a torch `Sequential` or a library `ConvModule` runs),
    the lines that call its nearest ancestor the project does call (`self.conv1(x)`, where the static
    finding on that BatchNorm is)."""
    spans = list(record.module_lines.get(owner, ()))
    name = owner
    while not any(first == last for _, first, last in spans) and "." in name:
        name = name.rpartition(".")[0]
        called = [span for span in record.module_lines.get(name, ()) if span[1] == span[2]]
        if called:
            return spans + called
    return spans


def _state_shown(record: Record, finding: dict[str, Any], path: str, line: int) -> bool:
    """A container, attribute, global or cell the replay changed is the one the finding names; a
    container handed in as an argument (`args[1]`) is named by the parameter the record does not know."""
    names = _backticked_names(finding.get("message", ""))
    return any(
        reason["category"] in ("container", "attribute", "global", "closure")
        and (reason["name"].rpartition(".")[2] in names or reason["name"].startswith(("args[", "kwargs[")))
        for reason in record.reasons
    )


# findings that name one piece of state: confirmed only when that piece changed (REGION_ONLY otherwise)
LINE_LEVEL = {"CKP204": _buffer_shown, "CKP202": _state_shown, "CKP203": _state_shown}


def join(records: Iterable[Record], findings: Iterable[dict[str, Any]], base: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(each finding with its status and the records it matched, divergences nothing predicted)."""
    records = list(records)
    joined: list[dict[str, Any]] = []
    explained: dict[int, set[str]] = {id(record): set() for record in records}
    for finding in findings:
        code = finding["code"]
        if code == "CKP000":
            continue
        path = os.path.normpath(os.path.join(base, finding["path"]))
        line = finding["line"]
        if code in AT_THE_CALL:
            matched = [r for r in records if _at_the_call(r, path, line)]
        elif code in AT_THE_DDP:
            matched = [r for r in records if r.ddp is not None and _same_place(r.ddp.get("constructed_at"), path, line)]
        elif code in AT_THE_DIFFERENTIATING_CALL:
            matched = [r for r in records if any(_same_place(s, path, line) for s in _differentiated_at(r))]
        else:  # or at the call: a container that is itself the region (`checkpoint(stem, x)`) has no project line inside
            matched = [r for r in records if _ran(r, path, line) or _same_place(r.site, path, line)]
        status = NOT_EXERCISED
        if matched:
            status = NOT_TRIGGERED
            if code == "CKP101":
                if any(r.flags.get("use_reentrant_defaulted") for r in matched):
                    status = CONFIRMED
            elif code in CPU_DETERMINISTIC and all(r.device == "cpu" for r in matched):
                status = NEEDS_GPU
            elif any(_categories(r) & CONFIRMS.get(code, set()) for r in matched):
                shown = LINE_LEVEL.get(code)
                status = CONFIRMED if shown is None or any(shown(r, finding, path, line) for r in matched) else REGION_ONLY
            for record in matched:
                explained[id(record)].add(code)
        joined.append(
            {
                **{key: finding[key] for key in ("path", "line", "column", "code", "message") if key in finding},
                "status": status,
                "sites": [f"{r.site['path']}:{r.site['line']}" for r in matched],
            }
        )
    missed = []
    for record in records:
        categories = _categories(record)
        for category in sorted(categories):
            codes = EXPLAINED_BY.get(category, set())
            if category.startswith(PARAMETER_GRAD_MISSING) and "error" in categories:
                codes = codes | EXPLAINED_BY["error"]  # the checkpointed replay failed: no gradient came back from it
            if not (codes & explained[id(record)]):
                missed.append({"site": record.site, "category": category, "region": record.region.get("name")})
    return joined, missed


def static_hints(record: Record, calls: Iterable[dict[str, Any]], base: str) -> list[dict[str, str]]:
    """The static cost hints (`ckptlint calls`, analysis/regions/cost_hints.py) of the calls at the
    record's site, matched as CKP101 is (the call site, where its wrapper was built, or a line
    that called the site's frame); each kind once."""
    found: dict[str, dict[str, str]] = {}
    for call in calls:
        path = os.path.normpath(os.path.join(base, call["path"]))
        if _at_the_call(record, path, call["line"]):
            for hint in call.get("hints", ()):
                found.setdefault(hint["kind"], hint)
    return list(found.values())


def render(joined: list[dict[str, Any]], missed: list[dict[str, Any]]) -> str:
    from ckptlint.project import display_path

    lines = []
    for item in joined:
        lines.append(f"{item['path']}:{item['line']}:{item.get('column', 1)}: {item['code']} {item['status']}")
    for item in missed:
        site = item["site"]
        lines.append(
            f"{display_path(site['path'])}:{site['line']}:{site['column']}: missed by static analysis: "
            f"{item['category']} diverges in {item['region']}"
        )
    return "\n".join(lines)
