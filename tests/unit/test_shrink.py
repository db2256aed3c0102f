"""Shrinking a failing crash state: ddmin, the signature, the cheap cut, bad input, and the
search end to end with a fake record-and-check in place of the guest."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from crashcases.check import CheckResult
from crashcases.crash.plan import CrashPlan, CrashRunResult, load_plan
from crashcases.crash.points import CrashPoint, CrashState, Variant, Variants
from crashcases.findings.shrink import (
    Shrinker,
    Signature,
    Verdict,
    cheap_cut,
    ddmin,
    load_failure,
    unresolved_reason,
)
from crashcases.vocabulary import CrashPointKind, Outcome, VariantKind
from crashcases.workload.cases import load_case
from crashcases.workload.ops import Op, OpKind, Workload
from framework.cli import main
from framework.core import rundir
from framework.core.errors import ConfigError

K = OpKind


def planted_workload() -> Workload:
    """20 ops in four directories; the one durability op is the fsync of c/f."""
    ops = [
        Op(K.MKDIR, "a"), Op(K.CREAT, "a/x"), Op(K.WRITE, "a/x", length=5000),
        Op(K.MKDIR, "b"), Op(K.CREAT, "b/y"), Op(K.APPEND, "b/y", length=300),
        Op(K.MKDIR, "c"), Op(K.CREAT, "c/f"), Op(K.WRITE, "c/f", length=8192),
        Op(K.FSYNC, "c/f"),
        Op(K.CREAT, "c/g"), Op(K.WRITE, "c/g", length=100),
        Op(K.RENAME, "a/x", dst="a/z"), Op(K.MKDIR, "d"), Op(K.CREAT, "d/w"),
        Op(K.PWRITE, "d/w", offset=0, length=4096),
        Op(K.SETXATTR, "b/y", xattr="user.k", length=8),
        Op(K.TRUNCATE, "a/z", size=100), Op(K.LINK, "b/y", dst="b/y2"), Op(K.UNLINK, "d/w"),
    ]
    return Workload("planted", 7, tuple(ops))


MINIMAL = ["mkdir c", "creat c/f", "fsync c/f"]


# -- ddmin on synthetic predicates ---------------------------------------------


class Counted:
    """A predicate that counts its distinct calls and refuses the empty and the whole input."""

    def __init__(self, n: int, verdict: Callable[[set[int]], Verdict]) -> None:
        self.n, self.verdict = n, verdict
        self.seen: list[tuple[int, ...]] = []

    def __call__(self, candidate: tuple[int, ...]) -> Verdict:
        assert candidate and len(candidate) < self.n, candidate
        assert list(candidate) == sorted(candidate)  # order is kept
        self.seen.append(candidate)
        return self.verdict(set(candidate))


def needs(*wanted: int) -> Callable[[set[int]], Verdict]:
    return lambda c: Verdict.FAIL if set(wanted) <= c else Verdict.PASS


def test_ddmin_finds_the_one_failure_inducing_item_in_four_tests():
    test = Counted(8, needs(5))
    assert ddmin(range(8), test) == (5,)
    # complements first: [4..7] fails, [6,7] passes, [4,5] fails, [5] fails.
    assert test.seen == [(4, 5, 6, 7), (6, 7), (4, 5), (5,)]


def test_ddmin_finds_a_known_1_minimal_subset():
    test = Counted(16, needs(2, 9, 13))
    found = ddmin(range(16), test)
    assert found == (2, 9, 13)
    for drop in found:  # 1-minimal: without any one item it no longer fails
        assert needs(2, 9, 13)(set(found) - {drop}) is Verdict.PASS
    # ddmin asks some candidates again after a reduction: the shrinker's cache answers those.
    assert len(set(test.seen)) <= 34 < len(test.seen)


def test_ddmin_never_adopts_an_unresolved_candidate():
    """Item 5 needs item 4 (as a write needs its creat): without it the candidate is invalid."""
    def verdict(c: set[int]) -> Verdict:
        if 5 in c and 4 not in c:
            return Verdict.UNRESOLVED
        return Verdict.FAIL if {2, 5} <= c else Verdict.PASS

    test = Counted(10, verdict)
    assert ddmin(range(10), test) == (2, 4, 5)
    assert Verdict.UNRESOLVED in {verdict(set(c)) for c in test.seen}


def test_ddmin_of_one_item_tests_nothing():
    assert ddmin([7], Counted(1, needs(7))) == (7,)


# -- the signature and the cheap cut -------------------------------------------


def result(outcome: str, *findings: tuple[str, str]) -> dict:
    return {"outcome": outcome,
            "findings": [{"kind": k, "path": p, "detail": "x", "mark": "pc-0"} for k, p in findings]}


def test_the_signature_is_variant_outcome_and_finding_kinds_with_paths():
    sig = Signature.of("351/subset:77", result("data-loss", ("data-loss", "s0003/f0"),
                                                ("wrong-content", "s0003/d/f1")))
    assert sig.variant is VariantKind.SUBSET and sig.outcome is Outcome.DATA_LOSS
    assert sig.findings == {("data-loss", "s0003/f0"), ("wrong-content", "s0003/d/f1")}
    one = [{"kind": "wrong-content", "path": "s0003/d/f1"}]
    assert sig.matches(VariantKind.SUBSET, Outcome.DATA_LOSS, one)
    assert not sig.matches(VariantKind.PREFIX, Outcome.DATA_LOSS, one)  # another variant kind
    assert not sig.matches(VariantKind.SUBSET, Outcome.CORRUPT, one)  # another outcome
    assert not sig.matches(VariantKind.SUBSET, Outcome.DATA_LOSS,
                           [{"kind": "data-loss", "path": "s0003/d/f1"}])  # same path, other kind
    assert sig.top_dirs() == {"s0003"}


def test_a_signature_without_findings_needs_the_outcome_alone():
    sig = Signature.of("40/prefix", result("unmountable"))
    assert sig.matches(VariantKind.PREFIX, Outcome.UNMOUNTABLE, [])
    assert not sig.matches(VariantKind.PREFIX, Outcome.CORRUPT, [])
    assert sig.top_dirs() is None


def test_the_cheap_cut_keeps_one_sequence_and_every_sync():
    workload = load_case("gen:seq1", seed=0, max_sequences=40)
    ns = next(op.path for op in workload.ops[40:] if op.kind is OpKind.MKDIR and "/" not in op.path)
    sig = Signature.of("9/prefix", result("data-loss", ("data-loss", f"{ns}/f0")))
    cut = cheap_cut(workload.ops, sig)
    assert cut is not None and len(cut) < len(workload.ops) / 5
    kept = [workload.ops[i] for i in cut]
    assert all(op.kind is OpKind.SYNC or op.path.split("/")[0] == ns for op in kept)
    assert sum(op.kind is OpKind.SYNC for op in kept) == sum(
        op.kind is OpKind.SYNC for op in workload.ops)
    assert unresolved_reason(kept) is None  # one sequence, its retirement and the syncs: valid


def test_the_cheap_cut_follows_renames_across_directories_and_gives_up_on_the_root():
    ops = [Op(K.MKDIR, "a"), Op(K.MKDIR, "b"), Op(K.CREAT, "a/f"), Op(K.RENAME, "a/f", dst="b/f"),
           Op(K.FSYNC_DIR, "b"), Op(K.MKDIR, "c"), Op(K.CREAT, "c/g"), Op(K.FSYNC, "c/g"),
           Op(K.MKDIR, "e"), Op(K.CREAT, "e/h"), Op(K.RENAME, "e/h", dst="a/h")]
    sig = Signature.of("5/prefix", result("data-loss", ("data-loss", "b/f")))
    # b/f came from a (the rename ties them), and a took e/h (ties e): c is cut. Without
    # following renames the cut kept a rename of a file it never created: unresolved.
    cut = cheap_cut(ops, sig)
    assert cut == (0, 1, 2, 3, 4, 8, 9, 10)
    assert unresolved_reason([ops[i] for i in cut]) is None
    assert cheap_cut(ops, Signature.of("5/prefix", result("data-loss", ("data-loss", "")))) is None
    everything = Signature.of("5/prefix", result("data-loss", ("data-loss", "a"), ("data-loss", "c")))
    assert cheap_cut(ops, everything) is None  # a ties b and e: nothing to cut


def test_invalid_candidates_and_candidates_without_a_promise_are_unresolved():
    assert "not a regular file" in (unresolved_reason([Op(K.MKDIR, "c"), Op(K.FSYNC, "c/f")]) or "")
    assert "no durability op" in (unresolved_reason([Op(K.MKDIR, "c")]) or "")
    assert unresolved_reason([Op(K.MKDIR, "c"), Op(K.SYNC)]) is None


# -- a fake run directory and a fake guest ----------------------------------------------


def fake_run(tmp_path: Path, workload: Workload | None = None, *, state: str = "110/prefix",
             outcome: str = "data-loss", findings: Sequence[tuple[str, str]] = (
                 ("data-loss", "c"), ("data-loss", "c/f"))) -> Path:
    """A finished crash run's directory: plan.json, results.json, log.img (empty)."""
    case_file = tmp_path / "planted.json"
    case_file.write_text((workload or planted_workload()).to_json())
    run_dir = tmp_path / "crash-1"
    run_dir.mkdir()
    plan = CrashPlan(target="ext4/nobarrier", case=f"file:{case_file}",
                     variants=Variants.parse(("prefix", "subset")))
    (run_dir / "plan.json").write_text(json.dumps(plan.to_dict()))
    states = [{"key": state, "result": result(outcome, *findings)},
              {"key": "111/prefix", "result": result("ok")},
              {"key": "112/prefix", "result": None}]
    (run_dir / "results.json").write_text(json.dumps({"states": states}))
    (run_dir / "log.img").write_bytes(b"")
    return run_dir


