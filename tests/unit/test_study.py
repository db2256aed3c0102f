"""Studies: TOML in, powercut command lines out, positive controls judged right."""

from __future__ import annotations

import pytest

from framework.cli import build_parser
from framework.cli.study import StepResult, builtin_studies, load_study, parse_study, run_study
from framework.core.errors import ConfigError

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


@pytest.mark.parametrize(("text", "message"), [
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


def test_run_study_passes_each_command_line():
    seen = []
    results = run_study(parse_study(STUDY, source="t.toml"), lambda argv: seen.append(argv) or 0,
                        echo=lambda _line: None, extra_argv=["--db", "x.sqlite"])
    assert len(results) == 3 and seen[0][-2:] == ["--db", "x.sqlite"]


def test_every_builtin_study_step_is_valid_for_its_command():
    """Each step passes the checks its command makes before a guest boots."""
    from crashcases.cut import validate_cut_plan
    from crashcases.engine import validate_plan
    from framework.bench import engine as bench
    from framework.cli import bench as cli_bench
    from framework.cli import crash as cli_crash
    from framework.cli import cut as cli_cut

    parser = build_parser()
    assert "quick" in builtin_studies()
    for name in builtin_studies():
        for step in load_study(name).steps:
            args = parser.parse_args(list(step.argv))  # argparse exits on a bad option
            if step.command == "crash":
                for target in args.target:
                    validate_plan(cli_crash.plan_from_args(args, target))
            elif step.command == "cut":
                validate_cut_plan(cli_cut.plan_from_args(args))
            else:
                config = cli_bench.config_from_args(args)
                bench.resolve_targets(config)


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
