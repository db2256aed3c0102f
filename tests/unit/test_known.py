"""The known-behaviour list: its format, matching, and how runs report known states."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from crashcases.check import CheckResult, explain
from crashcases.crash.engine import CrashEngine
from crashcases.crash.plan import CrashPlan, CrashRunResult, ValidatedPlan
from crashcases.crash.points import CrashPoint, CrashState, Variant
from crashcases.crash.run import StoreSink, run_crash
from crashcases.cut import engine as cut
from crashcases.cut.guest import CutPoint, DriveResult
from crashcases.cut.summary import TrialResult, summarize
from crashcases.execute import execute
from crashcases.known import (
    KnownList,
    KnownMatcher,
    in_release_range,
    load_known,
    mark_ops,
    parse_known,
    release_key,
)
from crashcases.vocabulary import CrashPointKind, Outcome, VariantKind, fails
from crashcases.workload.ops import Op, OpKind, Workload
from framework.cli import crash as crash_cli
from framework.cli import cut as cut_cli
from framework.cli import main
from framework.core import junit
from framework.core.errors import ConfigError
from framework.core.lifecycle import RunSpec, run_lifecycle
from framework.core.machine.fake import FakeMachine
from framework.core.store import MIGRATIONS, SCHEMA_VERSION, Store
from framework.study.engine import parse_study
from recovery.targets import get_target, target_from_dict

DEBIAN_6_1 = "6.1.0-28-amd64"

# A workload whose marks follow fsync (pc-0), sync (pc-1) and fdatasync (pc-2).
WORKLOAD = Workload("w", 0, (
    Op(OpKind.CREAT, "a"), Op(OpKind.WRITE, "a", length=10), Op(OpKind.FSYNC, "a"),
    Op(OpKind.CREAT, "b"), Op(OpKind.SYNC), Op(OpKind.APPEND, "a", length=5),
    Op(OpKind.FDATASYNC, "a"),
))

def write_oracle(path: Path) -> None:
    """The oracle a recording of WORKLOAD leaves in a run directory (marks pc-0..pc-2)."""
    root = path.parent / "oracle-tree"
    root.mkdir()
    path.write_text(execute(WORKLOAD, root, lambda name: None).to_json())


ENTRY = """
[[known]]
id = "{id}"
{scope}
findings = {findings}
reason = "The filesystem does this, documented."
source = "fs/x/y.c f(), Linux 6.1"
{extra}
"""


def known(id: str = "k1", scope: str = 'fstype = "jfs"', findings: str = '["data-loss"]',
          extra: str = "") -> str:
    return ENTRY.format(id=id, scope=scope, findings=findings, extra=extra)


def klist(*texts: str) -> KnownList:
    entries = tuple(e for i, t in enumerate(texts) for e in parse_known(t, source=f"k{i}.toml"))
    return KnownList(entries, tuple(f"k{i}.toml" for i in range(len(texts))))


def finding(kind: str = "data-loss", mark: str | None = "pc-0", path: str = "a") -> dict[str, Any]:
    return {"kind": kind, "path": path, "detail": "gone", "mark": mark}


def check(key: str, outcome: Outcome, *findings: dict[str, Any], **kw: Any) -> CheckResult:
    kw.setdefault("mount_ok", True)
    kw.setdefault("fsck_check", "clean")
    return CheckResult(key=key, outcome=outcome, findings=list(findings), mount_s=0.1,
                       fsck_check_s=0.2, **kw)


def matcher(known_list: KnownList, target: str = "jfs", *, run: str = "crash",
            case: str = "hand:write-fsync-rename", kernel: str | None = DEBIAN_6_1,
            variants: tuple[str, ...] = ("prefix",)) -> KnownMatcher:
    return known_list.matcher(run=run, target=get_target(target), case=case, kernel=kernel,
                              marks=mark_ops(WORKLOAD), variants=variants)


def judged_known(m: KnownMatcher, result: CheckResult, variant: str = "prefix") -> bool:
    """Whether ``m`` reports ``result`` as known."""
    verdict = m.judge(result.key, result.outcome, result, variant)
    return verdict is not None and verdict.known


# --- the format ------------------------------------------------------------------------


def test_the_shipped_list_parses_and_every_entry_cites_its_source() -> None:
    shipped = load_known()
    assert shipped.files == ("known.toml",)
    entry = next(e for e in shipped.entries if e.id == "jfs-no-cache-flush")
    assert (entry.fstype, entry.run, entry.findings, entry.op) == ("jfs", "crash", ("data-loss",), None)
    assert (entry.kernel_min, entry.kernel_max) == ("6.1.0", "7.3.999")
    assert all(e.reason and e.reference for e in shipped.entries)
    assert "lbmStartIO" in entry.reference


def test_every_field_is_read() -> None:
    text = known(id="all.fields_1", scope='target = "ext4/*"', findings='["wrong-content", "recovered"]',
                 extra='kernel_min = "6.1"\nkernel_max = "6.12.999"\nrun = "crash"\ncase = "gen:*"\n'
                       'op = "fsync*"\nvariants = ["subset", "torn"]\njournal = "internal"\n'
                       'link = "https://example.org/report/1"')
    (e,) = parse_known(text, source="mine.toml")
    assert (e.id, e.target, e.fstype, e.kernel_min, e.kernel_max, e.journal) == (
        "all.fields_1", "ext4/*", None, "6.1", "6.12.999", "internal")
    assert (e.run, e.case, e.op, e.variants) == ("crash", "gen:*", "fsync*", ("subset", "torn"))
    assert e.findings == ("wrong-content", "recovered")
    assert (e.source, e.link, e.file) == ("fs/x/y.c f(), Linux 6.1", "https://example.org/report/1",
                                          "mine.toml")
    assert e.reference == "fs/x/y.c f(), Linux 6.1; https://example.org/report/1"


def test_single_strings_stand_for_one_element_lists() -> None:
    (e,) = parse_known(known(findings='"corrupt"', extra='variants = "lying"'), source="f")
    assert e.findings == ("corrupt",) and e.variants == ("lying",)


BAD_ENTRIES = [
    # (what the file holds, the field the error must name)
    (known(id="x", extra="colour = 3"), "colour"),
    (known(id="x", scope=""), "fstype"),
    (known(id="x", scope='fstype = "jfs"\ntarget = "jfs"'), "fstype"),
    (known(id="x", scope='fstype = ""'), "fstype"),
    (known(id="x", extra='kernel_min = "six"'), "kernel_min"),
    (known(id="x", extra='kernel_max = "6.1-rc1"'), "kernel_max"),
    (known(id="x", extra='kernel_min = "6.12"\nkernel_max = "6.1"'), "kernel_max"),
    (known(id="x", extra='run = "bench"'), "run"),
    (known(id="x", extra='op = "write"'), "op"),
    (known(id="x", extra='variants = ["sideways"]'), "variants"),
    (known(id="x", extra='variants = ["prefix"]\nrun = "cut"'), "variants"),
    (known(id="x", extra='case = 3'), "case"),
    (known(id="x", findings="[]"), "findings"),
    (known(id="x", findings='["ok"]'), "findings"),
    (known(id="x", findings='["lost"]'), "findings"),
    (known(id="x").replace('reason = "The filesystem does this, documented."', ""), "reason"),
    (known(id="x").replace('reason = "The filesystem does this, documented."', 'reason = " "'),
     "reason"),
    (known(id="x").replace('source = "fs/x/y.c f(), Linux 6.1"', ""), "source"),
    (known(id="x", extra='link = "see the bug tracker"'), "link"),
    (known(id="x") + known(id="x"), "id"),
    (known(id="not ok"), "id"),
    (known(id="x", extra='journal = "outside"'), "journal"),
]


@pytest.mark.parametrize(("text", "field"), BAD_ENTRIES)
def test_a_bad_entry_is_one_line_naming_file_entry_and_field(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_known(text, source="mine.toml")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("mine.toml: known entry ")
    assert f": {field}: " in msg
    assert "'x'" in msg or "'not ok'" in msg


def test_an_entry_without_an_id_is_named_by_its_position() -> None:
    text = known(id="a") + known(id="b").replace('id = "b"', "")
    with pytest.raises(ConfigError, match=r"^mine.toml: known entry #2: id: missing$"):
        parse_known(text, source="mine.toml")


@pytest.mark.parametrize(("text", "says"), [
    ("[[known]\nid = 1", "not valid TOML"),
    ('[expunge]\nid = "x"', "unknown key 'expunge'"),
    ('known = "x"', "array of tables"),
])
def test_bad_toml_is_one_line_naming_the_file(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_known(text, source="mine.toml")
    assert str(err.value).startswith("mine.toml: ") and says in str(err.value)
    assert "\n" not in str(err.value)


def test_user_files_extend_the_shipped_list_and_may_not_reuse_an_id(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(known(id="mine-1", scope='target = "ext4/*"'))
    both = load_known([mine])
    assert both.files == ("known.toml", str(mine))
    assert [e.id for e in both.entries][-1] == "mine-1"
    assert load_known([mine], shipped=False).files == (str(mine),)
    clash = tmp_path / "clash.toml"
    clash.write_text(known(id="jfs-no-cache-flush"))
    with pytest.raises(ConfigError, match=r"clash.toml: known entry 'jfs-no-cache-flush': id: "
                                          r"already defined in known.toml"):
        load_known([clash])
    with pytest.raises(ConfigError, match=r"nosuch.toml: cannot read known-behaviour file"):
        load_known([tmp_path / "nosuch.toml"])


# --- kernel releases --------------------------------------------------------------------


def test_release_keys_are_the_leading_numbers() -> None:
    assert release_key("6.1.0-28-amd64") == (6, 1, 0, 28)
    assert release_key("6.12.107+deb12-amd64") == (6, 12, 107)
    assert release_key("6.13.0-rc3+") == (6, 13, 0)
    assert release_key("custom") == ()


@pytest.mark.parametrize(("release", "low", "high", "inside"), [
    ("6.1.0-28-amd64", "6.1.0", "6.12.999", True),
    ("6.12.107+deb12-amd64", "6.1.0", "6.12.999", True),
    ("6.12.107+deb12-amd64", None, "6.12", True),  # "6.12" covers every 6.12.x
    ("6.13.0-1-amd64", "6.1.0", "6.12.999", False),
    ("5.10.0-30-amd64", "6.1.0", "6.12.999", False),
    ("6.1", "6.1.0", None, True),  # 6.1 is 6.1.0
    ("6.0.12", "6.1.0", None, False),
    ("6.1.0-28-amd64", None, None, True),
    (None, None, None, True),  # no range: any kernel, known or not
    (None, "6.1.0", None, False),  # a range never matches an unknown kernel
    ("custom", "6.1.0", None, False),
])
def test_kernel_ranges_are_inclusive(release: str | None, low: str | None, high: str | None,
                                     inside: bool) -> None:
    assert in_release_range(release, low, high) is inside


# --- matching ---------------------------------------------------------------------------


def test_positive_control_a_matching_entry_turns_a_failing_state_known() -> None:
    m = matcher(klist(known(id="no-flush")))
    verdict = m.judge("3/prefix", Outcome.DATA_LOSS,
                      check("3/prefix", Outcome.DATA_LOSS, finding(), finding("link-count")),
                      "prefix")
    assert verdict is not None and verdict.known and verdict.ids == ("no-flush",)
    assert m.is_known("3/prefix") and m.known_ids("3/prefix") == ("no-flush",)
    assert m.message("3/prefix").startswith("known: no-flush: The filesystem does this")
    # The list set aside (--ignore-known): the entry still explains the state and is counted
    # as reproduced, but the state is not known, and no known id is stored for it (a ci
    # summary counted such a state "known" while its run failed on it).
    aside = matcher(dataclasses.replace(klist(known(id="no-flush")), ignore=True))
    aside.judge("3/prefix", Outcome.DATA_LOSS, check("3/prefix", Outcome.DATA_LOSS, finding()),
                "prefix")
    assert not aside.is_known("3/prefix") and aside.known_ids("3/prefix") is None
    assert aside.counts() == {"no-flush": 1} and aside.not_reproduced() == []


def test_negative_control_an_entry_for_another_filesystem_changes_nothing() -> None:
    m = matcher(klist(known(scope='fstype = "xfs"')), "ext4/ordered")
    assert m.applicable == ()
    assert m.judge("3/prefix", Outcome.DATA_LOSS, check("3/prefix", Outcome.DATA_LOSS, finding()),
                   "prefix") is None
    assert not m.is_known("3/prefix") and m.not_reproduced() == []


@pytest.mark.parametrize(("scope", "target", "applies"), [
    ('fstype = "jfs"', "jfs", True),
    ('fstype = "jfs"', "jfs/logdev", True),  # the fstype, whatever the target's name
    ('fstype = "ext*"', "ext2", True),
    ('fstype = "ext*"', "xfs", False),
    ('target = "jfs"', "jfs/logdev", False),
    ('target = "jfs/*"', "jfs/logdev", True),
    ('target = "ext4/*"', "ext4/ordered", True),
    ('target = "ext4/*"', "ext2", False),
    # The journal placement narrows an entry to targets with that placement.
    ('fstype = "jfs"\njournal = "external"', "jfs/logdev", True),
    ('fstype = "jfs"\njournal = "external"', "jfs", False),
    ('fstype = "jfs"\njournal = "internal"', "jfs", True),
    ('fstype = "jfs"\njournal = "internal"', "jfs/logdev", False),
    ('fstype = "ext4"\njournal = "none"', "ext4/nojournal", True),
    ('fstype = "ext4"\njournal = "none"', "ext4/ordered", False),
])
def test_fstype_and_target_globs(scope: str, target: str, applies: bool) -> None:
    m = matcher(klist(known(scope=scope)), target)
    assert bool(m.applicable) is applies


def test_a_user_target_matches_by_its_fstype() -> None:
    mine = target_from_dict({"name": "mine", "fstype": "jfs"})
    m = klist(known()).matcher(run="crash", target=mine, case="random:10", kernel=DEBIAN_6_1,
                               marks={})
    assert [e.id for e in m.applicable] == ["k1"]


@pytest.mark.parametrize(("extra", "kw", "applies"), [
    ('case = "gen:*"', {"case": "gen:seq1"}, True),
    ('case = "gen:*"', {"case": "hand:write-fsync-rename"}, False),
    ('run = "crash"', {"run": "cut"}, False),
    ('run = "cut"', {"run": "cut", "variants": ()}, True),
    ('kernel_max = "6.0"', {}, False),
    ('kernel_min = "6.1.0"', {"kernel": None}, False),
    ('variants = ["subset"]', {"variants": ("prefix",)}, False),
    ('variants = ["subset"]', {"variants": ("prefix", "subset")}, True),
    ('variants = ["subset"]', {"run": "cut", "variants": ()}, False),
])
def test_case_run_kernel_and_variants_decide_where_an_entry_applies(
        extra: str, kw: dict[str, Any], applies: bool) -> None:
    m = matcher(klist(known(extra=extra)), **kw)
    assert bool(m.applicable) is applies


def test_a_partial_match_stays_failing_and_says_what_is_unexplained() -> None:
    m = matcher(klist(known(findings='["data-loss"]')))
    verdict = m.judge("3/prefix", Outcome.CORRUPT,
                      check("3/prefix", Outcome.CORRUPT, finding(), finding("io-error", None, "b")),
                      "prefix")
    assert verdict is not None and not verdict.known and verdict.ids == ("k1",)
    assert verdict.unexplained == ("io-error: b",)
    assert not m.is_known("3/prefix") and m.known_ids("3/prefix") is None
    assert m.counts() == {"k1": 1}  # it reproduced, even if something else failed too


def test_entry_kinds_match_finding_kinds_or_the_outcome_they_imply() -> None:
    exact = matcher(klist(known(findings='["wrong-content"]')))
    assert judged_known(exact, check("k", Outcome.DATA_LOSS, finding("wrong-content")))
    assert exact.judge("k", Outcome.DATA_LOSS, check("k", Outcome.DATA_LOSS, finding("data-loss")),
                       "prefix") is None
    loss = matcher(klist(known(findings='["data-loss"]')))
    for kind in ("link-count", "unexpected-entry", "identity"):
        verdict = loss.judge("k", Outcome.DATA_LOSS, check("k", Outcome.DATA_LOSS, finding(kind)),
                             "prefix")
        assert verdict is not None and verdict.known
    corrupt = matcher(klist(known(findings='["corrupt"]')))
    verdict = corrupt.judge("k", Outcome.CORRUPT, check("k", Outcome.CORRUPT, finding("io-error")),
                            "prefix")
    assert verdict is not None and verdict.known


def test_op_globs_match_the_durability_op_of_the_broken_promise() -> None:
    assert mark_ops(WORKLOAD) == {"pc-0": "fsync", "pc-1": "sync", "pc-2": "fdatasync"}
    m = matcher(klist(known(extra='op = "f*sync"')))
    for mark, known_ in (("pc-0", True), ("pc-2", True), ("pc-1", False), (None, False)):
        verdict = m.judge("k", Outcome.DATA_LOSS, check("k", Outcome.DATA_LOSS, finding(mark=mark)),
                          "prefix")
        assert (verdict is not None and verdict.known) is known_, mark


def test_variant_kinds_are_matched_per_state() -> None:
    m = matcher(klist(known(extra='variants = ["subset"]')), variants=("prefix", "subset"))
    bad = check("k", Outcome.DATA_LOSS, finding())
    assert judged_known(m, bad, "subset")
    assert m.judge("5/prefix", Outcome.DATA_LOSS, bad, "prefix") is None


def test_an_outcome_without_findings_needs_an_entry_for_that_outcome() -> None:
    unmountable = check("k", Outcome.UNMOUNTABLE, mount_ok=False, mount_error="bad superblock")
    assert matcher(klist(known())).judge("k", Outcome.UNMOUNTABLE, unmountable, "prefix") is None
    verdict = matcher(klist(known(findings='["unmountable"]'))).judge(
        "k", Outcome.UNMOUNTABLE, unmountable, "prefix")
    assert verdict is not None and verdict.known


def test_fsck_repair_beside_lost_data_must_be_explained_too_where_it_fails_the_target() -> None:
    repaired = check("k", Outcome.DATA_LOSS, finding(), fsck_check="corrupt", fsck_repair="repaired")
    only_loss = klist(known(scope='fstype = "ext*"'))
    verdict = matcher(only_loss, "ext4/ordered").judge("k", Outcome.DATA_LOSS, repaired, "prefix")
    assert verdict is not None and not verdict.known and verdict.unexplained == ("outcome recovered",)
    both = klist(known(scope='fstype = "ext*"', findings='["data-loss", "recovered"]'))
    assert judged_known(matcher(both, "ext4/ordered"), repaired)
    # Without a journal, repair at boot is the expected recovery: nothing more to explain.
    assert judged_known(matcher(only_loss, "ext2"), repaired)


def test_states_that_do_not_fail_are_never_known() -> None:
    m = matcher(klist(known(scope='fstype = "ext*"', findings='["recovered"]')), "ext2")
    assert m.judge("k", Outcome.OK, check("k", Outcome.OK), "prefix") is None
    recovered = check("k", Outcome.RECOVERED, fsck_check="corrupt", fsck_repair="repaired")
    assert m.judge("k", Outcome.RECOVERED, recovered, "prefix") is None  # ext2: not a failure


def test_a_hung_trial_without_a_check_can_be_known() -> None:
    m = matcher(klist(known(findings='["hang"]', extra='run = "cut"')), run="cut", variants=())
    verdict = m.judge("jfs#0", Outcome.HANG, None)
    assert verdict is not None and verdict.known


def test_an_entry_that_explained_nothing_did_not_reproduce() -> None:
    m = matcher(klist(known(id="fixed"), known(id="other", scope='fstype = "xfs"')))
    m.judge("1/prefix", Outcome.OK, check("1/prefix", Outcome.OK), "prefix")
    (silent,) = m.not_reproduced()
    assert silent["id"] == "fixed" and silent["target"] == "jfs" and silent["kernel"] == DEBIAN_6_1
    assert silent["message"].startswith("known entry fixed did not reproduce here (fixed?)")
    report = m.report()
    assert report["applicable"] == ["fixed"] and report["states"] == 0
    assert report["not_reproduced"] == [silent]


def test_a_file_workload_is_silent_only_about_the_bug_it_reproduces() -> None:
    """A bug report's own sequence not failing says "fixed?"; another bug's sequence says
    nothing about it (a ci run of four reproducers printed three false "fixed?" each)."""
    entries = klist(known(id="a-bug", extra='report = "docs/reports/a-bug"'),
                    known(id="b-bug", extra='report = "docs/reports/b-bug"'),
                    known(id="by-case", extra='case = "file:*/c-seq.json"'),
                    known(id="general"))
    ok = check("1/prefix", Outcome.OK)
    for case, silent in [("file:/src/docs/reports/a-bug/workload.json", ["a-bug"]),
                         ("file:/src/studies/known-recheck/b-bug.json", ["b-bug"]),
                         ("file:/tmp/c-seq.json", ["by-case"]),
                         ("file:/tmp/other.json", []),
                         ("gen:seq1", ["a-bug", "b-bug", "general"])]:
        m = matcher(entries, case=case)
        m.judge("1/prefix", Outcome.OK, ok, "prefix")
        assert [n["id"] for n in m.not_reproduced()] == silent, case


# --- crash runs: summary, exit status, JUnit, results.json, store ------------------------------


def crash_states() -> list[CrashState]:
    return [CrashState(CrashPoint(i, CrashPointKind.MARK, f"pc-{i}", i - 1), Variant(VariantKind.PREFIX), i)
            for i in range(3)]


def crash_result(tmp_path: Path, known_list: KnownList, target: str = "jfs") -> CrashRunResult:
    plan = CrashPlan(target=target, case="hand:write-fsync-rename")
    result = CrashRunResult(tmp_path, plan, {"entries": 10}, crash_states())
    result.results = {
        "0/prefix": check("0/prefix", Outcome.OK),
        "1/prefix": check("1/prefix", Outcome.DATA_LOSS, finding(mark="pc-0")),
        "2/prefix": check("2/prefix", Outcome.CORRUPT, finding(mark="pc-1"),
                          finding("io-error", None, "b")),
    }
    result.known = matcher(known_list, target)
    for s in result.states:
        r = result.results[s.key]
        result.known.judge(s.key, r.outcome, r, s.variant.kind.value)
    return result


def _render(table: Any) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def test_crash_summary_junit_and_exit_status_count_only_unknown_failures(tmp_path: Path) -> None:
    result = crash_result(tmp_path, klist(known(id="no-flush"), known(id="gone", extra='case = "hand:*"',
                                                                      findings='["hang"]')))
    text = _render(crash_cli.summary_table(result))
    assert "known (data-loss 1)" in text
    assert [ln.split()[1] for ln in text.splitlines() if ln.startswith("│")] == [
        "ok", "corrupt", "known"]  # the known state is out of the data-loss row
    cases = crash_cli.junit_cases(result, get_target("jfs"))
    by_name = {c.name.split()[0]: c for c in cases}
    assert by_name["0/prefix"].failure is None and by_name["0/prefix"].skipped is None
    assert by_name["1/prefix"].failure is None
    assert by_name["1/prefix"].skipped is not None
    assert by_name["1/prefix"].skipped.startswith("known: no-flush: The filesystem does this")
    assert "[raw outcome: data-loss]" in by_name["1/prefix"].skipped
    assert by_name["2/prefix"].failure is not None  # its io-error is not known: still failing
    silent = by_name["known:gone"]
    assert silent.failure is None and "did not reproduce here (fixed?)" in silent.output
    path = tmp_path / "junit.xml"
    junit.write(path, "crash", cases)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "1", "1")
    skipped = suite.find("testcase[@name='1/prefix (last mark pc-1)']/skipped")
    assert skipped is not None and "no-flush" in skipped.get("message", "")
    out = suite.find("testcase[@name='known:gone']/system-out")
    assert out is not None and out.text is not None and "fixed?" in out.text


def test_a_harness_error_is_a_junit_error_never_a_failure(tmp_path: Path) -> None:
    result = crash_result(tmp_path, KnownList())
    busy = CheckResult(key="2/prefix", outcome=Outcome.ERROR,
                       notes=["dm device pc-snap is still open after 20 tries (1 opener: pid 9 (sh) fd 3)"])
    busy.explanation = explain(busy)
    result.results["2/prefix"] = busy
    assert not fails(Outcome.ERROR, get_target("ext4/ordered"))
    cases = crash_cli.junit_cases(result, get_target("jfs"))
    path = tmp_path / "junit.xml"
    junit.write(path, "crash", cases)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors")) == ("1", "1")
    error = suite.find("testcase[@name='2/prefix (last mark pc-2)']/error")
    assert error is not None and "harness error: dm device pc-snap is still open" in error.get("message", "")
    assert "pid 9 (sh)" in error.get("message", "")


def test_cmd_crash_exits_0_when_every_failure_is_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(known(id="mine-loss", findings='["data-loss", "corrupt"]'))
    seen: list[KnownList | None] = []

    def crash_one(args, store, valid, known_list=None, resume_dir=None):  # type: ignore[no-untyped-def]
        seen.append(known_list)
        run_dir = tmp_path / f"run-{len(seen)}"
        run_dir.mkdir()
        return crash_result(run_dir, known_list or KnownList())

    monkeypatch.setattr(crash_cli, "crash_one", crash_one)
    monkeypatch.setattr(crash_cli, "resolve_kernel", lambda args: None)
    argv = ["crash", "--target", "jfs", "--results", str(tmp_path / "r"), "--db",
            str(tmp_path / "db.sqlite")]
    assert main(argv) == 1  # the shipped list explains the data loss, not the io-error
    assert main([*argv, "--known", str(mine)]) == 0
    assert seen[1] is not None and seen[1].files == ("known.toml", str(mine))
    # --ignore-known: the same entries judge, but a known failure still fails the run.
    assert main([*argv, "--known", str(mine), "--ignore-known"]) == 1
    assert seen[2] is not None and seen[2].ignore
    junit_xml = (tmp_path / "run-2" / "junit.xml").read_text()
    assert "mine-loss" in junit_xml and "<failure" not in junit_xml


def test_a_bad_known_file_is_one_line_and_creates_nothing(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    bad = Path("bad.toml")
    bad.write_text(known(id="x", extra='run = "bench"'))
    for command in (["crash", "--target", "ext2"], ["cut", "--target", "ext2"]):
        assert main([*command, "--known", str(bad), "--results", "r", "--db", "r/db.sqlite"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == "powercut: bad.toml: known entry 'x': run: 'bench': expected crash or cut"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_results_json_and_the_store_keep_the_raw_outcome_and_the_ids(tmp_path: Path) -> None:
    """run_crash end to end with a faked guest side: the sink, the final pass, results.json."""
    states = crash_states()
    results = crash_result(tmp_path, KnownList()).results

    def record(self):  # type: ignore[no-untyped-def]
        write_oracle(self.files.oracle_file)  # as the real record() copies the guest's oracle
        return FakeMachine(rundir=tmp_path / "vm"), {"entries": 10, "marks": 3}

    def check_all(self, todo, machine, total=None):  # type: ignore[no-untyped-def]
        for s in todo:
            self._store(results[s.key], len(todo))

    mp = pytest.MonkeyPatch()
    mp.setattr(CrashEngine, "record", record)
    mp.setattr(CrashEngine, "entries", lambda self: [])
    mp.setattr(CrashEngine, "plan_states", lambda self, entries: states)
    mp.setattr(CrashEngine, "check", check_all)
    mp.setattr(CrashEngine, "keep_artifacts", lambda self, result, entries: [])
    plan = CrashPlan(target="jfs", case="hand:write-fsync-rename")
    kl = klist(known(id="no-flush"), known(id="silent", findings='["hang"]'))
    try:
        with Store(tmp_path / "db.sqlite") as store, \
                run_lifecycle(RunSpec("crash", "t", plan={}), tmp_path, store) as run:
            run.environment["guest"] = {"kernel": DEBIAN_6_1}
            result = run_crash(ValidatedPlan(plan, plan.spec, WORKLOAD), run,
                               lambda *a: FakeMachine(), known=kl)
            rows = {row.entry_index: row for row in store.checks(run.run_id or 0)}
    finally:
        mp.undo()
    assert result.known is not None and result.known.is_known("1/prefix")
    assert (rows[1].outcome, rows[1].known) == ("data-loss", ["no-flush"])
    assert rows[0].known is None and rows[2].known is None  # ok; and partly explained
    doc = json.loads((run.run_dir / "results.json").read_text())
    assert doc["counts"]["data-loss"] == 1  # raw
    by_key = {s["key"]: s for s in doc["states"]}
    assert by_key["1/prefix"]["result"]["outcome"] == "data-loss"
    assert by_key["1/prefix"]["known"] == {"known": True, "ids": ["no-flush"], "unexplained": []}
    assert by_key["2/prefix"]["known"]["known"] is False
    assert by_key["0/prefix"]["known"] is None
    assert doc["known"]["kernel"] == DEBIAN_6_1 and doc["known"]["states"] == 1
    assert [n["id"] for n in doc["known"]["not_reproduced"]] == ["silent"]


def test_the_sink_stores_known_ids_beside_the_raw_outcome(tmp_path: Path) -> None:
    plan = CrashPlan(target="jfs", case="hand:write-fsync-rename")
    with Store(tmp_path / "db.sqlite") as store:
        run_id = store.start_run(command_line="t", study="t")
        sink = StoreSink(store, run_id, plan, tmp_path)
        sink.recorded({"entries": 10, "marks": 3}, crash_states())
        sink.known = matcher(klist(known(id="no-flush")))
        sink(check("1/prefix", Outcome.DATA_LOSS, finding()))
        sink(check("2/prefix", Outcome.OK))
        rows = store.checks(run_id)
    assert [(r.outcome, r.known) for r in rows] == [("data-loss", ["no-flush"]), ("ok", None)]


def test_the_store_migrates_an_old_database_and_merges_known_ids(tmp_path: Path) -> None:
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.executescript(MIGRATIONS[0])
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with Store(old) as store:
        assert store.schema_version == SCHEMA_VERSION >= 2
        run_id = store.start_run(command_line="t", study="t")
        rec = store.add_recording(run_id, "jfs", case_spec="c", seed=0, log_path=None, entries=1,
                                  marks=1)
        cp = store.add_crash_point(rec, entry_index=1, kind="mark", last_mark="pc-0")
        store.add_check(cp, variant="prefix", variant_seed=0, outcome="data-loss", known=["a"])
        store.add_recovery(run_id, "jfs", trial=0, outcome="hang", known=["b"])
        store.add_recovery(run_id, "jfs", trial=1, outcome="ok")
    merged = tmp_path / "merged.sqlite"
    with Store(merged) as into, Store(old) as shard:
        into.merge_from(shard)
        (run,) = into.runs()
        assert [c.known for c in into.checks(run.id)] == [["a"]]
        assert [r.known for r in into.recoveries(run.id)] == [["b"], None]


# --- power-cut runs ------------------------------------------------------------------------


def trial(target: str, n: int, outcome: Outcome, *findings: dict[str, Any]) -> TrialResult:
    d = DriveResult(promised=3, last_mark="pc-2", cut_op=5, cut_s=0.5, cut_swap_s=0.1,
                    in_flight_ops=1, in_flight_bytes=10, post_cut_ops=2, post_cut_errors={},
                    post_cut_promises=[], skipped_ops=0, ended_before_cut=False, workload_s=1.0)
    c = check(f"{target}#{n}", outcome, *findings)
    return TrialResult(target, n, CutPoint(before_op=5), outcome, d, c, checked_mark="pc-2")


def cut_result(tmp_path: Path, known_list: KnownList) -> cut.CutRunResult:
    trials = [trial("jfs", 0, Outcome.DATA_LOSS, finding()), trial("jfs", 1, Outcome.OK),
              trial("ext4/ordered", 0, Outcome.DATA_LOSS, finding())]
    result = cut.CutRunResult(tmp_path, cut.CutPlan(targets=("jfs", "ext4/ordered"),
                                                    case="random:10"), trials)
    for t in trials:
        m = result.known.setdefault(t.target, matcher(known_list, t.target, run="cut",
                                                      case="random:10", variants=()))
        m.judge(cut.trial_key(t), t.outcome, t.check)
    return result


def test_cut_reports_known_trials_and_fails_only_the_rest(tmp_path: Path) -> None:
    result = cut_result(tmp_path, klist(known(id="cut-loss", extra='run = "cut"'),
                                        known(id="gone", scope='fstype = "ext*"',
                                              findings='["hang"]')))
    assert [(t.target, t.trial) for t in cut_cli.failing_trials(result)] == [("ext4/ordered", 0)]
    doc = json.loads(json.dumps(result.to_dict()))
    jfs = next(s for s in doc["summaries"] if s["target"] == "jfs")
    assert (jfs["outcomes"], jfs["known"], jfs["failing"]) == ({"data-loss": 1, "ok": 1}, 1, 0)
    assert doc["trials"][0]["outcome"] == "data-loss"
    assert doc["trials"][0]["known"]["ids"] == ["cut-loss"]
    assert [n["id"] for r in doc["known"] for n in r["not_reproduced"]] == ["gone"]
    cases = cut_cli.junit_cases(result)
    assert [c.name for c in cases] == ["jfs #0", "jfs #1", "ext4/ordered #0", "known:gone"]
    assert [c.failure is not None for c in cases] == [False, False, True, False]
    assert cases[0].skipped is not None and "cut-loss" in cases[0].skipped
    assert cases[3].output.startswith("known entry gone did not reproduce here (fixed?)")
    text = _render(cut_cli.summary_table(
        [summarize(get_target(t), result.for_target(t)) for t in ("jfs", "ext4/ordered")],
        known={"jfs": 1, "ext4/ordered": 0}))
    assert "known" in text.splitlines()[2]
    assert "known (data-loss)" in _render(cut_cli.trial_table("jfs", result.for_target("jfs"), result))


def test_cut_with_ignore_known_fails_the_trials_known_behaviour_explains(tmp_path: Path) -> None:
    from framework.cli import build_parser

    argv = ["cut", "--target", "jfs", "--ignore-known"]
    assert crash_cli.known_list(build_parser(argv).parse_args(argv)).ignore
    entries = klist(known(id="cut-loss", extra='run = "cut"'))
    result = cut_result(tmp_path, dataclasses.replace(entries, ignore=True))
    # The entry still says which trial it explains, but the trial fails the run.
    assert [(t.target, t.trial) for t in cut_cli.failing_trials(result)] == [
        ("jfs", 0), ("ext4/ordered", 0)]
    assert json.loads(json.dumps(result.to_dict()))["trials"][0]["known"]["ids"] == ["cut-loss"]


def test_run_cut_judges_each_trial_and_stores_the_ids(tmp_path: Path) -> None:
    outcomes = {0: trial("jfs", 0, Outcome.DATA_LOSS, finding()), 1: trial("jfs", 1, Outcome.OK)}
    mp = pytest.MonkeyPatch()
    mp.setattr(cut.CutEngine, "run_trial", lambda self, target, n: outcomes[n])
    plan = cut.CutPlan(targets=("jfs",), case="random:10", trials=2)
    try:
        with Store(tmp_path / "db.sqlite") as store, \
                run_lifecycle(RunSpec("cut", "t", plan={}), tmp_path, store) as run:
            run.environment["guest"] = {"kernel": DEBIAN_6_1}
            result = cut.run_cut(cut.ValidatedCutPlan(plan, (get_target("jfs"),), WORKLOAD), run,
                                 lambda *a: FakeMachine(),
                                 known=klist(known(id="cut-loss", extra='run = "cut"')))
            rows = store.recoveries(run.run_id or 0)
    finally:
        mp.undo()
    assert [(r.outcome, r.known) for r in rows] == [("data-loss", ["cut-loss"]), ("ok", None)]
    assert result.is_known(result.trials[0]) and cut_cli.failing_trials(result) == []
    doc = json.loads((run.run_dir / "results.json").read_text())
    assert doc["trials"][0]["known"]["ids"] == ["cut-loss"]


# --- studies -------------------------------------------------------------------------------


def test_a_study_passes_its_known_files_to_crash_and_cut_steps(tmp_path: Path) -> None:
    (tmp_path / "k.toml").write_text(known(id="mine"))
    text = """