def nobarrier(workload: Workload) -> list[dict]:
    """What the guest would find after the fsync of c/f on a disk that ignores flushes."""
    said = [op.describe() for op in workload.ops]
    if {"mkdir c", "creat c/f", "fsync c/f"} <= set(said):
        return [{"kind": "data-loss", "path": "c", "detail": "missing", "mark": "pc-0"}]
    return []


def no_guest(disks, rundir, fstypes):  # type: ignore[no-untyped-def]
    raise AssertionError("FakeShrinker boots no guest")


class FakeShrinker(Shrinker):
    """Records nothing: each candidate 'checks' one prefix state as ``nobarrier`` says."""

    interrupt_at = 0  # the n-th guest run raises KeyboardInterrupt (0: never)

    def record_and_check(self, plan: CrashPlan, run_dir: Path, workload: Workload) -> CrashRunResult:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == getattr(self, "interrupt_at", 0):
            raise KeyboardInterrupt
        assert plan.variants.names == ("prefix",) and plan.jobs == 1  # the signature's kind only
        assert load_case(plan.case, seed=99) == workload  # the plan names the workload file
        (run_dir / "plan.json").write_text(json.dumps(plan.to_dict()))
        state = CrashState(CrashPoint(9, CrashPointKind.MARK, "pc-0", -1), Variant(VariantKind.PREFIX), 9)
        findings = nobarrier(workload)
        check = CheckResult(state.key, Outcome.DATA_LOSS if findings else Outcome.OK, findings=findings)
        return CrashRunResult(run_dir, plan, {}, [state], {state.key: check})


