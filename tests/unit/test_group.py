"""Failing states group into distinct findings: the same cause groups, another does not."""

from __future__ import annotations

from pathlib import Path

from crashcases.check import CheckResult
from crashcases.execute import execute
from crashcases.group import Grouper, findings_words, group_states, normalise
from crashcases.oracle.finding import Broken, Finding, FindingKind
from crashcases.vocabulary import Outcome
from crashcases.workload.ops import Op, OpKind, Workload

K = OpKind


def workload() -> Workload:
    """Three packed sequences: s0000 and s0001 do the same thing to other names and sizes,
    s0002 something else."""
    return Workload("group", 3, (
        Op(K.MKDIR, "s0000"), Op(K.CREAT, "s0000/f"), Op(K.WRITE, "s0000/f", length=100),
        Op(K.FSYNC, "s0000/f"),  # pc-0
        Op(K.MKDIR, "s0001"), Op(K.CREAT, "s0001/g"), Op(K.WRITE, "s0001/g", length=9000),
        Op(K.FSYNC, "s0001/g"),  # pc-1
        Op(K.MKDIR, "s0002"), Op(K.MKDIR, "s0002/d"), Op(K.FSYNC_DIR, "s0002"),  # pc-2
    ))


def missing(path: str, mark: str, op: int) -> dict:
    return Finding.make(FindingKind.DATA_LOSS, path, Broken.MISSING, expected=("file #1",),
                        mark=mark, op=op, promise=f"promised at {mark} as of op {op}").to_dict()


def result(key: str, *findings: dict, outcome: Outcome = Outcome.DATA_LOSS) -> CheckResult:
    return CheckResult(key=key, outcome=outcome, mount_ok=outcome is not Outcome.UNMOUNTABLE,
                       findings=list(findings), explanation=f"why {key}")


def test_states_with_the_same_cause_group_and_others_do_not(tmp_path: Path) -> None:
    w = workload()
    root = tmp_path / "tree"
    root.mkdir()
    oracle = execute(w, root, lambda name: None)
    grouper = Grouper("ext4", w, oracle)
    states = [
        ("10/prefix", "pc-1", result("10/prefix", missing("s0000/f", "pc-0", 3))),
        ("20/prefix", "pc-1", result("20/prefix", missing("s0001/g", "pc-1", 7))),
        ("21/prefix", "pc-2", result("21/prefix", missing("s0002/d", "pc-2", 10))),
        # The same ops as the first two, but zeros where data was promised: another finding.
        ("22/prefix", "pc-2", result("22/prefix", Finding.make(
            FindingKind.DATA_LOSS, "s0001/g", Broken.BLOCK, block=0, block_bytes=4096, size=9000,
            found="zeros", mark="pc-1", op=7, promise="promised at pc-1 as of op 7").to_dict())),
        ("30/prefix", "pc-2", result("30/prefix", outcome=Outcome.UNMOUNTABLE)),
    ]
    groups = group_states(states, grouper.signature, grouper.length)
    assert [g.states for g in groups] == [["10/prefix", "20/prefix"], ["21/prefix"],
                                          ["22/prefix"], ["30/prefix"]]
    same = groups[0]
    assert same.signature.promise == "missing name" and same.signature.durability == "fsync"
    assert same.signature.ops == ("mkdir .", "creat n1", "write n1", "fsync n1")
    assert same.representative == "10/prefix" and same.explanation == "why 10/prefix"
    assert groups[1].signature.durability == "fsync_dir"
    assert groups[2].signature.promise == "zeros"
    assert groups[3].signature.promise == "unmountable"
    assert groups[3].signature.ops == ("mkdir .", "mkdir n1", "fsync_dir .")
    assert findings_words(groups) == "4 findings (5 states)"


def test_names_are_normalised_by_first_appearance_and_the_namespace_dropped() -> None:
    ops = [Op(K.RENAME, "s0042/a/x", dst="s0042/b/x"), Op(K.FALLOCATE, "s0042/b/x"),
           Op(K.SYNC)]
    assert normalise(ops) == ("rename n1/n2 n3/n2", "fallocate n3/n2 allocate", "sync .")


