"""Studies: TOML in, powercut command lines out, positive controls judged right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.cli import build_parser
from framework.core.errors import ConfigError
from framework.study.engine import StepResult, builtin_studies, load_study, parse_study, run_study

STUDY = """
[study]
name = "t"
description = "d"

[[step]]
command = "crash"
targets = ["ext4/ordered", "ext2"]
options = { case = "gen:seq1", max-sequences = 5, per_point = 1, quiet = true, warmup = false }

[[step]]
command = "bench"
targets = ["ext2", "ext4/journal"]
options = { workload = "fsmark", reps = 3 }
expect = "fail"
"""


def test_steps_expand_into_command_lines():
    study = parse_study(STUDY, source="t.toml")
    assert [s.argv for s in study.steps] == [
        ("crash", "--target", "ext4/ordered", "--case", "gen:seq1", "--max-sequences", "5",
         "--per-point", "1", "--quiet"),
        ("crash", "--target", "ext2", "--case", "gen:seq1", "--max-sequences", "5",
         "--per-point", "1", "--quiet"),
        ("bench", "--target", "ext2,ext4/journal", "--workload", "fsmark", "--reps", "3"),
    ]
    assert study.steps[2].expect == "fail"


SCALED = """
[study]
name = "s"
scales = ["tiny", "full"]

[[step]]
command = "bench"
targets = ["ext2", "ext3"]
options = { workload = "dbench", reps = 5 }
scales.full = { scale = "full", reps = 10 }

