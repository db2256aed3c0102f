"""The command registry: every sub-command comes from the module the table names."""

from __future__ import annotations

import argparse
import importlib

import pytest

from framework.cli import COMMANDS, build_parser, main, parse


def _names(module: str) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(module).add_parser(sub)
    return set(sub.choices)


@pytest.mark.parametrize("module", sorted({m for m, _ in COMMANDS.values()}))
def test_each_module_defines_exactly_the_commands_the_table_gives_it(module: str) -> None:
    assert _names(module) == {name for name, (m, _) in COMMANDS.items() if m == module}


def test_top_level_help_lists_every_command_without_importing_them(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for name, (_, helptext) in COMMANDS.items():
        assert name in out and helptext[:30] in " ".join(out.split())


def test_a_named_command_gets_its_full_parser() -> None:
    args = build_parser(["-v", "crash", "--target", "ext2"]).parse_args(
        ["-v", "crash", "--target", "ext2"])
    assert args.command == "crash" and args.verbose == 1


@pytest.mark.parametrize(("argv", "db"), [
    (["crash", "--target", "ext2", "--results", "out"], "out/powercut.sqlite"),
    (["cut", "--target", "ext2", "--results", "out"], "out/powercut.sqlite"),
    (["bench", "--target", "ext2", "--results", "out"], "out/powercut.sqlite"),
    (["run", "quick", "--results", "out"], "out/powercut.sqlite"),
    (["ci", "--results", "out"], "out/ci.sqlite"),
    (["crash", "--target", "ext2"], "results/powercut.sqlite"),
    (["crash", "--target", "ext2", "--results", "out", "--db", "x.sqlite"], "x.sqlite"),
    (["report", "latest"], "results/powercut.sqlite"),
])
def test_the_database_goes_beside_the_run_directories_unless_named(argv: list[str],
                                                                   db: str) -> None:
    assert parse(build_parser(argv), argv).db == db


def test_an_unknown_command_is_a_usage_error_naming_the_choices(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["crahs"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'crahs'" in err and "crash" in err


@pytest.mark.parametrize("argv", [
    ["crash", "--target", "ext2", "--variants", "sideways"],
    ["crash", "--target", "ext2,nosuch"],
    ["crash", "--target", "ext2", "--points", "every:0"],
    ["cut", "--target", "ext4/ordered", "--trials", "0"],
    ["bench", "--target", "ext2,ext4/ordered", "--workload", "fsmark", "--baseline", "xfs"],
    ["crash", "--target", "ext2", "--profile", "data=floppy"],
    ["crash", "--target", "ext4/ordered", "--profile", "journal=ram"],
    ["cut", "--target", "ext4/ordered", "--profile", "log=hdd"],
    ["cut", "--target", "ext4/logdev", "--profile", "data=hdd,data=ssd"],
    ["bench", "--target", "ext2,ext4/ordered", "--workload", "fsmark", "--profile", "data="],
    ["bench", "--target", "ext2,ext4/logdev", "--workload", "fsmark", "--profile", "journal=ssd"],
])
def test_bad_options_are_one_line_and_create_nothing(argv, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--results", "r", "--db", "r/db.sqlite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("powercut: ") and "\n" not in err
    assert list(tmp_path.iterdir()) == []  # no run directory, no store
