"""Per-call-site records of what the companion observed, and how to print them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptlint.project import display_path
from ckptlint.runtime.aspects import aspects, summary

if TYPE_CHECKING:
    from ckptlint.runtime.witness import Witness


NOT_REPLAYED = "not replayed"  # the replays would have changed the user's run (ddp.replay_would_change_run)
# a call made inside the forward or the recompute of an enclosing checkpoint: replayed there,
# but what its replays show under the outer's saved-tensor hooks or in the middle of a backward
# pass is not the user's result, which the enclosing call's record judges as a whole
NESTED = "nested"
FAILING = ("diverges", "error")  # verdicts that mean checkpointing changes the result
# how bad each verdict is: a site sampled twice, or seen by several ranks, takes its worst
SEVERITY = {NOT_REPLAYED: 0, NESTED: 0, "equivalent": 0, "diverges": 1, "error": 2}


@dataclass
class Record:
    site: dict[str, Any]
    region: dict[str, Any]
    api: str
    flags: dict[str, Any]
    device: str
    verdict: str  # "equivalent", "diverges", "error" or "not replayed"
    reasons: list[dict[str, Any]] = field(default_factory=list)
    constructed_at: dict[str, Any] | None = None
    callers: list[dict[str, Any]] = field(default_factory=list)  # the user frames that called the site, innermost first
    test: str | None = None  # the pytest node id that made the call, under the pytest plugin
    cost: dict[str, Any] | None = None  # with --cost: activation bytes freed, FLOPs recomputed (cost.py)
    executed: set[tuple[str, int, int]] = field(default_factory=set, repr=False)  # code replay A ran
    # the code of each region module replay A ran: the project lines that called it and its own forward,
    # by the name its state has in the reasons (`region.norm`): the join's line-level truth
    module_lines: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict, repr=False)
    aspects: list[str] = field(default_factory=list)  # what differs: values, gradients, rng-stream, state, side-effects, error
    summary: str = ""  # one sentence: what differs and what is equal
    witness: dict[str, Any] | None = None  # the real recompute against its forward (audit(witness=True))
    inputs: list[dict[str, Any]] = field(default_factory=list)  # tensors reaching the region (gradflow.ReachedTensor)
    ddp: dict[str, Any] | None = None  # the DistributedDataParallel holding the region's parameters (ddp.py)
    # under a process group: the communication ops the plain forward and the recompute issued (communication.py)
    communication: dict[str, Any] | None = None
    rank: int | None = None  # the rank that observed it, under a process group of two or more
    ranks: dict[str, str] | None = None  # merged over ranks: each rank's verdict (rank_reports.py)
    compiled: dict[str, Any] | None = None  # replay C, with --compiled (compiled.CompiledReplay)
    sac: dict[str, Any] | None = None  # under a selective-checkpoint context_fn: ops saved and recomputed (sac.py)

    def watch(self, witness: Witness) -> Witness:
        """Follow `witness`: its result joins this record; a divergence makes the call diverge."""

        def update(watched: Witness) -> None:
            self.witness = watched.to_dict()
            if watched.divergence is not None and not any(r["category"] == "recompute" for r in self.reasons):
                self.reasons.append(watched.divergence.to_reason())
                self.verdict = "diverges"
                self.aspects = aspects(self.reasons)
                self.summary = summary(self.verdict, self.reasons)

        witness.on_update = update
        update(witness)
        return witness

    def add_reason(self, reason: dict[str, Any], verdict: str) -> None:
        """A reason learned after the probe (the user's own backward failed)."""
        self.reasons.append(reason)
        if verdict == "error" or self.verdict == "equivalent":
            self.verdict = verdict
        self.aspects = aspects(self.reasons)
        self.summary = summary(self.verdict, self.reasons)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "site": self.site,
            "region": self.region,
            "api": self.api,
            "flags": self.flags,
            "device": self.device,
            "verdict": self.verdict,
            "reasons": self.reasons,
            "aspects": self.aspects,
            "summary": self.summary,
            "inputs": self.inputs,
        }
        if self.constructed_at is not None:
            data["constructed_at"] = self.constructed_at
        if self.callers:
            data["callers"] = self.callers
        if self.test is not None:
            data["test"] = self.test
        if self.cost is not None:
            data["cost"] = self.cost
        if self.witness is not None:
            data["witness"] = self.witness
        for name in ("ddp", "communication", "rank", "ranks"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        for name in ("compiled", "sac"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data

    def describe(self) -> str:
        site = self.site
        mode = "reentrant" if self.flags.get("use_reentrant") else "non-reentrant"
        if self.flags.get("use_reentrant_defaulted"):
            mode += " (use_reentrant not passed)"
        if self.flags.get("preserve_rng_state") is False:
            mode += ", preserve_rng_state=False"
        region = self.region
        where = f" {display_path(region['path'])}:{region['first_line']}-{region['last_line']}" if region.get("path") else ""
        lines = [
            f"{display_path(site['path'])}:{site['line']}:{site['column']}: {self.verdict} "
            f"[{self.api}, {mode}, {self.device}] region {region['name']}{where}"
        ]
        if self.ranks:
            lines[0] += " on ranks " + ", ".join(f"{rank}: {verdict}" for rank, verdict in sorted(self.ranks.items(), key=lambda item: int(item[0])))
        elif self.rank is not None:
            lines[0] += f" on rank {self.rank}"
        if self.summary and self.verdict != "equivalent":
            lines.append(f"    {self.summary}")
        for reason in self.reasons:
            text = f"{reason['category']} {reason['name']}"
            if reason.get("max_abs") is not None:
                text += f": max abs diff {reason['max_abs']:.3g}"
                if reason.get("max_rel") is not None:
                    text += f", max rel diff {reason['max_rel']:.3g}"
            if reason.get("detail"):
                text += f" ({reason['detail']})"
            if reason.get("ranks") is not None and self.ranks and len(reason["ranks"]) < len(self.ranks):
                text += f" [rank {', '.join(map(str, reason['ranks']))}]"
            lines.append(f"    - {text}")
            lines.extend(f"        forward ran it at {frame}" for frame in reason.get("stack", ())[:3])
        if self.compiled is not None:
            lines.append(f"    - {describe_compiled(self.compiled)}")
        if self.sac is not None:
            lines.append(f"    - selective checkpoint: {describe_sac(self.sac)}")
        if self.witness is not None and self.witness["status"] != "diverges":
            lines.append(f"    - witness: the real recompute is {self.witness['status']} ({self.witness['recomputed_ops']} ops compared)")
        return "\n".join(lines)


def describe_sac(listing: dict[str, dict[str, int]]) -> str:
    """`saved aten.mm.default x2; recomputed aten.relu.default x1` (sac.SacListing)."""
    parts = []
    for kind in ("saved", "recomputed"):
        ops = listing.get(kind, {})
        parts.append(f"{kind} " + (", ".join(f"{name} x{count}" for name, count in ops.items()) if ops else "nothing"))
    return "; ".join(parts)


def describe_compiled(compiled: dict[str, Any]) -> str:
    """`compiled (aot_eager): rejected by fullgraph compile: HOP: Unsafe side effect; 1 graph break; ...`"""
    fullgraph = compiled["fullgraph"]
    text = f"compiled ({compiled['backend']}): " + ("fullgraph compile ok" if fullgraph == "ok" else f"{fullgraph.replace('rejected:', 'rejected by fullgraph compile:', 1)}; {compiled['graph_breaks']} graph break(s) with fullgraph=False")
    if compiled.get("error"):
        return text + f"; the compiled replay raised: {compiled['error'].splitlines()[0]}"
    differing = compiled["diverges_from_eager"]
    text += "; " + (f"differs from eager in {', '.join(differing)}" if differing else "same as eager")
    wrong = compiled["diverges_from_plain"]
    return text + "; " + (f"differs from no checkpointing in {', '.join(wrong)}" if wrong else "same as no checkpointing")


class Report:
    """What `audit()` yields and `ckptlint confirm` prints."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.notes: list[str] = [
            "calls inside torch.compile'd code are not observed (the companion runs eager code only)"
        ]

    def add(self, record: Record) -> None:
        self.records.append(record)

    @property
    def verdicts(self) -> dict[str, str]:
        """`path:line` of each observed call site -> its verdict (the worst, if sampled twice)."""
        found: dict[str, str] = {}
        for record in self.records:
            key = f"{display_path(record.site['path'])}:{record.site['line']}"
            if SEVERITY[record.verdict] >= SEVERITY[found.get(key, "equivalent")]:
                found[key] = record.verdict
        return found

    def diverging(self) -> list[Record]:
        return [r for r in self.records if r.verdict in FAILING]

    def assert_equivalent(self) -> None:
        bad = self.diverging()
        if bad:
            raise AssertionError(
                "checkpointing changes the result at:\n" + "\n".join(record.describe() for record in bad)
            )

    def to_dict(self, findings: list[dict[str, Any]] | None = None, missed: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {"schema_version": 1, "records": [r.to_dict() for r in self.records], "notes": self.notes}
        if findings is not None:
            data["findings"] = findings
            data["missed"] = missed or []
        return data

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(**kwargs), indent=2, default=str)

    def render(self, records: list[Record] | None = None) -> str:
        """The records (this report's, or those merged over ranks) and a count by verdict."""
        records = self.records if records is None else records
        if not records:
            return "ckptlint confirm: no checkpoint call was observed"
        counts = {verdict: sum(r.verdict == verdict for r in records) for verdict in ("equivalent", "diverges", "error", NOT_REPLAYED, NESTED)}
        lines = [record.describe() for record in records]
        lines.append(
            f"{len(records)} checkpoint call(s) observed: {counts['equivalent']} equivalent, "
            f"{counts['diverges']} diverging, {counts['error']} error"
            + (f", {counts[NOT_REPLAYED]} not replayed" if counts[NOT_REPLAYED] else "")
            + (f", {counts[NESTED]} nested in another's recompute (judged there)" if counts[NESTED] else "")
        )
        return "\n".join(lines)