[[step]]
command = "cut"
targets = ["ext2"]
options = { case = "random:100" }
"""


def test_a_scale_replaces_the_options_it_names_and_the_first_is_the_default():
    tiny = parse_study(SCALED, source="s.toml")
    assert (tiny.scales, tiny.scale) == (("tiny", "full"), "tiny")
    assert tiny.steps[0].argv[-4:] == ("--workload", "dbench", "--reps", "5")
    full = parse_study(SCALED, source="s.toml", scale="full")
    assert full.steps[0].argv[-6:] == ("--workload", "dbench", "--reps", "10", "--scale", "full")
    assert full.steps[1].argv == tiny.steps[1].argv  # a step without the scale keeps its options
    with pytest.raises(ConfigError, match=r"^--scale 'huge': s.toml has the scales tiny, full$"):
        parse_study(SCALED, source="s.toml", scale="huge")
    with pytest.raises(ConfigError, match=r"^--scale 'full': t.toml has no scales"):
        parse_study(STUDY, source="t.toml", scale="full")


@pytest.mark.parametrize(("text", "message"), [
    ("[study]\nscales = 'tiny'\n[[step]]\ncommand = 'cut'\ntargets = ['ext2']\n",
     "[study] scales must be a list of distinct names"),
    ("[study]\nscales = ['a', 'a']\n[[step]]\ncommand = 'cut'\ntargets = ['ext2']\n",
     "[study] scales must be a list of distinct names"),
    ("[study]\nscales = ['a']\n[[step]]\ncommand = 'cut'\ntargets = ['ext2']\nscales.b = {}\n",
     "step 1: scale 'b' is not in [study] scales (a)"),
    ("[[step]]\ncommand = 'cut'\ntargets = ['ext2']\nscales = { b = 1 }\n",
     "step 1: scales must be a table of option tables"),
    ("[[step]]\ncommand = 'crash'\ntargets = ['ext2']\nbogus = 1\n", "step 1: unknown key 'bogus'"),
    ("[[step]]\ncommand = 'format'\ntargets = ['ext2']\n", "command must be one of"),
    ("[[step]]\ncommand = 'crash'\n", "targets must be a non-empty list"),
    ("[[step]]\ncommand = 'crash'\ntargets = ['ext2']\nexpect = 'maybe'\n", "expect must be"),
    ("[study]\nname = 'x'\nowner = 'y'\n", "unknown key 'owner' in [study]"),
    ("[study\n", "not valid TOML"),
    ("[study]\nname = 'x'\n", "has no [[step]]"),
])
def test_bad_studies_name_the_file_and_the_problem(text, message):
    with pytest.raises(ConfigError, match="bad.toml") as info:
        parse_study(text, source="bad.toml")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_positive_controls_must_fail_and_errors_never_count():
    study = parse_study(STUDY, source="t.toml")
    normal, control = study.steps[0], study.steps[2]
    assert StepResult(normal, 0).as_expected and not StepResult(normal, 1).as_expected
    assert StepResult(control, 1).as_expected and not StepResult(control, 0).as_expected
    assert not StepResult(control, 2).as_expected  # an error is not a finding


def test_a_skipped_step_counts_as_neither_pass_nor_failure_and_keeps_its_reason():
    study = parse_study(STUDY, source="t.toml")
    reasons = {3: "target ext4/journal needs kernel module ext4"}
    results = run_study(study, lambda argv: 77 if "bench" in argv else 0,
                        echo=lambda _line: None, skip_reasons=reasons)
    assert [r.skipped for r in results] == [False, False, True]
    assert results[2].as_expected and results[2].why == reasons[3]
    assert not StepResult(study.steps[0], 2).skipped  # an error stays an error


def test_run_study_passes_each_command_line():
    seen = []
    results = run_study(parse_study(STUDY, source="t.toml"), lambda argv: seen.append(argv) or 0,
                        echo=lambda _line: None, extra_argv=["--db", "x.sqlite"])
    assert len(results) == 3 and seen[0][-2:] == ["--db", "x.sqlite"]


def test_every_builtin_study_step_is_valid_for_its_command():
    """Each step passes the checks its command makes before a guest boots."""
    from crashcases.crash.plan import validate_plan
    from crashcases.cut.engine import validate_cut_plan
    from framework.bench import engine as bench
    from framework.cli import bench as cli_bench
    from framework.cli import crash as cli_crash
    from framework.cli import cut as cli_cut

    parser = build_parser()
    assert "quick" in builtin_studies()
    studies = [load_study(name, scale=scale) for name in builtin_studies()
               for scale in (load_study(name).scales or (None,))]
    for study in studies:
        for step in study.steps:
            args = parser.parse_args(list(step.argv))  # argparse exits on a bad option
            if step.command == "crash":
                for target in args.target:
                    validate_plan(cli_crash.plan_from_args(args, target))
            elif step.command == "cut":
                validate_cut_plan(cli_cut.plan_from_args(args))
            else:
                config = cli_bench.config_from_args(args)
                bench.resolve_targets(config)


def test_claims_and_targets_files_beside_the_studies_are_not_studies():
    from importlib import resources

    names = {e.name for e in resources.files("framework.study.studies").iterdir()}
    assert "seed000-bonnie.claims.toml" in names
    listed = builtin_studies()
    assert "seed000-bonnie" in listed
    assert not any(n.endswith((".claims", "-targets")) for n in listed)


def test_unknown_study_lists_the_builtins():
    with pytest.raises(ConfigError, match="built-in: .*quick"):
        load_study("no-such-study")


def test_a_study_targets_file_reaches_every_step(tmp_path):
    (tmp_path / "mine.toml").write_text('[targets."mine"]\nfstype = "ext4"\n')
    study_path = tmp_path / "s.toml"
    study_path.write_text('[study]\nname = "s"\ntargets_file = "mine.toml"\n'
                          '[[step]]\ncommand = "crash"\ntargets = ["mine"]\n'
                          '[[step]]\ncommand = "bench"\ntargets = ["ext2", "mine"]\n')
    study = load_study(str(study_path))
    path = str((tmp_path / "mine.toml").resolve())
    assert study.targets_file == path
    assert [s.argv[:5] for s in study.steps] == [
        ("crash", "--target", "mine", "--targets-file", path),
        ("bench", "--target", "ext2,mine", "--targets-file", path)]
    with pytest.raises(ConfigError, match=r"s.toml: \[study\] targets_file 'gone.toml': no such file"):
        parse_study('[study]\ntargets_file = "gone.toml"\n', source="s.toml", base=tmp_path)


SHARDED = """
[study]
name = "sharded"
description = "five units of work"

[[step]]
command = "crash"
targets = ["ext2", "ext4/ordered", "xfs"]
options = { case = "gen:seq1", max-sequences = 4 }

[[step]]
command = "cut"
targets = ["ext4/ordered"]
options = { case = "random:50", trials = 2 }

