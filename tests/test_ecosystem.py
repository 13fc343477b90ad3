"""benchmarks/ecosystem.py without the network: the diff, the baseline format, the archive
cache and one whole run on a tiny wheel made here (the real releases are never downloaded)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from conftest import load_benchmark

eco = load_benchmark("ecosystem")


def test_diff_is_a_multiset_difference_sorted_by_place() -> None:
    kept = ("CKP203", "pkg/a.py", 10, "aaaa")
    twice = ("CKP204", "pkg/a.py", 3, "bbbb")
    gone = ("CKP101", "pkg/b.py", 7, "cccc")
    new = ("CKP205", "pkg/a.py", 1, "dddd")
    change = eco.diff([kept, twice, twice, gone], [twice, kept, new])
    assert change.added == [new]
    assert change.removed == [twice, gone]  # one of the two copies went; a.py before b.py


def test_a_reworded_message_is_a_removal_and_an_addition() -> None:
    before = ("CKP203", "pkg/a.py", 10, eco.message_hash("assigns `self.n`, which outlives the region"))
    after = ("CKP203", "pkg/a.py", 10, eco.message_hash("assigns `self.n`; the replay does it again"))
    change = eco.diff([before], [after])
    assert (change.added, change.removed) == ([after], [before])
    assert eco.diff([before], [before]).added == eco.diff([before], [before]).removed == []


def test_baseline_round_trips_sorted_one_finding_a_line() -> None:
    first = ("CKP101", "pkg/a.py", 5, "0123456789")
    second = ("CKP203", "pkg/a.py", 2, "9876543210")
    baseline = eco.Baseline("pkg", "1.0", "pkg-1.0-py3-none-any.whl", "f" * 64, "abc", 3, [first, second], {first: "x"})
    text = baseline.dumps()
    lines = text.splitlines()
    assert lines[1:3] == ['["CKP203","pkg/a.py",2,"9876543210",""],', '["CKP101","pkg/a.py",5,"0123456789","x"]']
    again = eco.Baseline.loads(text)
    assert (again.files, sorted(again.findings), again.texts[first]) == (3, [first, second], "x")


def test_cached_archives_are_found_by_normalised_name(tmp_path: Path) -> None:
    wheel = tmp_path / "megatron_core-0.16.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    sdist = tmp_path / "deepspeed-0.19.8.tar.gz"
    other = tmp_path / "megatron_core-0.16.10-py3-none-any.whl"
    for path in (wheel, sdist, other):
        path.write_bytes(b"")
    assert eco.find_archive(tmp_path, eco.Pin("megatron-core", "0.16.1", ("megatron",))) == wheel
    assert eco.find_archive(tmp_path, eco.Pin("deepspeed", "0.19.8", ("deepspeed",), sdist=True)) == sdist
    assert eco.find_archive(tmp_path, eco.Pin("deepspeed", "0.19.8", ("deepspeed",))) is None  # no wheel of it


def test_every_pin_has_a_readable_baseline_and_no_baseline_is_stale() -> None:
    names = {path.name for path in eco.BASELINES.glob("*.json")}
    assert names == {f"{pin.key}.json" for pin in eco.PINS}
    for pin in eco.PINS:
        baseline = eco.load_baseline(pin)
        assert (baseline.name, baseline.version) == (pin.name, pin.version)
        assert baseline.files > 0
        assert all(path.split("/")[0] in pin.packages for _, path, _, _ in baseline.findings)


MODEL = '''\
import torch
from torch.utils.checkpoint import checkpoint


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        {body}
        return x * 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)
'''


def make_wheel(path: Path, body: str) -> None:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("tinypkg/__init__.py", "")
        wheel.writestr("tinypkg/model.py", MODEL.format(body=body))
        wheel.writestr("tinypkg-1.0.dist-info/METADATA", "Name: tinypkg\nVersion: 1.0\n")
        wheel.writestr("../escape.py", "x = 1\n")


def test_update_then_check_reports_what_a_change_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pin = eco.Pin("tinypkg", "1.0", ("tinypkg",))
    monkeypatch.setattr(eco, "PINS", (pin,))
    monkeypatch.setattr(eco, "BASELINES", tmp_path / "baselines")
    archives = tmp_path / "cache" / "archives"
    archives.mkdir(parents=True)
    wheel = archives / "tinypkg-1.0-py3-none-any.whl"
    make_wheel(wheel, "self.seen.append(x)")

    assert eco.main(["--update", "--cache", str(tmp_path / "cache"), "--jobs", "1"]) == 0
    baseline = eco.load_baseline(pin)
    assert [(code, path, line) for code, path, line, _ in baseline.findings] == [("CKP203", "tinypkg/model.py", 11)]
    assert baseline.files == 2
    root = tmp_path / "cache" / "src" / "tinypkg-1.0"
    assert sorted(p.name for p in root.iterdir()) == [".unpacked", "pyproject.toml", "tinypkg"]
    assert not (tmp_path / "cache" / "src" / "escape.py").exists()
    capsys.readouterr()

    wheel.unlink()
    make_wheel(wheel, "pass")  # the "change": the hazard is gone
    assert eco.main(["--cache", str(tmp_path / "cache"), "--jobs", "1", "--strict"]) == 1  # 0 without --strict
    out = capsys.readouterr().out
    assert "tinypkg-1.0: 2 files, 0 findings (baseline 1), +0 -1" in out
    (entry,) = baseline.findings
    assert baseline.texts[entry]  # a removal is printed with the summary the baseline kept
    assert f"    - CKP203 tinypkg/model.py:11 {baseline.texts[entry]}\n" in out
    assert "differs from the baseline's" in out
    assert eco.load_baseline(pin).findings == baseline.findings  # check mode never writes


def test_a_release_that_does_not_unpack_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pin = eco.Pin("tinypkg", "1.0", ("tinypkg",))
    monkeypatch.setattr(eco, "PINS", (pin,))
    monkeypatch.setattr(eco, "BASELINES", tmp_path / "baselines")
    archives = tmp_path / "cache" / "archives"
    archives.mkdir(parents=True)
    (archives / "tinypkg-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    assert eco.main(["--cache", str(tmp_path / "cache")]) == 0
    assert eco.main(["--cache", str(tmp_path / "cache"), "--strict"]) == 1
    out = capsys.readouterr().out
    assert "tinypkg-1.0: skipped: " in out
    assert not (eco.BASELINES / "tinypkg-1.0.json").exists()