def test_the_planted_failure_shrinks_to_three_ops_and_only_the_smallest_run_is_kept(tmp_path):
    run_dir = fake_run(tmp_path)
    progress: list[str] = []
    shrinker = FakeShrinker(load_failure(run_dir, "110/prefix"), no_guest, progress.append)
    got = shrinker.shrink()
    assert [op.describe() for op in got.ops] == MINIMAL
    assert got.minimal and not got.interrupted and got.reduced
    assert (got.guest_runs, got.unresolved) == (4, 16)  # the cut, then 5, 4 and 3 ops
    assert got.reproducer_key == "9/prefix"
    kept = sorted(run_dir.glob("shrink-*"))
    assert kept == [got.reproducer_dir]
    assert Workload.from_json((kept[0] / rundir.WORKLOAD).read_text()).ops == got.ops
    assert load_plan(kept[0]).case == f"file:{kept[0] / rundir.WORKLOAD}"
    summary = json.loads((kept[0] / rundir.SHRINK).read_text())
    assert summary["ops"] == MINIMAL and summary["minimal"] and summary["original_ops"] == 20
    assert summary["reproducer"] == f"powercut recheck {kept[0]} 9/prefix"
    assert progress[1].startswith("cheap cut: 6 ops under c")
    assert sum(line.startswith("candidate ") for line in progress) == 4


def test_ctrl_c_keeps_the_best_so_far_on_disk(tmp_path):
    run_dir = fake_run(tmp_path)
    shrinker = FakeShrinker(load_failure(run_dir, "110/prefix"), no_guest)
    shrinker.interrupt_at = 3
    with pytest.raises(KeyboardInterrupt):
        shrinker.shrink()
    best = shrinker.result
    assert best.interrupted and not best.minimal and len(best.ops) == 5
    assert sorted(run_dir.glob("shrink-*")) == [best.reproducer_dir]  # the interrupted one is gone
    assert best.reproducer_dir is not None
    summary = json.loads((best.reproducer_dir / rundir.SHRINK).read_text())
    assert summary["interrupted"] and len(summary["ops"]) == 5