[[step]]
command = "bench"
targets = ["ext2", "ext4/ordered"]
options = { workload = "fsmark", reps = 2 }
"""


def fake_powercut(argv: list[str]) -> int:
    """Stands in for a step's command: records a run with results that depend only on the
    step's command line, through the same lifecycle and store the real commands use."""
    import hashlib

    from crashcases.vocabulary import CrashPointKind
    from framework.bench.workloads import Metric
    from framework.core.lifecycle import RunSpec, run_lifecycle
    from framework.core.store import Store

    command, target = argv[0], argv[argv.index("--target") + 1]
    seed = int(hashlib.sha256(" ".join(argv[:argv.index("--accel")]).encode()).hexdigest(), 16)
    db, results = Path(argv[argv.index("--db") + 1]), Path(argv[argv.index("--results") + 1])
    with Store(db) as store, run_lifecycle(RunSpec(command, f"{command} {target}"), results,
                                           store) as run:
        assert run.run_id is not None
        if command == "crash":
            rec = store.add_recording(run.run_id, target, case_spec="gen:seq1", seed=0,
                                      log_path=None, entries=50, marks=4)
            for i in range(4):
                cp = store.add_crash_point(rec, entry_index=10 * i, kind=CrashPointKind.MARK,
                                           last_mark=f"pc-{i}")
                store.add_check(cp, variant="prefix", variant_seed=0,
                                outcome="ok" if (seed >> i) % 3 else "data-loss", mount_s=0.1)
        elif command == "cut":
            for trial in range(2):
                store.add_recovery(run.run_id, target, trial=trial, outcome="ok",
                                   mount_s=(seed >> trial) % 100 / 10)
        else:
            for t in target.split(","):
                for rep in (1, 2):
                    store.add_bench_samples(run.run_id, t, "fsmark", repetition=rep, metrics=[
                        Metric("files", float((seed >> rep) % 1000), "files/s", True)])
    return 0


def study_results(db, uuid_text: str) -> list[tuple]:
    """Everything the study's steps stored, keyed by step and without row ids."""
    from framework.core.store import Store

    with Store(db) as store:
        (study,) = [r for r in store.runs() if r.kind == "study"]
        assert study.uuid == uuid_text
        out = []
        for kid in store.children(study.id):
            checks = sorted((c.target, c.entry_index, c.last_mark, c.outcome)
                            for c in store.checks(kid.id))
            recoveries = sorted((v.target, v.trial, v.mount_s) for v in store.recoveries(kid.id))
            samples = sorted((b.target, b.repetition, b.value) for b in store.bench_samples(kid.id))
            out.append((kid.environment["study_step"], kid.kind, kid.study, kid.status.value,
                        checks, recoveries, samples))
        return sorted(out)


def test_three_shards_merged_equal_the_unsharded_study(tmp_path, monkeypatch, capsys):
    import uuid

    import framework.cli as cli
    from framework.cli import doctor
    from framework.core.store import merge

    monkeypatch.setattr(doctor, "failed", lambda checks: [])
    monkeypatch.setattr(doctor, "diagnose", lambda spec: [])
    study = tmp_path / "sharded.toml"
    study.write_text(SHARDED)
    real_main = cli.main

    def main(argv, on_error=None, nested=False):
        assert nested or argv[0] == "run", argv  # a study's step is a nested command
        return real_main(argv, on_error=on_error) if argv[0] == "run" else fake_powercut(list(argv))

    monkeypatch.setattr(cli, "main", main)
    common = [str(study), "--run-uuid", "ci-42", "--results", str(tmp_path / "r")]
    assert real_main(["run", *common, "--db", str(tmp_path / "whole.sqlite")]) == 0
    # The study says what each step and the whole cost, and keeps it.
    whole_dir = next((tmp_path / "r").glob("study-*"))
    spent = json.loads((whole_dir / "cost.json").read_text())
    assert set(spent["steps"]) == {"1", "2", "3", "4", "5"}
    assert set(spent["total"]) == {"cpu_s", "guest_s", "wall_s"}
    assert all(s["cost"] is not None for s in json.loads((whole_dir / "steps.json").read_text()))
    shards = [tmp_path / f"shard{i}.sqlite" for i in range(3)]
    capsys.readouterr()
    for i, db in enumerate(shards):
        assert real_main(["run", *common, "--shard", f"{i}/3", "--db", str(db)]) == 0
        # A shard numbers its steps against the whole study's five.
        headers = [line.split(" (")[0].split(":")[0] for line in capsys.readouterr().out.splitlines()
                   if line.startswith("== step ")]
        assert headers == [[f"== step {n}/5" for n in (1, 4)], ["== step 2/5", "== step 5/5"],
                           ["== step 3/5"]][i]
    merge(tmp_path / "merged.sqlite", shards)
    expected = str(uuid.uuid5(uuid.NAMESPACE_URL, "powercut:ci-42"))
    whole = study_results(tmp_path / "whole.sqlite", expected)
    assert [w[0] for w in whole] == [1, 2, 3, 4, 5]  # every unit of work, once
    assert study_results(tmp_path / "merged.sqlite", expected) == whole
    # Each shard did only its own steps.
    assert [[s[0] for s in study_results(db, expected)] for db in shards] == [[1, 4], [2, 5], [3]]
    # Merged with every shard: whole. One shard left out: exit 2, the shard named.
    assert real_main(["merge", str(tmp_path / "all.sqlite"), *map(str, shards)]) == 0
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert real_main(["merge", str(tmp_path / "two.sqlite"), str(shards[0]),
                          str(shards[2])]) == 2
    assert "shard 1/3 (steps 2, 5) is missing: its database was not merged" in err.getvalue()