def test_a_planted_flaky_checker_is_reported_as_fails_f_of_t_and_kept_in_the_store(
        tmp_path: Path) -> None:
    """Positive control of the reruns: a checker that fails every other time makes a finding
    "fails 2/4, flaky 50%", one that always fails "fails 3/3, reliable"; every rerun is a
    row in the store, and the CLI's JUnit and results.json say f/t."""
    import json
    import xml.etree.ElementTree as ET

    from crashcases.crash.engine import CrashEngine
    from crashcases.crash.plan import CrashPlan, CrashRunResult
    from crashcases.crash.points import CrashPoint, CrashState, Variant
    from crashcases.crash.results import save_results
    from crashcases.crash.rundir import CrashRunDir
    from crashcases.group import FindingGroup, Signature
    from crashcases.vocabulary import CrashPointKind, VariantKind
    from framework.cli import crash as crash_cli
    from framework.core import junit
    from framework.core.store import Store
    from recovery.targets import get_target

    states = [CrashState(CrashPoint(i, CrashPointKind.MARK, f"pc-{i}", i - 1),
                         Variant(VariantKind.PREFIX), i) for i in (1, 2)]
    result = CrashRunResult(tmp_path, CrashPlan(target="ext4/ordered", case="hand:new-ops",
                                                reruns=3), {"entries": 3}, states)
    for s in states:
        result.results[s.key] = result_for = CheckResult(key=s.key, outcome=Outcome.DATA_LOSS,
                                                         explanation="lost")
    assert result_for.outcome is Outcome.DATA_LOSS
    sig = Signature("ext4", "missing name", "fsync", ("creat n1", "fsync n1"))
    flaky = FindingGroup(sig, [states[0].key], states[0].key)
    steady = FindingGroup(Signature("ext4", "zeros", "fsync", ()), [states[1].key], states[1].key)
    result.findings = [flaky, steady]

    calls = {states[0].key: 0, states[1].key: 0}

    def planted(self, slot, state):  # fails on odd calls for the flaky one, always for the other
        calls[state.key] += 1
        bad = state.key == states[1].key or calls[state.key] % 2 == 0
        return CheckResult(key=state.key, outcome=Outcome.DATA_LOSS if bad else Outcome.OK)

    engine = CrashEngine.__new__(CrashEngine)
    engine.plan, engine.target = result.plan, get_target("ext4/ordered")
    engine.files, engine.sizes, engine.fstypes = CrashRunDir(tmp_path), {}, ("ext4",)
    engine.factory = lambda *a: (_ for _ in ()).throw(AssertionError("no guest boots here"))
    engine.two_disks = False

    class Run:
        def __init__(self, store: Store) -> None:
            self.store, self.run_id = store, store.start_run(
                command_line="t", study="t", environment={}, git_revision=None, kind="crash")
            self.saved: dict = {}

        def save_results(self, data: dict) -> None:
            self.saved["results.json"] = data

    with Store(tmp_path / "db.sqlite") as store:
        run = Run(store)
        original = CrashEngine._recheck
        CrashEngine._recheck = planted  # type: ignore[method-assign]
        try:
            engine.rerun_findings(result, run)  # type: ignore[arg-type]
        finally:
            CrashEngine._recheck = original  # type: ignore[method-assign]
        rows = store.reruns(run.run_id)
    assert flaky.rate is not None and steady.rate is not None
    assert (flaky.rate.failed, flaky.rate.runs) == (2, 4) and not flaky.rate.reliable
    assert flaky.rate.words() == "fails 2/4, flaky 50%"
    assert steady.rate.words() == "fails 4/4, reliable"
    assert [failed for _, failed in rows[states[0].key]] == [False, True, False]
    assert len(rows[states[1].key]) == 3
    save_results(result, run)  # type: ignore[arg-type]
    saved = json.loads(json.dumps(run.saved["results.json"], default=str))
    assert [f["fails"]["words"] for f in saved["findings"]] == ["fails 2/4, flaky 50%",
                                                                 "fails 4/4, reliable"]
    path = tmp_path / "junit.xml"
    junit.write(path, "crash", crash_cli.junit_cases(result, get_target("ext4/ordered")))
    messages = [f.get("message", "") for f in ET.parse(path).getroot().iter("failure")]
    assert any("(fails 2/4, flaky 50%)" in m for m in messages), messages
