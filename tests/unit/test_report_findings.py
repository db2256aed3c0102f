"""report, compare and ci speak in findings first: failing states stored by a crash run
group by the signature crash gave them, "fails f/t" comes from the store's reruns, and
compare says which findings are new, gone and still there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crashcases.check import CheckResult
from crashcases.crash.engine import CrashEngine
from crashcases.crash.plan import CrashPlan, CrashRunResult, validate_plan
from crashcases.crash.points import CrashPoint, CrashState, Variant
from crashcases.crash.run import StoreSink, group_findings
from crashcases.crash.rundir import CrashRunDir
from crashcases.execute import execute
from crashcases.group import Grouper
from crashcases.oracle.finding import Broken, Finding, FindingKind
from crashcases.oracle.log import OracleLog
from crashcases.vocabulary import CrashPointKind, Outcome, VariantKind
from framework.cli import main
from framework.core import rundir
from framework.core.store import Store
from framework.report.compare import StateStatus, compare_results
from framework.report.findings import findings_of
from framework.report.results import load
from recovery.targets import get_target
from tests.unit.test_group import workload

EXT4 = {"name": "ext4/ordered", "fstype": "ext4", "mkfs_options": [], "mount_options": [],
        "journal": "internal"}
PLAN = CrashPlan(target="ext4/ordered", case="hand:new-ops", reruns=2)


def missing(path: str, mark: str, op: int) -> dict:
    return Finding.make(FindingKind.DATA_LOSS, path, Broken.MISSING, expected=("file #1",),
                        mark=mark, op=op, promise=f"promised at {mark} as of op {op}").to_dict()


def zeros(path: str, mark: str, op: int) -> dict:
    return Finding.make(FindingKind.DATA_LOSS, path, Broken.BLOCK, block=0, block_bytes=4096,
                        size=9000, found="zeros", mark=mark, op=op,
                        promise=f"promised at {mark} as of op {op}").to_dict()


def state(entry: int, mark: str) -> CrashState:
    return CrashState(CrashPoint(entry, CrashPointKind.MARK, mark, entry - 1),
                      Variant(VariantKind.PREFIX), entry)


def failing(key: str, *findings: dict, outcome: Outcome = Outcome.DATA_LOSS) -> CheckResult:
    return CheckResult(key=key, outcome=outcome, mount_ok=True, findings=list(findings),
                       explanation=f"why {key}")


#: The states of test_group's workload: 10 and 20 lose a name each after the same ops on
#: other names and sizes (one finding); 21 and 22 fail for other causes.
STATES = [(state(5, "pc-0"), None), (state(10, "pc-1"), ("s0000/f", "pc-0", 3)),
          (state(20, "pc-1"), ("s0001/g", "pc-1", 7)), (state(21, "pc-2"), ("s0002/d", "pc-2", 10))]


def crash_run(store: Store, tmp_path: Path, results: dict[str, CheckResult], *,
              reruns: dict[str, list[bool]] | None = None) -> int:
    """A crash run stored as crash stores one: through its StoreSink, with the Grouper that
    signs each failing state; ``reruns``: per state key, whether each rerun failed."""
    w = workload()
    root = tmp_path / f"tree-{len(store.runs())}"
    root.mkdir()
    oracle = execute(w, root, lambda name: None)
    run_id = store.start_run(command_line="powercut crash", study="crash ext4/ordered",
                             kind="crash", environment={"run_dir": str(tmp_path / "gone")})
    store.add_target(run_id, "ext4/ordered", EXT4)
    states = [s for s, _ in STATES] + [state(22, "pc-2"), state(30, "pc-2")]
    sink = StoreSink(store, run_id, PLAN, tmp_path / "run")
    sink.recorded({"entries": 40, "marks": 3}, states, Grouper("ext4", w, oracle))
    for s in states:
        sink(results.get(s.key) or CheckResult(key=s.key, outcome=Outcome.OK, mount_ok=True))
    for key, again in (reruns or {}).items():
        for attempt, bad in enumerate(again, 1):
            store.add_rerun(run_id, key, attempt=attempt,
                            outcome="data-loss" if bad else "ok", failed=bad)
    return run_id


def five_failing() -> dict[str, CheckResult]:
    return {"10/prefix": failing("10/prefix", missing("s0000/f", "pc-0", 3)),
            "20/prefix": failing("20/prefix", missing("s0001/g", "pc-1", 7)),
            "21/prefix": failing("21/prefix", missing("s0002/d", "pc-2", 10)),
            # The same ops as the first two, but zeros where data was promised.
            "22/prefix": failing("22/prefix", zeros("s0001/g", "pc-1", 7)),
            "30/prefix": failing("30/prefix", outcome=Outcome.UNMOUNTABLE)}


def test_states_with_the_same_cause_are_one_finding_in_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    with Store(db) as store:
        run_id = crash_run(store, tmp_path, five_failing())
        (row,) = [c for c in store.checks(run_id) if c.state == "10/prefix"]
        assert row.signature is not None and row.signature["promise"] == "missing name"
        assert row.ops_to_crash == 8 and row.explanation == "why 10/prefix"
    assert main(["report", str(run_id), "--db", str(db), "--json",
                 "--json-file", str(tmp_path / "r.json"), "-o", str(tmp_path / "r.html")]) == 0
    crash = json.loads(capsys.readouterr().out)["crash"]
    assert crash["summary"] == "4 findings (5 states) new"
    found = crash["findings"]
    assert [f["states"] for f in found] == [2, 1, 1, 1]
    same = found[0]
    assert same["words"] == ("ext4: missing name after fsync (ops since the durable point "
                             "before: mkdir .; creat n1; write n1; fsync n1)")
    assert [k["state"] for k in same["state_keys"]] == ["10/prefix", "20/prefix"]
    assert same["representative"]["state"] == "10/prefix"  # the shortest: pc-0's ops
    assert same["explanation"] == "why 10/prefix" and same["fails"] is None
    assert same["reproducer"].endswith(" 10/prefix")
    assert [f["signature"]["promise"] for f in found[1:]] == ["missing name", "zeros",
                                                              "unmountable"]
    # States second, each naming its finding.
    assert [(s["state"], s["finding"]) for s in crash["failing"]] == [
        ("10/prefix", 1), ("20/prefix", 1), ("21/prefix", 2), ("22/prefix", 3),
        ("30/prefix", 4)]
    html = (tmp_path / "r.html").read_text()
    assert html.index("Findings: 4 findings (5 states) new") < html.index("Failing states (5)")
    assert main(["report", str(run_id), "--db", str(db), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "findings: 4 findings (5 states) new" in out
    assert out.index("findings: 4 findings") < out.index("failing states (5), by finding:")
    assert "  [1] data-loss   ext4/ordered hand:new-ops 20/prefix: why 20/prefix" in out


def planted_flaky(tmp_path: Path) -> tuple[Path, int]:
    """A crash run with --reruns 2 whose checker fails the missing-name finding only the
    first time (rerun by the engine's own rerun_findings, in no guest)."""
    results = five_failing()
    db = tmp_path / "r.db"
    with Store(db) as store:
        run_id = crash_run(store, tmp_path, results)
        run = CrashRunResult(tmp_path, PLAN, {"entries": 40}, [s for s, _ in STATES]
                             + [state(22, "pc-2"), state(30, "pc-2")], results=results)
        w = workload()
        (tmp_path / "again").mkdir()
        run.findings = group_findings(run, w, execute(w, tmp_path / "again", lambda n: None))

        def planted(self, slot, s):  # the flaky finding passes when checked again
            flaky = s.key in ("10/prefix", "20/prefix")
            return CheckResult(key=s.key, outcome=Outcome.OK if flaky else Outcome.DATA_LOSS)

        engine = CrashEngine.__new__(CrashEngine)
        engine.plan, engine.target = PLAN, get_target("ext4/ordered")
        engine.files, engine.sizes, engine.fstypes = CrashRunDir(tmp_path), {}, ("ext4",)
        engine.factory = lambda *a: (_ for _ in ()).throw(AssertionError("no guest boots"))
        engine.two_disks = False

        class Run:
            pass

        holder = Run()
        holder.store, holder.run_id = store, run_id  # type: ignore[attr-defined]
        mp = pytest.MonkeyPatch()
        mp.setattr(CrashEngine, "_recheck", planted)
        try:
            engine.rerun_findings(run, holder)  # type: ignore[arg-type]
        finally:
            mp.undo()
    return db, run_id


def test_a_planted_flaky_checker_reaches_the_report_as_fails_1_of_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Positive control: crash --reruns 2 with a checker that fails the state only the first
    time: the report (terminal, JSON, HTML) says "fails 1/3, flaky 33%"; one that always
    fails says "fails 3/3, reliable"."""
    db, run_id = planted_flaky(tmp_path)
    assert main(["report", str(run_id), "--db", str(db), "--json", "-o",
                 str(tmp_path / "r.html")]) == 0
    crash = json.loads(capsys.readouterr().out)["crash"]
    fails = {f["representative"]["state"]: f["fails"] for f in crash["findings"]}
    assert fails["10/prefix"]["words"] == "fails 1/3, flaky 33%"
    assert (fails["10/prefix"]["failed"], fails["10/prefix"]["runs"]) == (1, 3)
    assert fails["21/prefix"]["words"] == "fails 3/3, reliable"
    (rerun_state,) = [s for s in crash["failing"] if s["state"] == "10/prefix"]
    assert rerun_state["fails"] == "fails 1/3, flaky 33%"
    assert "fails 1/3, flaky 33%" in (tmp_path / "r.html").read_text()
    assert main(["report", str(run_id), "--db", str(db), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "ext4/ordered: 2 states, fails 1/3, flaky 33%, e.g. hand:new-ops 10/prefix" in out


def test_compare_says_which_findings_are_new_gone_and_still_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """By signature, not by state: A loses s0000/f at pc-1, B loses s0001/g at pc-1 (another
    state, the same finding: still there); A's zeros are gone; B's unmountable state is new."""
    db = tmp_path / "r.db"
    with Store(db) as store:
        a = crash_run(store, tmp_path, {
            "10/prefix": failing("10/prefix", missing("s0000/f", "pc-0", 3)),
            "22/prefix": failing("22/prefix", zeros("s0001/g", "pc-1", 7))})
        b = crash_run(store, tmp_path, {
            "20/prefix": failing("20/prefix", missing("s0001/g", "pc-1", 7)),
            "30/prefix": failing("30/prefix", outcome=Outcome.UNMOUNTABLE)},
            reruns={"30/prefix": [True, True]})
        c = compare_results(load(store, str(a)), load(store, str(b)))
    status = {f.signature.promise: f.status for f in c.findings}
    assert status == {"missing name": StateStatus.STILL, "zeros": StateStatus.GONE,
                      "unmountable": StateStatus.NEW}
    (new,) = c.new_findings
    assert new.finding.rate is not None and new.finding.rate.words() == "fails 3/3, reliable"
    # By mark every failing state of B had a failing state in A: only the findings tell the
    # unmountable one is new, and a new finding is a regression.
    assert not c.new_states and c.regressed
    assert main(["compare", str(a), str(b), "--db", str(db)]) == 1
    out = capsys.readouterr().out
    assert ("findings: 1 finding (1 state) new in B, 1 finding (1 state) still there, "
            "1 finding (1 state) gone in B") in out
    assert out.index("findings:") < out.index("crash states:")
    assert "NEW   ext4: unmountable after fsync_dir" in out
    assert "ext4/ordered: A 0, B 1 states, fails 3/3, reliable, e.g. hand:new-ops 30/prefix" in out
    assert "verdict: REGRESSION (1 finding (1 state) new, 0 new failing states;" in out
    assert main(["compare", str(a), str(b), "--db", str(db), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["new_findings"] == 1 and doc["counts"]["gone_findings"] == 1
    assert [f["status"] for f in doc["findings"]] == ["still failing", "new", "gone"]


def test_states_stored_without_signatures_are_signed_from_the_run_directory_or_by_kind(
        tmp_path: Path) -> None:
    """A database from before signatures: while the run directory has its plan and oracle
    the states are signed as crash signs them; without it, by kind alone, and it says so."""
    plan = CrashPlan(target="ext4/ordered", case="hand:write-fsync-rename")
    w = validate_plan(plan).workload
    run_dir = tmp_path / "crash-run"
    (run_dir / "tree").mkdir(parents=True)
    oracle = execute(w, run_dir / "tree", lambda name: None)
    (run_dir / rundir.ORACLE).write_text(oracle.to_json())
    (run_dir / rundir.PLAN).write_text(json.dumps(plan.to_dict()))
    mark = OracleLog.load(run_dir / rundir.ORACLE).mark_records[0]
    db = tmp_path / "r.db"
    with Store(db) as store:
        ids = []
        for where in (run_dir, tmp_path / "gone"):
            run_id = store.start_run(command_line="powercut crash", study="crash", kind="crash",
                                     environment={"run_dir": str(where)})
            store.add_target(run_id, "ext4/ordered", EXT4)
            rec = store.add_recording(run_id, "ext4/ordered", case_spec=plan.case, seed=0,
                                      log_path=None, entries=10, marks=1)
            cp = store.add_crash_point(rec, entry_index=4, kind="mark", last_mark=mark.name)
            store.add_check(cp, variant="subset", variant_seed=5, outcome="data-loss",
                            findings=[missing(mark.path, mark.name, mark.op)])
            ids.append(run_id)
        signed, by_kind = (findings_of(load(store, str(i))) for i in ids)
    (f,) = signed
    assert f.signature.durability == mark.kind and f.signature.ops
    assert f.representative.key == "4/subset:5"  # the key, made from entry and variant
    assert f.representative.explanation.startswith("data-loss: ")
    (g,) = by_kind
    assert g.words == "ext4: missing name (by kind alone: stored without its operations)"


def test_the_findings_report_opens_in_chromium(tmp_path: Path) -> None:
    import shutil
    import subprocess

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (Debian package chromium; 'make setup' installs it)")
    db, run_id = planted_flaky(tmp_path)
    html = tmp_path / "report.html"
    assert main(["report", str(run_id), "--db", str(db), "-o", str(html)]) == 0
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", html.as_uri()], capture_output=True, text=True,
                         timeout=120)
    page = dom.stdout
    assert 'id="findings">Findings: 4 findings (5 states) new' in page
    table = page[page.index('<table class="findings">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 5  # a header and four findings
    assert "fails 1/3, flaky 33%" in table and "fails 3/3, reliable" in table
    assert page.index('class="findings"') < page.index("Failing states (5)")


def test_a_recheck_with_db_is_kept_as_the_next_rerun_and_counts_in_fails_f_of_t(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What ci's reruns go through (powercut recheck RUN_DIR KEY --db DB): each check is
    stored as the next rerun of the state, so the report's "fails f/t" counts it."""
    from framework.cli.crash import store_rerun
    from framework.core.errors import ConfigError

    db = tmp_path / "r.db"
    with Store(db) as store:
        run_id = crash_run(store, tmp_path, {"10/prefix": failing(
            "10/prefix", missing("s0000/f", "pc-0", 3))})
    gone = tmp_path / "gone"  # the run's directory, as crash_run stores it
    again = failing("10/prefix", missing("s0000/f", "pc-0", 3))
    assert store_rerun(db, gone, "10/prefix", again, True) == 1
    ok = CheckResult(key="10/prefix", outcome=Outcome.OK, mount_ok=True)
    assert store_rerun(db, gone, "10/prefix", ok, False) == 2
    with Store(db) as store:
        assert store.reruns(run_id) == {"10/prefix": [("data-loss", True), ("ok", False)]}
    assert main(["report", str(run_id), "--db", str(db), "--json", "--no-html"]) == 0
    crash = json.loads(capsys.readouterr().out)["crash"]
    (finding,) = crash["findings"]
    assert finding["fails"]["words"] == "fails 2/3, flaky 66%"
    with pytest.raises(ConfigError, match="no run there was recorded in"):
        store_rerun(db, tmp_path / "elsewhere", "10/prefix", ok, False)