def test_a_nested_command_passes_an_interrupt_on_and_a_top_level_one_exits_130(monkeypatch,
                                                                             capsys):
    import argparse

    import framework.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    def parser(argv):
        p = argparse.ArgumentParser()
        p.add_argument("what")
        p.set_defaults(func=interrupted, verbose=0)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert cli.main(["bench"]) == 130
    with pytest.raises(KeyboardInterrupt):
        cli.main(["bench"], nested=True)
    assert capsys.readouterr().err.count("powercut: interrupted; results so far are kept") == 2


def test_an_interrupted_step_stops_the_study_and_the_study_says_interrupted(tmp_path,
                                                                          monkeypatch):
    import framework.cli as cli
    from framework.core.store import RunStatus, Store

    study = tmp_path / "s.toml"
    study.write_text(SHARDED)
    real_main = cli.main
    steps: list[list[str]] = []

    def main(argv, on_error=None, nested=False):
        if argv[0] == "run":
            return real_main(argv, on_error=on_error, nested=nested)
        assert nested
        steps.append(list(argv))
        if len(steps) == 2:
            raise KeyboardInterrupt  # what a nested command does on Ctrl-C or SIGTERM
        return fake_powercut(list(argv))

    monkeypatch.setattr(cli, "main", main)
    db = tmp_path / "db.sqlite"
    assert real_main(["run", str(study), "--results", str(tmp_path / "r"), "--db", str(db)]) == 130
    assert len(steps) == 2  # steps 3 to 5 never started
    with Store(db) as store:
        (top,) = [r for r in store.runs() if r.kind == "study"]
        assert top.status is RunStatus.INTERRUPTED