[study]
known = "k.toml"

[[step]]
command = "crash"
targets = ["jfs"]

[[step]]
command = "cut"
targets = ["jfs"]

[[step]]
command = "bench"
targets = ["ext2", "ext4/ordered"]
"""
    study = parse_study(text, source="s.toml", base=tmp_path)
    path = str((tmp_path / "k.toml").resolve())
    assert study.known_files == (path,)
    crash_step, cut_step, bench_step = study.steps
    assert crash_step.argv[:5] == ("crash", "--target", "jfs", "--known", path)
    assert cut_step.argv[:5] == ("cut", "--target", "jfs", "--known", path)
    assert "--known" not in bench_step.argv
    with pytest.raises(ConfigError, match=r"s.toml: \[study\] known 'nosuch.toml': no such file"):
        parse_study(text.replace("k.toml", "nosuch.toml"), source="s.toml", base=tmp_path)
    (tmp_path / "k.toml").write_text(known(id="mine", extra='run = "bench"'))
    with pytest.raises(ConfigError, match=r"k.toml: known entry 'mine': run: "):
        parse_study(text, source="s.toml", base=tmp_path)


def test_recheck_reports_a_known_state_and_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    class Guest(FakeMachine):
        def describe(self) -> dict[str, str]:
            return {"machine": "fake", "kernel": DEBIAN_6_1}

    def recheck(run_dir, key, factory):  # type: ignore[no-untyped-def]
        factory([], tmp_path / "vm", ("jfs",)).close()
        return get_target("jfs"), check(key, Outcome.DATA_LOSS, finding())

    write_oracle(tmp_path / "oracle.json")
    monkeypatch.setattr(crash_cli, "recheck", recheck)
    monkeypatch.setattr(crash_cli, "load_plan",
                        lambda run_dir: CrashPlan(target="jfs", case="hand:write-fsync-rename"))
    monkeypatch.setattr(crash_cli, "machine_factory",
                        lambda args: lambda disks, rundir, fstypes: Guest(rundir=tmp_path))
    assert main(["recheck", str(tmp_path), "1/prefix"]) == 0  # the shipped list explains it
    out = capsys.readouterr().out
    assert out.startswith("1/prefix: data-loss (known: jfs-no-cache-flush)")
    mine = tmp_path / "mine.toml"
    mine.write_text(known(id="only-subset", extra='variants = ["subset"]'))
    monkeypatch.setattr(crash_cli, "known_list", lambda args: load_known([mine], shipped=False))
    assert main(["recheck", str(tmp_path), "1/prefix"]) == 1
    assert "known" not in capsys.readouterr().out


def test_a_recheck_the_harness_could_not_finish_exits_2_neither_pass_nor_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def recheck(run_dir, key, factory):  # type: ignore[no-untyped-def]
        return get_target("ext4/ordered"), check(key, Outcome.ERROR, notes=[
            "crash-check: the guest went away (qemu exited)"])

    write_oracle(tmp_path / "oracle.json")
    monkeypatch.setattr(crash_cli, "recheck", recheck)
    monkeypatch.setattr(crash_cli, "machine_factory", lambda args: None)
    assert main(["recheck", str(tmp_path), "1/prefix"]) == 2
    assert capsys.readouterr().err.strip() == (
        "1/prefix: error: the state could not be checked: crash-check: the guest went away "
        "(qemu exited)")


def test_an_entry_about_an_op_the_workload_never_made_does_not_apply() -> None:
    from crashcases.known import KnownList, KnownMatcher, Scope, parse_known
    from recovery.targets import get_target

    text = '''
[[known]]
id = "only-fdatasync"
fstype = "ext2"
op = "fdatasync"
findings = ["data-loss"]
reason = "r"
source = "s"
'''
    known = KnownList(parse_known(text, source="t.toml"))
    scope = Scope(run="crash", target="ext2", fstype="ext2", kernel="6.1.0-56-amd64", case="x",
                  variants=("prefix",))
    only_sync = KnownMatcher(known, scope, get_target("ext2"), {"pc-0": "sync"})
    assert only_sync.applicable == () and only_sync.not_reproduced() == []
    with_it = KnownMatcher(known, scope, get_target("ext2"), {"pc-0": "sync", "pc-1": "fdatasync"})
    assert [e.id for e in with_it.applicable] == ["only-fdatasync"]
    assert [r["id"] for r in with_it.not_reproduced()] == ["only-fdatasync"]


def test_every_shipped_entry_says_its_upstream_fix_or_when_none_was_found() -> None:
    for e in load_known(()).entries:
        assert e.fix or e.no_fix_checked, e.id
        assert e.upstream.startswith(("fixed upstream by", "no upstream fix (checked 20")), e.id


def test_every_shipped_report_link_is_a_report_folder_of_the_repository() -> None:
    root = Path(__file__).resolve().parents[2]
    linked = [e for e in load_known(()).entries if e.report]
    assert linked  # the fast-commit entries link theirs
    for e in linked:
        assert (root / e.report / "report.md").is_file(), e.id
        assert (root / e.report / "workload.json").is_file(), e.id
        meta = root / e.report / "report.json"  # written by export --report, with its tests
        assert not meta.exists() or json.loads(meta.read_text())["tests"], e.id
        assert f"report: {e.report}/report.md" in e.reference


@pytest.mark.parametrize("extra,message", [
    ('report = "reports/x"', "expected docs/reports/NAME"),
    ('report = "docs/reports/../etc"', "expected docs/reports/NAME"),
    ('checked_on = "7.3.4"', "expected 'RELEASE YYYY-MM-DD'"),
    ('checked_on = ["6.1.0-56-amd64 2026-11-24", "7.3.4"]', "'7.3.4': expected 'RELEASE"),
    ('checked_on = []', "expected a string or a non-empty list"),
])
def test_a_bad_report_field_is_one_line(extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_known(known(extra=extra), source="mine.toml")


@pytest.mark.parametrize("extra,message", [
    ('fix = "xyz"', "expected a commit id"),
    ('fix = "0123456789ab"', "a fix needs fix_subject and fixed_in"),
    ('fix = "0123456789ab"\nfix_subject = "x: y"\nfixed_in = "6.15"\nno_fix_checked = "2026-11-26"',
     "not both"),
    ('no_fix_checked = "yesterday"', "expected a date"),
])
def test_a_bad_upstream_field_is_one_line(extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_known(known(extra=extra), source="mine.toml")


def test_a_fixed_entry_that_did_not_reproduce_names_its_fix() -> None:
    fixed = known(id="gone", extra='fix = "0123456789abcdef"\nfix_subject = "jfs: flush"\n'
                                   'fixed_in = "6.15"\nfixed_in_stable = ["6.12.80"]')
    m = matcher(klist(fixed))
    m.judge("1/prefix", Outcome.OK, check("1/prefix", Outcome.OK), "prefix")
    (silent,) = m.not_reproduced()
    assert silent["message"].endswith('fixed upstream by 0123456789ab "jfs: flush" '
                                      '(Linux 6.15, 6.12.80)')


def test_a_file_fsck_cleared_on_ext2_is_known_only_when_fsck_repaired_the_state() -> None:
    """ext-nojournal-shared-inode-block: on 6.12.117 a file sync made durable was lost
    because e2fsck cleared its inode (an inode table block written with another inode's
    unwritten indirect block). It explains that only after an fsck repair; the same loss on
    a state that fscks clean (a kernel that did not write what fsync promised, the zoo's
    ext4-nojournal-fsync-inode) stays a failure."""
    shipped = load_known(())
    m = matcher(shipped, "ext4/nojournal", kernel="6.12.117")
    lost = finding(mark="pc-0")
    repaired = check("5/prefix", Outcome.DATA_LOSS, lost, fsck_check="corrupt",
                     fsck_repair="repaired")
    clean = check("6/prefix", Outcome.DATA_LOSS, lost)
    assert judged_known(m, repaired) and m.known_ids("5/prefix") == (
        "ext-nojournal-shared-inode-block",)
    assert not judged_known(m, clean)
    with pytest.raises(ConfigError, match='fsck: .*expected "repaired"'):
        parse_known(known(extra='fsck = "clean"'), source="mine.toml")


def test_the_external_journal_entry_explains_ext3_and_ext4_logdev_but_not_internal_journals(
        ) -> None:
    """ext4-external-journal-fsync-no-data-flush: an overwrite fsynced on ext3/logdev (19 of
    192 prefix states on 6.12.117, none with the jbd2 change) is the same missing data-disk
    flush as on ext4/logdev; the same loss with the journal inside stays a failure."""
    shipped = load_known(())
    lost = finding(mark="pc-0")
    for target, applies in (("ext3/logdev", True), ("ext4/logdev", True), ("ext3", False),
                            ("ext4/ordered", False)):
        m = matcher(shipped, target, kernel="6.12.117")
        assert judged_known(m, check("5/prefix", Outcome.DATA_LOSS, lost)) is applies, target
        if applies:
            assert m.known_ids("5/prefix") == ("ext4-external-journal-fsync-no-data-flush",)


def test_the_xfs_sync_entry_explains_old_data_after_sync_only() -> None:
    """xfs-sync-overwrite-no-flush: a block that holds older data after sync or syncfs on
    xfs (the overwrite still in the disk's cache, 6.1.0-56 and 7.3.4) is known; the same after
    fsync or fdatasync, zeros after sync, old data after sync on ext4, a kernel past the range
    checked and a workload other than the data stream it was triaged in stay failing."""
    shipped = load_known(())
    old = finding("wrong-content", mark="pc-1")  # pc-1 follows the sync of WORKLOAD
    for kernel in ("6.1.0-56-amd64", "7.3.4+deb13-amd64"):
        m = matcher(shipped, "xfs", case="ranges:600", kernel=kernel)
        assert judged_known(m, check("5/prefix", Outcome.DATA_LOSS, old)), kernel
        assert m.known_ids("5/prefix") == ("xfs-sync-overwrite-no-flush",)
    m = matcher(shipped, "xfs", case="ranges:600", kernel="6.1.0-56-amd64")
    for other in (finding("wrong-content", mark="pc-0"), finding("wrong-content", mark="pc-2"),
                  finding("data-loss", mark="pc-1")):
        assert not judged_known(m, check("6/prefix", Outcome.DATA_LOSS, other)), other
    assert not judged_known(matcher(shipped, "ext4/ordered", case="ranges:600",
                                    kernel="6.1.0-56-amd64"),
                            check("7/prefix", Outcome.DATA_LOSS, old))
    assert not judged_known(matcher(shipped, "xfs", case="ranges:600", kernel="7.4.1"),
                            check("8/prefix", Outcome.DATA_LOSS, old))
    assert not judged_known(matcher(shipped, "xfs", case="gen:seq2", kernel="6.1.0-56-amd64"),
                            check("9/prefix", Outcome.DATA_LOSS, old))


def test_the_fast_commit_directory_count_entry_is_matched_by_what_e2fsck_says() -> None:
    """ext4-fc-replay-dir-counts explains a recovered fast_commit state in any workload when
    e2fsck reports only a directory's counts; another problem beside them (a replay bug's
    multiply-claimed blocks) keeps the state failing, and so does output cut short."""
    from crashcases.known import fsck_problems

    said = ("e2fsck -f -n /dev/dm-1 (exit 4):\nPass 1: Checking inodes, blocks, and sizes\n"
            "Inode 17, i_blocks is 0, should be 2.  Fix? no\n\nPass 2: Checking directory "
            "structure\nPass 4: Checking reference counts\n"
            "Inode 13 ref count is 2, should be 3.  Fix? no\n"
            "Pass 5: Checking group summary information\n"
            "Directories count wrong for group #0 (5, counted=6).\nFix? no\n\n"
            "/dev/dm-1: 17/32768 files (0.0% non-contiguous), 13965/131072 blocks\n")
    assert fsck_problems(said) == [
        "Inode 17, i_blocks is 0, should be 2.  Fix? no",
        "Inode 13 ref count is 2, should be 3.  Fix? no",
        "Directories count wrong for group #0 (5, counted=6).",
    ]  # not the passes, the bare "Fix? no", the device's summary
    shipped = load_known(())
    m = matcher(shipped, "ext4/fast_commit", case="gen:chain", kernel="6.12.117")

    def recovered(key: str, output: str) -> CheckResult:
        return check(key, Outcome.RECOVERED, fsck_check="corrupt", fsck_repair="repaired",
                     fsck_check_output=output)

    assert judged_known(m, recovered("5/prefix", said))
    assert m.known_ids("5/prefix") == ("ext4-fc-replay-dir-counts",)
    doubly = said.replace("Pass 2:", "Multiply-claimed block(s) in inode 12: 1090\nPass 2:")
    assert not judged_known(m, recovered("6/prefix", doubly))
    cut = "e2fsck -f -n /dev/dm-1 (exit 4):\n" + "Inode 13 ref count is 2, should be 3.  Fix? no\n" * 40
    assert fsck_problems(cut) is None and not judged_known(m, recovered("7/prefix", cut))
    assert not judged_known(matcher(shipped, "ext4/fast_commit", case="gen:chain",
                                    kernel="5.10.0-30-amd64"), recovered("8/prefix", said))
    with pytest.raises(ConfigError, match="fsck_says: .*not a regular expression"):
        parse_known(known(extra='fsck_says = "("'), source="mine.toml")


#: fsck.f2fs's dry run on a real crash state of f2fs (6.1.0-56, f2fs-tools 1.15): `mkdir s/d`,
#: `creat s/d/f1`, sync, `rename s/d s/e/pa`, `creat s/d`, `fsync s/d`; the version lines cut.
F2FS_ROLL_FORWARD_FSCK = """fsck.f2fs -f --dry-run /dev/dm-0 (exit 255):
Info: Force to fix corruption
Info: Dry run
Info: MKFS version
  "Linux version 6.1.0-56-amd64"