def test_a_candidate_that_would_not_run_costs_no_guest_and_is_asked_once(tmp_path):
    shrinker = FakeShrinker(load_failure(fake_run(tmp_path), "110/prefix"), no_guest)
    assert shrinker.test((9,)) is Verdict.UNRESOLVED  # fsync c/f without c/f
    assert shrinker.test((6, 7, 9)) is Verdict.FAIL
    assert shrinker.test((6, 7, 9)) is Verdict.FAIL
    assert shrinker.test((6, 7, 8)) is Verdict.UNRESOLVED  # no durability op
    assert shrinker.calls == 1 and shrinker.result.guest_runs == 1
    assert shrinker.result.unresolved == 2


# -- bad input -------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["results.json", "log.img", "plan.json"])
def test_a_run_directory_without_its_files_is_refused_naming_the_file(tmp_path, missing):
    run_dir = fake_run(tmp_path)
    (run_dir / missing).unlink()
    with pytest.raises(ConfigError, match=f"no {missing}"):
        load_failure(run_dir, "110/prefix")


@pytest.mark.parametrize(("key", "why"), [
    ("111/prefix", "passed \\(ok\\)"),
    ("112/prefix", "never checked"),
    ("999/prefix", "not a state of .* \\(failing states: 110/prefix\\)"),
])
def test_states_that_cannot_be_shrunk_are_refused(tmp_path, key, why):
    with pytest.raises(ConfigError, match=why):
        load_failure(fake_run(tmp_path), key)


def test_the_cli_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path, capsys):
    run_dir = fake_run(tmp_path)
    before = sorted(p.name for p in run_dir.iterdir())
    for argv in (["shrink", str(run_dir), "111/prefix"], ["shrink", str(tmp_path / "nope"), "1/prefix"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("powercut: ") and "\n" not in err
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_the_cli_prints_the_minimal_ops_and_the_same_as_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("crashcases.findings.shrink.Shrinker.record_and_check", FakeShrinker.record_and_check)
    monkeypatch.setattr("framework.cli.shrink.machine_factory", lambda args: no_guest)
    run_dir = fake_run(tmp_path)
    assert main(["shrink", str(run_dir), "110/prefix", "-q"]) == 0
    out = capsys.readouterr().out
    assert "\n  mkdir c\n  creat c/f\n  fsync c/f\n" in out and "20 ops -> 3 ops (1-minimal)" in out
    assert "powercut recheck " in out
    assert main(["shrink", str(run_dir), "110/prefix", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["ops"] == MINIMAL and data["guest_runs"] == 4 and data["state"] == "110/prefix"
    assert "candidate 4: 3 ops, reproduces" in captured.err  # progress on stderr


def test_help_teaches_the_signature_with_examples(capsys):
    with pytest.raises(SystemExit):
        main(["shrink", "--help"])
    out = capsys.readouterr().out
    assert "signature" in out and "same outcome" in out and "examples:" in out


# -- the file: case family ----------------------------------------------------------


def test_a_workload_file_is_a_case(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(planted_workload().to_json())
    assert load_case(f"file:{path}", seed=3) == planted_workload()  # the file's own seed


@pytest.mark.parametrize(("text", "why"), [
    (None, "cannot read"),
    ("{not json", "not a workload"),
    ('{"name": "w", "seed": 0}', "not a workload"),
    ('{"name": "w", "seed": 0, "ops": [{"kind": "fsync", "path": "f"}]}', "op 0 \\(fsync f\\)"),
])
def test_a_bad_workload_file_is_a_one_line_error(tmp_path, text, why):
    path = tmp_path / "w.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=why) as err:
        load_case(f"file:{path}", seed=0)
    assert "\n" not in str(err.value) and str(path) in str(err.value)  # one line, naming the file


def test_an_interrupted_runs_failing_state_is_read_with_its_log_where_the_run_left_it(
        tmp_path: Path) -> None:
    """A run that a budget or Ctrl-C ended keeps its log in its recording guest's disks
    (for --resume): shrink, export and recheck find it there, and say so when it is gone."""
    run_dir = fake_run(tmp_path)
    held = run_dir / rundir.RECORDING_DISKS / rundir.LOG
    held.parent.mkdir(parents=True)
    (run_dir / rundir.LOG).rename(held)
    assert rundir.crash_log(run_dir) == held
    assert load_failure(run_dir, "110/prefix").key == "110/prefix"
    held.unlink()
    with pytest.raises(ConfigError, match=r"not a finished crash run directory \(no log.img\)"):
        load_failure(run_dir, "110/prefix")
