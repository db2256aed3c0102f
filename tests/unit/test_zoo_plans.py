"""The zoo's workload plans are frozen and versioned, and an entry set can live anywhere."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from framework.cli import main
from framework.core.errors import ConfigError
from framework.zoo.entry import entries_dir, load_set
from framework.zoo.plans import CURRENT, PLANS, W8, plan_named

#: Each plan's digest (framework.zoo.plans.WorkloadPlan.digest): a figure was reported with
#: it, so it never changes; a change is a new version with a digest of its own.
FROZEN = {"w8": "f1d05d590307d7a9", "w9": "123f74c32d260bf6"}


def test_every_plan_is_frozen_at_its_digest() -> None:
    assert set(PLANS) == set(FROZEN) and CURRENT in PLANS
    assert {v: p.digest() for v, p in PLANS.items()} == FROZEN


def test_a_changed_plan_shows_in_its_digest() -> None:
    """The control: any change of what a recall runs changes the digest."""
    for change in ({"budget_s": 480.0}, {"shares": False}, {"targets": "filesystem"},
                   {"workloads": W8.workloads[:-1]}, {"tuned_on": ()}):
        assert dataclasses.replace(W8, **change).digest() != W8.digest(), change
    assert dataclasses.replace(W8, origin="reworded").digest() == W8.digest()
    assert dataclasses.replace(W8, weights=(2.0, 1.0, 1.0, 1.0, 1.0)).digest() != W8.digest()


def test_an_unknown_plan_is_one_line() -> None:
    assert plan_named(None) is PLANS[CURRENT]
    with pytest.raises(ConfigError, match=r"^--plan 'w99': no such workload plan \(versions: w8, w9\)$"):
        plan_named("w99")


def two_entry_set(tmp_path: Path, base: str = "7.3") -> Path:
    """A set outside the checkout: two built-in entries, said to revert on ``base``."""
    out = tmp_path / "my-zoo"
    out.mkdir()
    for name in ("btrfs-new-name-last-log-commit", "xfs-delalloc-writeback-stale-data"):
        for suffix in (".toml", ".patch"):
            shutil.copy(entries_dir() / f"{name}{suffix}", out / f"{name}{suffix}")
    (out / "set.toml").write_text(f'[set]\nname = "mine"\nbase = "{base}"\n'
                                  'description = "two entries"\n')
    return out


def test_a_set_from_outside_the_checkout_is_listed_and_planned(tmp_path, monkeypatch, capsys):
    directory = two_entry_set(tmp_path)
    monkeypatch.setenv("POWERCUT_ZOO_CACHE", str(tmp_path / "cache"))
    assert main(["zoo", "list", "--entries", str(directory), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert (listed["name"], listed["base"]) == ("mine", "7.3")
    assert [e["name"] for e in listed["entries"]] == ["btrfs-new-name-last-log-commit",
                                                      "xfs-delalloc-writeback-stale-data"]
    assert not any(e["built"] for e in listed["entries"])
    # Planning: nothing is built, so the run says where the set's kernels should be.
    assert main(["zoo", "run", "--entries", str(directory), "--results",
                 str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"powercut: zoo kernel 'fixed' is not built in {tmp_path / 'cache' / 'mine'}: "
                   f"run 'powercut zoo build --entries {directory}' first")


def test_a_recall_of_a_set_records_its_set_and_its_plan(tmp_path, monkeypatch) -> None:
    from framework.zoo import recall
    from framework.zoo.kernels import Kernel

    eset = load_set(two_entry_set(tmp_path))
    monkeypatch.setattr(recall, "installed",
                        lambda cache, name: Kernel(name, tmp_path / name, "7.3.4", "", "y", 0.0))
    planned: list[tuple[str, str]] = []

    def run_kernel(kernel, target, results, plan, **kw):  # type: ignore[no-untyped-def]
        planned.append((kernel.name, target))
        assert plan.workloads is W8
        return []

    monkeypatch.setattr(recall, "run_kernel", run_kernel)
    report = recall.run_recall(eset.entries, tmp_path / "cache", tmp_path / "runs",
                               recall.RecallPlan(), entry_set=eset.to_dict(),
                               say=lambda _: None)
    assert report["entry_set"]["base"] == "7.3" and report["plan"]["version"] == "w8"
    # The plan's rule narrows each entry to its own targets; the fixed kernel runs them all.
    assert sorted(planned) == [("btrfs-new-name-last-log-commit", "btrfs"), ("fixed", "btrfs"),
                               ("fixed", "xfs"), ("xfs-delalloc-writeback-stale-data", "xfs")]
    assert report["false_alarms_not_measured"] == [
        f"{t} {c}: not run (the budget ended first)" for t in ("btrfs", "xfs")
        for c, _ in W8.workloads]


@pytest.mark.parametrize("text, message", [
    (None, "not a zoo entry set (no set.toml saying its base"),
    ('[set]\nname = "x"\n', "[set] base must be a non-empty string"),
    ('[set]\nname = "x"\nbase = "linux-source-7.3"\n', "is not a Debian kernel series"),
    ('[set]\nname = "x y"\nbase = "7.3"\n', "must be letters, digits"),
    ('[set]\nname = "x"\nbase = "7.3"\nowner = "me"\n', "unknown key 'owner' in [set]"),
    ('[set\n', "not a zoo set file"),
])
def test_a_bad_set_file_is_one_line_naming_it(tmp_path, text, message) -> None:
    directory = two_entry_set(tmp_path)
    if text is None:
        (directory / "set.toml").unlink()
    else:
        (directory / "set.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_set(directory)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(directory) in str(info.value)


def test_the_built_in_set_reverts_on_6_12() -> None:
    eset = load_set()
    assert (eset.name, eset.base, len(eset.entries)) == ("zoo-6.12", "6.12", 14)


def test_the_second_set_reverts_on_7_3_and_shares_no_fix_with_the_first() -> None:
    from framework.zoo.entry import entries_dir as first_dir

    second = load_set(first_dir().with_name("entries-7.3"))
    assert (second.name, second.base) == ("zoo-7.3", "7.3") and len(second.entries) >= 12
    assert len({e.filesystem for e in second.entries}) >= 4
    first = {e.fix[:12] for e in load_set().entries}
    assert not first & {e.fix[:12] for e in second.entries}
    # Fixes merged from v6.13 on: Debian's 7.3.4 has each of them, so each can be reverted.
    def release(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.removeprefix("v").split("."))

    assert all((6, 13) <= release(e.fixed_in) <= (7, 3) for e in second.entries)
