"""Join the cached runtime records with a static pass and compute the corpus figures.

Matching is runtime/join.py's (which codes explain which reason categories, when a finding's
code counts as run), applied per model and mode to the findings in the files that model's
records touched. Everything else here is counting; definitions are in real_models.py.
"""

from __future__ import annotations

import collections
import json
import os
import re
from typing import Any, Iterable

from realmodels.pins import DEFAULT_MODE
from realmodels.runtime_pass import cached_results

CATEGORY_GROUP = {"output": "output", "input-grad": "grads", "parameter-grad": "grads", "buffer": "buffers",
                  "rng-torch": "rng", "rng-python": "rng", "container": "side effects", "attribute": "side effects",
                  "global": "side effects", "closure": "side effects", "error": "error", "recompute": "recompute"}  # fmt: skip
STATUS_RANK = {"not exercised": 0, "not triggered as driven": 1, "region changed, line not shown": 2, "not confirmable without a GPU": 3, "confirmed": 4}
REGION_ONLY = "region changed, line not shown"  # runtime/join.py: the region diverged as predicted, not at this line
NOT_RUN = "code not run by this configuration (line never ran)"
NOT_IN_REGION = "code not run in a region the finding names by this configuration (ran, but never inside a region replayed at its call sites)"
NEEDS_GPU = "needs a GPU (CKP205 or CKP504, or a CKP206 branch that also tests for CUDA, on CPU)"
NO_TENSOR = ("the tensor it names did not reach the region in this configuration (CKP302: the companion saw no tensor that "
             "requires grad reach the call other than positionally; the configuration leaves it None)")
OTHER_CLASS = ("the configuration built another class than the finding is stated for (its message says "
               "`for X built by Y`: the builder's key is not known statically, every class it can build is assumed)")
_STATED_FOR = re.compile(r"\(for `[^`]+` built by `[^`]+`\)")
# error reasons that say the companion could not replay the call, not that checkpointing changed
# anything: its plain replay failed (e.g. a checkpoint call nested in another one, probed during
# the outer call's recompute, trips torch's saved-tensor check) or it could not snapshot
UNJUDGED_REASONS = ("replay without checkpointing", "ckptlint")
# Strict truth: a finding is true when the replay confirmed it; false when its code ran and nothing
# it predicts differed, or when the configuration built another class or left the tensor None (a
# finding about what the configuration did not build is false for that model). Findings whose
# line never ran (in a replayed region) or that need a GPU are unverified: counted and listed apart.
UNVERIFIED = (NOT_RUN, NOT_IN_REGION, NEEDS_GPU)
FALSE_FOR_CONFIGURATION = (OTHER_CLASS, NO_TENSOR)
EXPLANATIONS = UNVERIFIED + FALSE_FOR_CONFIGURATION

_real: dict[str, str] = {}


def real(path: str) -> str:
    if path not in _real:
        _real[path] = os.path.realpath(path)
    return _real[path]


def _records(results: Iterable[dict[str, Any]]) -> list[tuple[str, str, str, Any]]:
    """(library, model, mode, Record) for every observed call, paths made real."""
    from ckptlint.runtime.report import Record

    found = []
    for result in results:
        for mode, outcome in result["modes"].items():
            for data in outcome.get("records", ()):
                site = {**data["site"], "path": real(data["site"]["path"])}
                region = dict(data["region"])
                if region.get("path"):
                    region["path"] = real(region["path"])
                constructed = data.get("constructed_at")
                if constructed:
                    constructed = {**constructed, "path": real(constructed["path"])}
                callers = [{**caller, "path": real(caller["path"])} for caller in data.get("callers", ())]
                record = Record(site=site, region=region, api=data["api"], flags=data["flags"], device=data["device"],
                                verdict=data["verdict"], reasons=data["reasons"], constructed_at=constructed, callers=callers,
                                inputs=data.get("inputs", []))  # fmt: skip
                record.executed = {(real(file), first, last) for file, first, last in data.get("executed", ())}
                record.module_lines = {name: [(real(file), first, last) for file, first, last in spans] for name, spans in data.get("module_lines", {}).items()}
                found.append((result["library"], result["name"], mode, record))
    return found