Info: FSCK version
  from "Linux version 6.1.0-56-amd64"
    to "Linux version 6.1.0-56-amd64"
Info: superblock features = 0 :
Info: superblock encrypt level = 0, salt = 00000000000000000000000000000000
Info: total FS sectors = 262144 (128 MB)
Info: checkpoint state = 45 :  crc compacted_summary unmount
NID[0x7] is unreachable, blkaddr:0x1201
[FSCK] Max image size: 22 MB, Free space: 61 MB
[FSCK] Unreachable nat entries                        [Fail] [0x1]
[FSCK] SIT valid block bitmap checking                [Fail]
[FSCK] Hard link checking for regular file            [Ok..] [0x0]
[FSCK] valid_block_count matching with CP             [Fail] [0x5]
[FSCK] valid_node_count matching with CP (de lookup)  [Fail] [0x4]
[FSCK] valid_node_count matching with CP (nat lookup) [Ok..] [0x5]
[FSCK] valid_inode_count matched with CP              [Fail] [0x4]
[FSCK] free segment_count matched with CP             [Ok..] [0x31]
[FSCK] next block offset is free                      [Ok..]
[FSCK] fixing SIT types
[FSCK] other corrupted bugs                           [Ok..]
Do you want to restore lost files into ./lost_found/? [Y/N] [ASSERT] (fsck_verify:3330) res >= 0
"""


def test_the_f2fs_replaced_directory_entry_is_matched_by_what_fsck_says() -> None:
    """f2fs-roll-forward-replaces-dir explains a corrupt f2fs state whose fsck reports only
    unreachable nodes and the counts they put off; another failed check beside them, a lost
    promise, or a kernel outside the entry's range keeps the state failing."""
    from crashcases.known import fsck_problems

    problems = fsck_problems(F2FS_ROLL_FORWARD_FSCK)
    assert problems is not None and problems[0] == "NID[0x7] is unreachable, blkaddr:0x1201"
    assert not [p for p in problems if p.startswith("Info:") or "[Ok..]" in p or '"' in p]
    assert len(problems) == 8  # the NID, five failed checks, the fix and the question
    shipped = load_known(())
    m = matcher(shipped, "f2fs", case="gen:chain", kernel="6.12.117")

    def corrupt(key: str, output: str, *findings: dict[str, Any]) -> CheckResult:
        outcome = Outcome.DATA_LOSS if findings else Outcome.CORRUPT
        return check(key, outcome, *findings, fsck_check="failed", fsck_repair="failed",
                     fsck_check_output=output)

    assert judged_known(m, corrupt("5/prefix", F2FS_ROLL_FORWARD_FSCK))
    assert m.known_ids("5/prefix") == ("f2fs-roll-forward-replaces-dir",)
    hard_links = F2FS_ROLL_FORWARD_FSCK.replace("regular file            [Ok..] [0x0]",
                                                "regular file            [Fail] [0x1]")
    assert not judged_known(m, corrupt("6/prefix", hard_links))
    # lost although sync (pc-1) made it durable: no entry explains that
    lost = {"kind": "data-loss", "broken": "missing", "path": "s/d/f1", "mark": "pc-1"}
    assert not judged_known(m, corrupt("7/prefix", F2FS_ROLL_FORWARD_FSCK, lost))
    assert not judged_known(matcher(shipped, "f2fs", case="gen:chain", kernel="5.10.0"),
                            corrupt("8/prefix", F2FS_ROLL_FORWARD_FSCK))