@pytest.mark.parametrize("argv, message", [
    (["--shard", "3/3", "--run-uuid", "x"], r"--shard '3/3': expected I/N with 0 <= I < N"),
    (["--shard", "a/b", "--run-uuid", "x"], r"--shard 'a/b': expected I/N"),
    (["--shard", "0/2"], r"--shard: shards of one study share its run; give them all the same"),
])
def test_bad_shards_are_one_line_errors(argv, message, capsys):
    from framework.cli import main

    assert main(["run", "quick", *argv, "--db", "/nonexistent/never.sqlite"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    import re

    assert re.search(message, err)


def test_a_finished_steps_status_comes_from_its_results_judged_by_target(tmp_path):
    """When a study was killed after a step finished but before saving its status, resume
    takes it from the stored results: a state fsck repaired fails a journalled target."""
    from crashcases.vocabulary import CrashPointKind
    from framework.cli.run import status_from_store
    from framework.core.store import Store

    with Store(tmp_path / "db.sqlite") as store:
        ids = {}
        for target, journal in (("ext4/ordered", "internal"), ("ext2", "none")):
            run = store.start_run(command_line="powercut crash", study="crash", kind="crash")
            store.add_target(run, target, {"name": target, "fstype": target[:4],
                                           "journal": journal})
            rec = store.add_recording(run, target, case_spec="gen:seq1", seed=0,
                                      log_path=None, entries=1, marks=1)
            cp = store.add_crash_point(rec, entry_index=0, kind=CrashPointKind.MARK)
            store.add_check(cp, variant="prefix", variant_seed=0, outcome="recovered")
            ids[target] = run
        assert status_from_store(store, ids["ext4/ordered"]) == 1
        assert status_from_store(store, ids["ext2"]) == 0


@pytest.fixture
def doctor_satisfied(monkeypatch):
    """A study whose doctor finds nothing missing (its steps are faked)."""
    from framework.cli import doctor

    monkeypatch.setattr(doctor, "failed", lambda checks: [])
    monkeypatch.setattr(doctor, "diagnose", lambda spec: [])


def test_a_steps_own_guest_memory_holds_unless_run_is_given_one(tmp_path, monkeypatch,
                                                                 doctor_satisfied):
    import framework.cli as cli

    study = tmp_path / "s.toml"
    study.write_text("""
[study]
name = "small-guest"
description = "a bench whose file must not fit in the guest's page cache"

[[step]]
command = "bench"
targets = ["ext2"]
options = { workload = "bonnie-block", reps = 2, memory-mib = 320 }

[[step]]
command = "bench"
targets = ["ext3"]
options = { workload = "dbench", reps = 2 }
""")
    real_main = cli.main
    steps: list[list[str]] = []

    def main(argv, on_error=None, nested=False):
        if argv[0] == "run":
            return real_main(argv, on_error=on_error, nested=nested)
        steps.append(list(argv))
        return 0

    def memory(argv: list[str]) -> int:
        # The last --memory-mib wins, as argparse reads it.
        return cli.build_parser(argv).parse_args(argv).memory_mib

    monkeypatch.setattr(cli, "main", main)
    common = [str(study), "--results", str(tmp_path / "r")]
    assert real_main(["run", *common, "--db", str(tmp_path / "a.sqlite")]) == 0
    assert [memory(s) for s in steps] == [320, 2048]
    steps.clear()
    assert real_main(["run", *common, "--memory-mib", "1024", "--db", str(tmp_path / "b.sqlite")]) == 0
    assert [memory(s) for s in steps] == [1024, 1024]


def test_a_workload_file_beside_the_study_is_found_from_any_directory(tmp_path, monkeypatch):
    (tmp_path / "seqs").mkdir()
    (tmp_path / "seqs" / "a.json").write_text('{"name": "a", "ops": []}')
    text = """
[study]
name = "files"
description = "workload files beside the study"

[[step]]
command = "crash"
targets = ["ext2"]
options = { case = "file:seqs/a.json" }

[[step]]
command = "crash"
targets = ["ext2"]
options = { case = "file:elsewhere/b.json" }
"""
    monkeypatch.chdir("/")
    study = parse_study(text, source="files.toml", base=tmp_path)
    cases = [s.argv[s.argv.index("--case") + 1] for s in study.steps]
    # Beside the study: its absolute path; not there: as given, relative to where one runs.
    assert cases == [f"file:{tmp_path / 'seqs' / 'a.json'}", "file:elsewhere/b.json"]


def test_the_known_recheck_study_runs_the_reports_own_workloads() -> None:
    """Its copies of the bug reports' workloads are the reports' files, byte for byte."""
    top = Path(__file__).resolve().parents[2]
    study = load_study("known-recheck")
    copies = [Path(s.argv[s.argv.index("--case") + 1].removeprefix("file:")) for s in study.steps
              if "--case" in s.argv]
    reports = {p.parent.name: p for p in (top / "docs" / "reports").glob("*/workload.json")}
    compared = 0
    for copy in copies:
        assert copy.is_file(), copy
        if copy.stem in reports:
            assert copy.read_bytes() == reports[copy.stem].read_bytes(), copy.name
            compared += 1
    assert compared == 5  # the four fast-commit sequences and the ext4 external-journal one


def test_a_resumed_step_keeps_its_known_list_and_whether_it_is_set_aside() -> None:
    """A step carried on after a kill keeps --known and --ignore-known (its plan has the
    rest): a known-recheck step resumed without --ignore-known judged its failure known."""
    from framework.cli.run import resume_argv

    argv = ["crash", "--target", "ext4/logdev", "--case", "file:x.json", "--variants",
            "prefix,subset", "--known", "mine.toml", "--ignore-known", "-q"]
    resumed = resume_argv(argv, "R/crash-1")
    assert resumed == ["crash", "--resume", "R/crash-1", "--known", "mine.toml",
                       "--ignore-known", "-q"]
    assert build_parser(resumed).parse_args(resumed).ignore_known


def test_a_study_ends_with_what_it_found_per_target_even_without_the_html(tmp_path, monkeypatch,
                                                                          capsys):
    """The study's last words are powercut report's summary of the whole run: per target and
    workload the states, ok, known and failing, then the power cuts; --no-report leaves out
    the HTML file only. Fails without it: a --no-report study printed no table at all."""
    import framework.cli as cli
    from framework.cli import doctor
    from framework.core.store import Store

    monkeypatch.setattr(doctor, "failed", lambda checks: [])
    monkeypatch.setattr(doctor, "diagnose", lambda spec: [])
    study = tmp_path / "sharded.toml"
    study.write_text(SHARDED)
    real_main = cli.main
    monkeypatch.setattr(cli, "main", lambda argv, on_error=None, nested=False: (
        real_main(argv, on_error=on_error) if argv[0] == "run" else fake_powercut(list(argv))))
    db = tmp_path / "s.sqlite"
    assert real_main(["run", str(study), "--no-report", "--results", str(tmp_path / "r"),
                      "--db", str(db)]) == 0
    out = capsys.readouterr().out
    tail = out[out.index("== study sharded: summary"):]
    assert "crash states" in tail and "power cuts" in tail
    with Store(db) as store:
        failing = {}
        for kid in store.children(next(r for r in store.runs() if r.kind == "study").id):
            for c in store.checks(kid.id):
                failing[c.target] = failing.get(c.target, 0) + (c.outcome != "ok")
    start = tail.index("crash states")
    crash = tail[start:tail.index("power cuts", start)]
    for target in ("ext2", "ext4/ordered", "xfs"):
        row = next((line for line in crash.splitlines() if f"│ {target} " in line), None)
        assert row, crash
        cells = [c.strip() for c in row.split("│")[1:-1]]
        # target, case, states, ok, recovered, known, failing, findings
        assert cells[1:5] == ["gen:seq1", "4", str(4 - failing[target]), "0"]
        assert cells[6] == str(failing[target])
    assert not list((tmp_path / "r").glob("study-*/report.html"))


def test_resume_runs_again_the_steps_that_ended_in_an_error_and_only_those(
        tmp_path, monkeypatch, doctor_satisfied):
    """A finished study whose step ended in an error (a guest that did not boot, a kernel that
    died under the recording) is carried on: that step runs again; the steps that passed,
    found failures or were skipped are not. One without such a step has nothing to resume."""
    import framework.cli as cli
    from framework.core.store import RunStatus, Store

    study = tmp_path / "s.toml"
    study.write_text("""
[study]
name = "errs"
description = "three steps: the second ends in an error the first time"
""" + "".join(f"""
[[step]]
command = "bench"
targets = ["{t}"]
options = {{ workload = "dbench", reps = 2 }}
""" for t in ("ext2", "ext3", "ext4/ordered")))
    real_main = cli.main
    ran: list[str] = []
    exits = {"ext2": [3, 0], "ext3": [2, 0], "ext4/ordered": [1]}  # 3: a missing tool

    def main(argv, on_error=None, nested=False):
        if argv[0] == "run":
            return real_main(argv, on_error=on_error, nested=nested)
        target = argv[argv.index("--target") + 1]
        ran.append(target)
        return exits[target].pop(0)

    monkeypatch.setattr(cli, "main", main)
    where = ["--results", str(tmp_path / "r"), "--db", str(tmp_path / "db.sqlite")]
    assert real_main(["run", str(study), *where]) == 1
    assert ran == ["ext2", "ext3", "ext4/ordered"]
    (study_dir,) = (tmp_path / "r").glob("study-*")
    ran.clear()
    assert real_main(["run", "--resume", str(study_dir), *where]) == 1  # step 3 must pass
    assert ran == ["ext2", "ext3"]
    steps = json.loads((study_dir / "steps.json").read_text())
    assert [s["status"] for s in steps] == [0, 0, 1]
    with Store(tmp_path / "db.sqlite") as store:
        (top,) = [r for r in store.runs() if r.parent_id is None]
        assert top.status is RunStatus.FINISHED and len(top.environment["resumed"]) == 1
    ran.clear()
    assert real_main(["run", "--resume", str(study_dir), *where]) == 2  # nothing left undone
    assert ran == []