def _touched(records: list[Any]) -> set[str]:
    files = set()
    for record in records:
        files.add(record.site["path"])
        if record.region.get("path"):
            files.add(record.region["path"])
        if record.constructed_at:
            files.add(record.constructed_at["path"])
        files.update(file for file, _, _ in record.executed)
    return files


def _finding_key(finding: dict[str, Any]) -> tuple[str, int, int, str]:
    return (finding["path"], finding["line"], finding["column"], finding["code"])


def _model_summary(library: str, enumerated: dict[str, Any] | None, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """How many models were tried, ran, failed (by stage: reason), and the architectures run."""
    failed: collections.Counter[str] = collections.Counter()
    run, architectures = [], set()
    for entry in (enumerated or {}).get("models", ()):
        if "skip" in entry:
            failed["skipped: " + entry["skip"].split(":")[0]] += 1
    for _, result in sorted(results.items()):
        outcomes = list(result["modes"].values())
        if any(outcome.get("records") for outcome in outcomes):
            run.append(result["name"])
            architectures.add(result.get("arch") or result["name"])
            continue
        worst = next((o for o in outcomes if o["status"] not in ("ok",)), outcomes[0])
        failed[f"{worst['status']}: {worst.get('reason', '')}".rstrip(": ")] += 1
    tried = len(results) + sum(1 for e in (enumerated or {}).get("models", ()) if "skip" in e)
    return {"tried": tried, "run": len(run), "architectures": len(architectures), "failed": dict(failed.most_common())}


def build(out_dir: str, libraries: dict[str, dict[str, Any]], static: dict[str, Any]) -> dict[str, Any]:
    from ckptlint.runtime.join import _categories, join

    results = cached_results(os.path.join(out_dir, "runtime.jsonl"))
    by_library: dict[str, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for model_key, result in results.items():
        by_library[result["library"]][model_key] = result
    # each runtime mode is joined with the static pass of that mode (static_pass.PASSES); an
    # older static JSON has the default pass only
    passes = static.get("passes") or {"default": static["libraries"]}
    by_pass: dict[str, list[dict[str, Any]]] = {}
    for name, linted in passes.items():
        by_pass[name] = [f for lib in linted.values() for f in lib["findings"] if f["code"] != "CKP000"]
        for finding in by_pass[name]:
            finding["path"] = real(finding["path"])
            finding["pass"] = name
    findings_by_file: dict[str, dict[str, list[dict[str, Any]]]] = {name: collections.defaultdict(list) for name in by_pass}
    for name, found in by_pass.items():
        for finding in found:
            findings_by_file[name][finding["path"]].append(finding)
    findings: list[dict[str, Any]] = []  # each distinct finding once, the default pass's first
    seen_keys: set[tuple[str, int, int, str]] = set()
    for name in sorted(by_pass, key=lambda n: n != "default"):
        for finding in by_pass[name]:
            if _finding_key(finding) not in seen_keys:
                seen_keys.add(_finding_key(finding))
                findings.append(finding)

    def pass_of(library: str, mode: str) -> str:
        """The static pass a runtime mode is judged by: the default one for the library's default mode."""
        name = "default" if mode == DEFAULT_MODE.get(library) else "reentrant"
        return name if name in by_pass else "default"
    library_of_dir = {real(meta["dir"]) + os.sep: name for name, meta in libraries.items()}

    def library_of(path: str) -> str:
        return next((name for prefix, name in library_of_dir.items() if path.startswith(prefix)), "other")

    coverage: dict[str, set[int]] = collections.defaultdict(set)
    model_coverage: dict[tuple[str, str], dict[str, set[int]]] = {}
    for result in results.values():
        ran = model_coverage.setdefault((result["library"], result["name"]), collections.defaultdict(set))
        for file, lines in result.get("coverage", {}).items():
            coverage[real(file)].update(lines)
            ran[real(file)].update(lines)

    records = _records(results.values())
    groups: dict[tuple[str, str, str], list[Any]] = collections.defaultdict(list)
    for library, model, mode, record in records:
        groups[(library, model, mode)].append(record)

    status: dict[tuple[str, int, int, str], str] = {}
    units: dict[tuple[str, int, str, str], dict[str, Any]] = {}
    unjudged: dict[tuple[str, int, str], dict[str, Any]] = {}
    for (library, model, mode), group in groups.items():
        for record in [r for r in group if _unjudged(r)]:
            item = unjudged.setdefault((record.site["path"], record.site["line"], record.region.get("name") or "?"),
                                       {"library": library, "site": f"{record.site['path']}:{record.site['line']}",
                                        "region": record.region.get("name") or "?", "models": [], "detail": _first_detail(record, "error")})  # fmt: skip
            item["models"].append(f"{model} ({mode})")
        # every record joins (CKP101/102 match a call by its flags, whatever its replay did);
        # only the judged ones count as divergences
        ran = model_coverage.get((library, model), {})
        in_pass = findings_by_file[pass_of(library, mode)]
        relevant = [f for file in _touched(group) for f in in_pass.get(file, ()) if _names_a_site_of(f, group, ran)]
        joined, missed = join(group, relevant, "/")
        group = [r for r in group if not _unjudged(r)]
        for finding, item in zip(relevant, joined):
            key = _finding_key(finding)
            if STATUS_RANK[item["status"]] > STATUS_RANK.get(status.get(key, "not exercised"), 0):
                status[key] = item["status"]
        unexplained = {(id(m["site"]), m["category"]) for m in missed}
        for record in group:
            for category in sorted(_categories(record)):
                unit_key = (record.site["path"], record.site["line"], record.region.get("name") or "?", category)
                unit = units.setdefault(unit_key, {"library": library, "site": f"{record.site['path']}:{record.site['line']}",
                                                   "region": unit_key[2], "category": category, "group": CATEGORY_GROUP.get(category, category),
                                                   "models": [], "explained": False, "detail": _first_detail(record, category)})  # fmt: skip
                unit["models"].append(f"{model} ({mode})")
                unit["default_mode"] = unit.get("default_mode", False) or mode == DEFAULT_MODE.get(library)
                if (id(record.site), category) not in unexplained:
                    unit["explained"] = True

    exercised_sites = {(r.site["path"], r.site["line"]) for _, _, _, r in records}
    exercised_sites |= {(r.constructed_at["path"], r.constructed_at["line"]) for _, _, _, r in records if r.constructed_at}

    def site_ran(path: str, line: int) -> bool:
        return (path, line) in exercised_sites or line in coverage.get(path, ())

    predicted_failures: set[tuple[str, int, int, str]] = set()  # findings whose prediction a broken step confirms
    failures = _one_mode_failures(results.values())
    for failure in failures:  # the step itself broke in one mode: a divergence with no record to join
        ran = model_coverage.get((failure["library"], failure["model"]), {})
        predicting = _failure_predicted_by(failure["error"], findings_by_file[pass_of(failure["library"], failure["mode"])], ran)
        failure["explained"] = bool(predicting)
        predicted_failures.update(predicting)
        unit = {"library": failure["library"], "site": f"(the step of {failure['model']})", "region": failure["model"], "category": "step-failure",
                "group": "step failures", "models": [f"{failure['model']} ({failure['mode']})"], "explained": failure["explained"],
                "default_mode": failure["mode"] == DEFAULT_MODE.get(failure["library"]), "detail": failure["error"][:240]}  # fmt: skip
        units[(unit["site"], 0, failure["model"], failure["mode"])] = unit

    judged = []
    for finding in findings:
        key = _finding_key(finding)
        joined_status = status.get(key, "not exercised")
        sites = [(real(s["path"]), s["line"]) for s in finding.get("checkpoint_sites", ())]
        if finding["code"] in ("CKP101", "CKP102") or not sites:
            sites.append((finding["path"], finding["line"]))
        if joined_status == "not exercised" and not any(site_ran(path, line) for path, line in sites):
            continue  # not on an exercised call site
        if joined_status == "confirmed" or key in predicted_failures:
            verdict, why = "confirmed", ""
        elif joined_status == REGION_ONLY:
            verdict, why = "region only", REGION_ONLY
        elif joined_status == "not confirmable without a GPU" or (finding["code"] == "CKP206" and _tests_cuda(finding)):
            verdict, why = "unverified", NEEDS_GPU
        elif finding["code"] == "CKP302" and _no_tensor_reached(finding, records):
            verdict, why = "other configuration", NO_TENSOR
        elif finding["line"] not in coverage.get(finding["path"], ()) and finding["code"] not in ("CKP101", "CKP102"):
            verdict, why = "unverified", NOT_RUN
        elif joined_status == "not exercised":
            verdict, why = "unverified", NOT_IN_REGION
        elif _STATED_FOR.search(finding.get("summary") or finding["message"]):
            verdict, why = "other configuration", OTHER_CLASS
        else:
            verdict, why = "contradicted", "ran, no divergence"
        judged.append({"library": library_of(finding["path"]), "code": finding["code"], "path": finding["path"], "line": finding["line"],
                       "column": finding["column"], "message": finding["message"], "joined": joined_status, "verdict": verdict, "why": why,
                       "pass": finding["pass"]})  # fmt: skip

    summary = {}
    for library in sorted(set(libraries) | set(by_library)):
        summary[library] = _figures(
            _model_summary(library, _enumerated(out_dir, library), by_library.get(library, {})),
            {site for lib, _, _, r in records if lib == library for site in [(r.site["path"], r.site["line"])]},
            [u for u in units.values() if u["library"] == library],
            [j for j in judged if j["library"] == library],
            len({_region_key(r) for lib, _, _, r in records if lib == library}),
        )
    models_all = {k: sum(s["models"][k] for s in summary.values()) for k in ("tried", "run", "architectures")}
    failed_all: collections.Counter[str] = collections.Counter()
    for s in summary.values():
        failed_all.update(s["models"]["failed"])
    summary["overall"] = _figures({**models_all, "failed": dict(failed_all.most_common())}, exercised_sites_only(records),
                                  list(units.values()), judged, len({_region_key(r) for _, _, _, r in records}))  # fmt: skip
    return {
        "libraries": libraries,
        "static": {"ckptlint_src": static.get("ckptlint_src"), "commit": static.get("commit"),
                   "findings": len(findings), "by_library": {k: len(v["findings"]) for k, v in static["libraries"].items()},
                   "by_pass": {name: len(found) for name, found in by_pass.items()}},  # fmt: skip
        "summary": summary,
        "misses": sorted((u for u in units.values() if not u["explained"] and u["default_mode"]), key=lambda u: (u["library"], u["site"], u["category"])),
        "opt_in_misses": sorted((u for u in units.values() if not u["explained"] and not u["default_mode"]), key=lambda u: (u["library"], u["site"], u["category"])),
        "contradicted": sorted((j for j in judged if j["verdict"] == "contradicted"), key=lambda j: (j["path"], j["line"], j["code"])),
        "other_configuration": sorted((j for j in judged if j["verdict"] == "other configuration"), key=lambda j: (j["path"], j["line"], j["code"])),
        "unverified": sorted((j for j in judged if j["verdict"] == "unverified"), key=lambda j: (j["why"], j["path"], j["line"], j["code"])),
        "region_only": sorted((j for j in judged if j["verdict"] == "region only"), key=lambda j: (j["path"], j["line"], j["code"])),
        "confirmed": sorted((j for j in judged if j["verdict"] == "confirmed"), key=lambda j: (j["path"], j["line"], j["code"])),
        "divergences": sorted(units.values(), key=lambda u: (u["library"], u["site"], u["category"])),
        "one_mode_failures": failures,
        "unjudged": sorted(unjudged.values(), key=lambda u: (u["library"], u["site"])),
    }


# what a step broken by checkpointing says, and the codes that predict it (their message names the keyword, for the first)
_FAILURE_CODES = (
    ("Unexpected keyword arguments: ", ("CKP302",)),
    ("returned no tensor that requires grad", ("CKP301", "CKP306")),
    ("element 0 of tensors does not require grad", ("CKP301", "CKP306")),
    ("backward through the graph a second time", ("CKP302", "CKP303")),
)


def _failure_predicted_by(error: str, findings_by_file: dict[str, list[dict[str, Any]]], ran: dict[str, set[int]]) -> set[tuple[str, int, int, str]]:
    """The findings of the mode's pass, on lines the model's step ran, that predict the error."""
    found: set[tuple[str, int, int, str]] = set()
    for text, codes in _FAILURE_CODES:
        if text not in error:
            continue
        names = [n.strip() for n in error.split(text, 1)[1].split(",")] if text.startswith("Unexpected") else []
        for path, lines in ran.items():
            for finding in findings_by_file.get(path, ()):
                if finding["code"] in codes and finding["line"] in lines and (not names or any(f"`{n}`" in finding["message"] for n in names)):
                    found.add(_finding_key(finding))
    return found


def _tests_cuda(finding: dict[str, Any]) -> bool:
    """A branch whose condition also tests for CUDA (`x.is_cuda`, `device.type == "cuda"`): its
    paths differ only on a GPU."""
    try:
        with open(finding["path"], encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    text = "\n".join(lines[finding["line"] - 1 : finding.get("end_line", finding["line"])])
    return "is_cuda" in text or '"cuda"' in text or "'cuda'" in text


def _no_tensor_reached(finding: dict[str, Any], records: list[tuple[str, str, str, Any]]) -> bool:
    """A CKP302 finding whose call the companion saw, in reentrant mode, with no tensor that
    requires grad reaching the region other than positionally: the tensor it names was absent
    (None) in this configuration, so nothing it predicts could happen."""
    from ckptlint.runtime.join import _at_the_call

    path, line = finding["path"], finding["line"]
    seen = [r for _, _, mode, r in records if mode == "reentrant" and _at_the_call(r, path, line)]
    return bool(seen) and not any(t.get("how") != "positional" and t.get("requires_grad") for r in seen for t in r.inputs)


def _names_a_site_of(finding: dict[str, Any], group: list[Any], ran: dict[str, set[int]]) -> bool:
    """Whether the model's step checkpointed a region at one of the call sites the finding
    names: a finding claims a hazard for those regions only (MobileAttention's norm is
    BatchNorm in the regions efficientnet.py checkpoints, RmsNorm2d in mobilenetv5's). A site
    is the record's call, the helper call the step ran (`checkpoint_seq(blk, x)`), or the
    checkpointed layer class whose forward a record replayed. Findings at the call itself
    (no sites listed) are always in scope."""
    sites = finding.get("checkpoint_sites") or ()
    if not sites:
        return True
    for site in sites:
        path, line = real(site["path"]), site["line"]
        if line in ran.get(path, ()):
            return True
        layer = _class_at(path, line)
        for record in group:
            if (record.site["path"], record.site["line"]) == (path, line):
                return True
            if layer and record.region.get("path") == path and (record.region.get("name") or "").split(".")[0] == layer:
                return True
    return False


_class_lines: dict[tuple[str, int], str] = {}


def _class_at(path: str, line: int) -> str:
    """The class defined at path:line (a checkpointed layer class), or ""."""
    key = (path, line)
    if key not in _class_lines:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read().splitlines()[line - 1].strip()
        except (OSError, IndexError, UnicodeDecodeError):
            text = ""
        _class_lines[key] = text[6:].split("(")[0].split(":")[0].strip() if text.startswith("class ") else ""
    return _class_lines[key]


def _unjudged(record: Any) -> bool:
    return record.verdict == "error" and all(r["category"] != "error" or r["name"] in UNJUDGED_REASONS for r in record.reasons) \
        and any(r["name"] in UNJUDGED_REASONS for r in record.reasons)


def _one_mode_failures(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps that fail in one mode and run in the other: checkpointing itself broke the step
    (torch's reentrant checkpoint rejects keyword arguments, a recompute saves other tensors).
    The companion may record nothing for them (torch can raise before the call is intercepted),
    so they are listed apart from the join."""
    found = []
    for result in results:
        modes = result["modes"]
        statuses = {mode: outcome["status"] for mode, outcome in modes.items()}
        if sorted(statuses.values()) != ["ok", "run-failed"]:
            continue
        failed = next(mode for mode, status in statuses.items() if status == "run-failed")
        found.append({"library": result["library"], "model": result["name"], "mode": failed, "error": modes[failed].get("error", "")})
    return sorted(found, key=lambda f: (f["library"], f["model"]))


def _region_key(record: Any) -> tuple[str, str, Any]:
    """A replayed region: its code (function and first line), or its name when it has none."""
    region = record.region
    return (region.get("path") or "", region.get("name") or "?", region.get("first_line"))


def exercised_sites_only(records: list[tuple[str, str, str, Any]]) -> set[tuple[str, int]]:
    return {(r.site["path"], r.site["line"]) for _, _, _, r in records}


def _first_detail(record: Any, category: str) -> str:
    for reason in record.reasons:
        if reason["category"] == category or (category.startswith("rng") and reason["category"] == "rng"):
            text = f"{reason['name']}: {reason.get('detail') or ''}".strip().rstrip(":")
            return " ".join(text.split())[:240]
    return ""


def _figures(models: dict[str, Any], sites: set[tuple[str, int]], all_units: list[dict[str, Any]], judged: list[dict[str, Any]], regions: int = 0) -> dict[str, Any]:
    """Recall counts every divergence, in both modes, each judged by the static pass of its
    mode (steps that checkpointing broke in one mode included); the default mode's and the
    opt-in mode's shares are given too."""
    units = all_units
    default = [u for u in all_units if u["default_mode"]]
    opt_in = [u for u in all_units if not u["default_mode"]]
    by_group: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for unit in units:
        by_group[unit["group"]][1] += 1
        by_group[unit["group"]][0] += unit["explained"]
    explained_units = sum(u["explained"] for u in units)
    verdicts = collections.Counter(j["verdict"] for j in judged)
    unverified = collections.Counter(j["why"] for j in judged if j["verdict"] == "unverified")
    verified = verdicts["confirmed"] + verdicts["contradicted"] + verdicts["other configuration"]
    return {
        "models": models,
        "call_sites": len(sites),
        "regions": regions,
        "divergences": len(units),
        "divergences_by_category": {group: {"explained": e, "all": n} for group, (e, n) in sorted(by_group.items())},
        "recall": round(explained_units / len(units), 3) if units else None,
        "default_divergences": len(default),
        "default_explained": sum(u["explained"] for u in default),
        "opt_in_divergences": len(opt_in),
        "opt_in_explained": sum(u["explained"] for u in opt_in),
        "findings_on_exercised_sites": len(judged),
        "confirmed": verdicts["confirmed"],
        "contradicted": verdicts["contradicted"],
        "other_configuration": verdicts["other configuration"],
        "unverified": verdicts["unverified"],
        "region_only": verdicts["region only"],  # the region changed as predicted, this line not shown: apart
        "unverified_by": dict(unverified.most_common()),
        # strict: confirmed / (confirmed + contradicted + built another class or left None); unverified apart
        "precision": round(verdicts["confirmed"] / verified, 3) if verified else None,
        "by_code": {code: dict(collections.Counter(j["verdict"] for j in judged if j["code"] == code)) for code in sorted({j["code"] for j in judged})},
    }


def _enumerated(out_dir: str, library: str) -> dict[str, Any] | None:
    path = os.path.join(out_dir, f"models-{library}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def _short(path: str, libraries: dict[str, Any]) -> str:
    for meta in libraries.values():
        base = os.path.dirname(real(meta["dir"])) + os.sep
        if path.startswith(base):
            return path[len(base):]
    return path


def render(result: dict[str, Any]) -> str:
    libraries = result["libraries"]
    static = result["static"]
    passes = ", ".join(f"{name} pass {count}" for name, count in static.get("by_pass", {}).items())
    lines = ["real-model truth corpus: " + ", ".join(f"{name} {meta['version']}" for name, meta in sorted(libraries.items()))
             + f" (torch {next(iter(libraries.values()))['torch']})",
             f"static pass: ckptlint at {static['ckptlint_src']} ({static['commit']}), {static['findings']} distinct finding(s) in the libraries ({passes})", ""]  # fmt: skip
    for name, figures in result["summary"].items():
        models = figures["models"]
        lines.append(f"== {name}")
        lines.append(f"  models: {models['tried']} tried, {models['run']} run ({models['architectures']} distinct architectures), "
                     f"{models['tried'] - models['run']} not run")  # fmt: skip
        for reason, count in list(models["failed"].items())[:12]:
            lines.append(f"      {count:4d}  {reason}")
        lines.append(f"  checkpoint call sites exercised: {figures['call_sites']}; distinct regions replayed: {figures['regions']}")
        categories = ", ".join(f"{g} {v['explained']}/{v['all']}" for g, v in figures["divergences_by_category"].items())
        lines.append(f"  runtime divergences (site, region, category; steps broken in one mode): {figures['divergences']}"
                     + (f" — explained/all: {categories}" if categories else ""))  # fmt: skip
        lines.append(f"  static recall, both modes: {figures['recall']} ({sum(v['explained'] for v in figures['divergences_by_category'].values())}/{figures['divergences']}); "
                     f"default mode {figures['default_explained']}/{figures['default_divergences']}, "
                     f"opt-in reentrant mode {figures['opt_in_explained']}/{figures['opt_in_divergences']}")  # fmt: skip
        lines.append(f"  static findings on exercised call sites: {figures['findings_on_exercised_sites']}: {figures['confirmed']} confirmed, "
                     f"{figures['contradicted']} contradicted, {figures['other_configuration']} for another configuration, "
                     f"{figures['unverified']} unverified, {figures['region_only']} region changed but line not shown; strict precision {figures['precision']} "
                     f"(confirmed / (confirmed + contradicted + another configuration))")  # fmt: skip
        for why, count in figures["unverified_by"].items():
            lines.append(f"      {count:4d}  unverified: {why}")
        for code, verdicts in figures["by_code"].items():
            lines.append(f"      {code}: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())))
        lines.append("")
    for key, title in (("misses", "divergence(s) in the default mode no static finding explains"),
                       ("opt_in_misses", "divergence(s) only in the opt-in mode (use_reentrant=True) no static finding explains")):
        lines.append(f"== {key.replace('_', '-')}: {len(result.get(key, []))} {title}")
        for miss in result.get(key, []):
            path, _, line = miss["site"].rpartition(":")
            where = f"{_short(path, libraries)}:{line}" if path else miss["site"]  # a step failure has no call site
            models = miss["models"]
            lines.append(f"  {miss['library']} {models[0]}{f' (+{len(models) - 1})' if len(models) > 1 else ''}: "
                         f"{where} region {miss['region']}: {miss['category']}: {miss['detail']}")  # fmt: skip
        lines.append("")
    unjudged = result.get("unjudged", [])
    lines.append(f"== not judged: {len(unjudged)} call site(s) the companion could not replay (left out of the divergences)")
    for item in unjudged:
        path, line = item["site"].rsplit(":", 1)
        lines.append(f"  {item['library']} {item['models'][0]} (+{len(item['models']) - 1}): {_short(path, libraries)}:{line} region {item['region']}: {item['detail'][:160]}")
    lines.append("")
    failures = result.get("one_mode_failures", [])
    lines.append(f"== steps that fail in one mode only: {len(failures)} (checkpointing broke the step; in the recall as `step-failure`)")
    for item in failures:
        lines.append(f"  {item['library']} {item['model']} ({item['mode']}){' [predicted]' if item.get('explained') else ''}: {item['error'][:200]}")
    lines.append("")
    for key, title in (("contradicted", "finding(s) whose code ran with no divergence"),
                       ("other_configuration", "finding(s) about a class the configuration did not build or a tensor it left None"),
                       ("unverified", "finding(s) neither confirmed nor contradicted (line never ran in a replayed region, or needs a GPU)"),
                       ("region_only", "finding(s) whose region changed as predicted, but not the state this line names")):
        items = result.get(key, [])
        lines.append(f"== {key.replace('_', '-')}: {len(items)} {title}")
        for item in items:
            message = " ".join(item["message"].split())
            reason = f" [{item['why'].split(' (')[0]}]" if key == "unverified" else ""
            lines.append(f"  {item['code']} {_short(item['path'], libraries)}:{item['line']}{reason}: {message[:200]}")
        lines.append("")
    return "\n".join(lines).rstrip("\n")
