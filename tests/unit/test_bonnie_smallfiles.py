"""bonnie-smallfiles: bonnie++'s file-creation tests alone (seed 003's small-file phases)."""

from __future__ import annotations

import pytest

from framework.bench.workloads import get_workload, list_workloads
from framework.bench.workloads.base import BenchmarkError, Scale
from framework.bench.workloads.bonnie import BonnieWorkload
from framework.core.command import CommandResult

CREATE_RATES = ("seq_create", "seq_stat", "seq_delete",
                "random_create", "random_stat", "random_delete")
IO_RATES = ("per_char_write", "block_write", "rewrite", "per_char_read", "block_read",
            "random_seeks")


def files_only_line(rates: dict[int, str], latencies: list[str]) -> str:
    """A bonnie++ 2.00a CSV line (format 1.98) of a run with -s 0 -n 16: the I/O fields are
    empty; ``rates`` puts figures at their CSV index (26..36, the CPU share after each)."""
    fields = ["1.98", "2.00a", "powercut", "1", "1"] + [""] * 16 + ["16", "", "", "", ""]
    for index in range(26, 38, 2):
        fields += [rates.get(index, "+++++"), "+++" if index not in rates else "97"]
    fields += [""] * 6 + latencies
    assert len(fields) == 50
    return ",".join(fields)


def result(stdout: str, status: int = 0, stderr: str = "") -> CommandResult:
    return CommandResult(argv=("bonnie++",), status=status, stdout=stdout, stderr=stderr,
                         duration_s=1.0)


def test_registered_beside_the_other_bonnie_variants() -> None:
    assert {"bonnie", "bonnie-block", "bonnie-smallfiles"} <= set(list_workloads())
    workload = get_workload("bonnie-smallfiles")
    assert isinstance(workload, BonnieWorkload)
    assert workload.name == "bonnie-smallfiles" and workload.files_only
    assert not workload.block_only and workload.tool == "bonnie++"


@pytest.mark.parametrize("scale", list(Scale))
def test_argv_runs_only_the_file_creation_tests(scale: Scale) -> None:
    argv = get_workload("bonnie-smallfiles").argv("/mnt/t", scale=scale)
    assert argv[:4] == ["bonnie++", "-q", "-u", "root"]
    assert argv[argv.index("-d") + 1] == "/mnt/t/bonnie-smallfiles"
    assert argv[argv.index("-s") + 1] == "0"  # no block, per-character or seek test
    assert "-r" not in argv and "-f" not in argv
    # Empty files in one directory: bonnie++'s defaults apart from the count.
    assert ":" not in argv[argv.index("-n") + 1]


def test_every_scale_creates_the_papers_default_count() -> None:
    workload = get_workload("bonnie-smallfiles")
    argvs = [workload.argv("/mnt/t", scale=s) for s in (Scale.TINY, Scale.SMALL, Scale.FULL)]
    counts = [int(argv[argv.index("-n") + 1]) for argv in argvs]
    # bonnie++ -n 16, as Dell'Omodarme (2001) ran it; fewer files make ext3's and ext4's
    # create and delete phases too short for bonnie++ to time under emulation.
    assert counts == [16, 16, 16]


def test_the_other_variants_are_unchanged() -> None:
    plain = get_workload("bonnie").argv("/mnt/t", scale=Scale.TINY)
    assert plain[plain.index("-s") + 1] != "0" and "-r" in plain
    block = get_workload("bonnie-block").argv("/mnt/t", scale=Scale.TINY)
    assert block[-1] == "-f" and block[block.index("-n") + 1] == "0"


def test_both_restrictions_at_once_are_refused() -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        BonnieWorkload(block_only=True, files_only=True).argv("/mnt/t", scale=Scale.TINY)


def test_parse_reports_the_create_stat_delete_rates_and_no_io_figure() -> None:
    line = files_only_line({26: "4121", 28: "51234", 30: "6876", 32: "3977", 34: "+++++",
                            36: "5123"},
                           ["1843us", "310us", "2617us", "1912us", "47us", "1211ms"])
    metrics = {m.name: m for m in get_workload("bonnie-smallfiles").parse(result(line + "\n"))}
    assert not set(IO_RATES) & metrics.keys()
    assert not {f"{n}_latency" for n in IO_RATES} & metrics.keys()
    assert metrics["seq_create"].value == 4121.0 and metrics["seq_create"].unit == "files/s"
    assert metrics["seq_stat"].value == 51234.0
    assert metrics["random_delete"].value == 5123.0
    assert metrics["random_stat"].value is None  # "+++++": too quick for bonnie++ to time
    assert all(metrics[n].higher_is_better for n in CREATE_RATES)
    assert metrics["random_delete_latency"].value == 1_211_000.0
    assert not metrics["seq_create_latency"].higher_is_better


def test_a_run_with_every_test_too_quick_has_no_rate_but_its_latencies() -> None:
    line = files_only_line({}, ["624us", "160us", "614us", "814us", "45us", "688us"])
    metrics = {m.name: m for m in get_workload("bonnie-smallfiles").parse(result(line))}
    assert all(metrics[n].value is None for n in CREATE_RATES)
    assert metrics["seq_create_latency"].value == 624.0


def test_a_failed_run_names_the_workload() -> None:
    with pytest.raises(BenchmarkError, match="bonnie-smallfiles"):
        get_workload("bonnie-smallfiles").parse(
            result("", status=1, stderr="Can't create file\n"))
