"""Benchmark wrappers: argv per scale, and parsers against real captured output."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from framework.bench.workloads import (
    Benchmark,
    BenchmarkError,
    Metric,
    Scale,
    get_workload,
    list_workloads,
    phases,
    run_workload,
)
from framework.bench.workloads.bonnie import BonnieWorkload
from framework.bench.workloads.fio import PROFILES
from framework.bench.workloads.mongo import MongoWorkload
from framework.bench.workloads.postmark import tenths
from framework.core.command import CommandResult
from framework.core.errors import ConfigError, MissingPrerequisite
from framework.core.machine import FakeMachine, LocalMachine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())

BONNIE_RATES = {
    "per_char_write", "block_write", "rewrite", "per_char_read", "block_read", "random_seeks",
    "seq_create", "seq_stat", "seq_delete", "random_create", "random_stat", "random_delete",
}


def fixture(name: str) -> CommandResult:
    entry = MANIFEST[name]
    stderr = (FIXTURES / entry["stderr"]).read_text() if "stderr" in entry else ""
    return CommandResult(
        argv=tuple(entry["argv"]), status=entry["status"],
        stdout=(FIXTURES / entry["stdout"]).read_text(), stderr=stderr, duration_s=1.0,
    )


def by_name(metrics: list[Metric]) -> dict[str, Metric]:
    names = [m.name for m in metrics]
    assert len(names) == len(set(names)), f"duplicate metric names: {names}"
    return {m.name: m for m in metrics}


def csv_fields(name: str) -> list[str]:
    return fixture(name).stdout.strip().split(",")


# ---- registry -------------------------------------------------------------


def test_registry_lists_every_benchmark() -> None:
    names = list_workloads()
    for expected in ("bonnie", "postmark", "dbench", "fsmark", "mongo", "fio-seq-read-8k",
                     "fio-seq-write-8k", "fio-seq-read-64k", "fio-seq-write-64k",
                     "fio-web-server", "fio-file-server", "fio-oltp-8k"):
        assert expected in names
    for name in names:
        workload = get_workload(name)
        assert isinstance(workload, Benchmark)
        assert workload.name == name


def test_unknown_workload_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown workload 'bonie'.*bonnie"):
        get_workload("bonie")


# ---- argv per scale -------------------------------------------------------


@pytest.mark.parametrize("scale", list(Scale))
def test_every_workload_targets_its_own_directory(scale: Scale) -> None:
    for name in list_workloads():
        workload = get_workload(name)
        argv = workload.argv("/mnt/t", scale=scale)
        text = " ".join(argv) + (workload.stdin("/mnt/t", scale=scale) or "")
        assert "/mnt/t/" + name in text or argv[:3] == ["env", "-C", "/mnt/t"], name
        assert all(isinstance(a, str) for a in argv)
        assert workload.timeout_s(scale) > 0


def test_bonnie_sizes_satisfy_its_ram_rule_and_grow_with_scale() -> None:
    sizes = []
    for scale in Scale:
        argv = BonnieWorkload().argv("/mnt/t", scale=scale)
        assert argv[:4] == ["bonnie++", "-q", "-u", "root"]
        file_mib = int(argv[argv.index("-s") + 1].split(":")[0])
        ram_mib = int(argv[argv.index("-r") + 1])
        # bonnie++ refuses a file smaller than twice the RAM it is told about.
        assert file_mib >= 2 * ram_mib
        sizes.append(file_mib)
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_fio_profiles_match_the_iometer_definitions() -> None:
    profiles = {p.name: p for p in PROFILES}
    for p in profiles.values():
        if p.bssplit:
            shares = [int(part.split("/")[1]) for part in p.bssplit.split(":")]
            assert sum(shares) == 100, p.name
    web = profiles["web-server"]
    assert web.rw == "randread" and web.bssplit.startswith("512/") and "512k/" in web.bssplit
    fileserver = profiles["file-server"]
    assert fileserver.rw == "randrw" and fileserver.rwmixread == 80
    assert fileserver.bssplit.split(":")[-1].startswith("64k/")
    oltp = profiles["oltp-8k"]
    assert (oltp.rw, oltp.bs, oltp.rwmixread) == ("randrw", "8k", 67)


@pytest.mark.parametrize("profile", [p.name for p in PROFILES])
def test_fio_argv(profile: str) -> None:
    workload = get_workload(f"fio-{profile}")
    tiny = workload.argv("/mnt/t", scale=Scale.TINY)
    full = workload.argv("/mnt/t", scale=Scale.FULL)
    assert "--output-format=json" in tiny and "--direct=0" in tiny
    assert f"--directory=/mnt/t/fio-{profile}" in tiny
    sequential = profile.startswith("seq-")
    assert ("--time_based" in tiny) != sequential
    writes = "write" in profile or profile in {"file-server", "oltp-8k"}
    assert ("--end_fsync=1" in tiny) == writes

    def size_mib(argv: list[str]) -> int:
        return int(next(a for a in argv if a.startswith("--size="))[7:-1])

    assert size_mib(tiny) < size_mib(full)


def test_postmark_config_carries_filemark_biases() -> None:
    workload = get_workload("postmark")
    # Relative to the work directory: PostMark garbles long paths.
    assert workload.argv("/mnt/t", scale=Scale.TINY) == ["env", "-C", "/mnt/t", "postmark"]
    config = workload.stdin("/mnt/t", scale=Scale.SMALL) or ""
    lines = config.splitlines()
    assert "set location postmark" in lines
    assert "set number 10000" in lines  # the small system of Bryant et al.
    assert "set bias read 8" in lines and "set bias create 5" in lines
    assert lines[-2:] == ["run", "quit"]


def test_postmark_bias_rounds_percent_to_tenths() -> None:
    assert [tenths(p) for p in (0, 50, 74, 75, 100)] == [0, 5, 7, 8, 10]
    with pytest.raises(ValueError, match="101"):
        tenths(101)


def test_dbench_and_fsmark_argv() -> None:
    dbench = get_workload("dbench").argv("/mnt/t", scale=Scale.TINY)
    assert dbench[:5] == ["dbench", "-D", "/mnt/t/dbench", "-t", "10"]
    assert dbench[-2:] == ["/usr/share/dbench/client.txt", "2"]
    fsmark = get_workload("fsmark").argv("/mnt/" + "long" * 20, scale=Scale.SMALL)
    # Run from the work directory: fs_mark refuses -d paths of 39 bytes or
    # more and puts its log in the current directory.
    assert fsmark[:6] == ["env", "-C", "/mnt/" + "long" * 20, "fs_mark", "-d", "fsmark"]
    assert fsmark[fsmark.index("-S") + 1] == "1"
    assert fsmark[fsmark.index("-l") + 1] == "fsmark.log"


def test_mongo_argv_uses_the_machine_interpreter() -> None:
    workload = MongoWorkload(python=("/opt/venv/bin/python",), seed=7)
    argv = workload.argv("/mnt/t", scale=Scale.TINY)
    assert argv[:3] == ["/opt/venv/bin/python", "-m", "framework.bench.workloads.phases"]
    assert argv[argv.index("--seed") + 1] == "7" and "--drop-caches" in argv


# ---- parsers on real output ------------------------------------------------


def test_bonnie_tiny_run() -> None:
    metrics = by_name(get_workload("bonnie").parse(fixture("bonnie-tiny")))
    assert metrics.keys() >= BONNIE_RATES
    assert {f"{n}_latency" for n in BONNIE_RATES} <= metrics.keys()
    assert metrics["per_char_write"].unit == "KiB/s"
    assert metrics["random_seeks"].unit == "seeks/s"
    assert metrics["seq_create"].unit == "files/s"
    assert metrics["per_char_write"].value and metrics["per_char_write"].value > 0
    assert all(m.higher_is_better for n, m in metrics.items() if n in BONNIE_RATES)
    assert not any(m.higher_is_better for n, m in metrics.items() if n.endswith("_latency"))


def test_bonnie_plus_fields_are_no_value_not_zero() -> None:
    fields = csv_fields("bonnie-allplus")
    metrics = by_name(get_workload("bonnie").parse(fixture("bonnie-allplus")))
    assert metrics["per_char_write"].value == float(fields[9])
    assert fields[11] == "+++++"
    for name in BONNIE_RATES - {"per_char_write"}:
        assert metrics[name].value is None, name
    for name in BONNIE_RATES:  # latencies are always measured
        latency = metrics[f"{name}_latency"].value
        assert latency is not None and latency > 0


def test_bonnie_measured_fields_and_latency_units() -> None:
    big = by_name(get_workload("bonnie").parse(fixture("bonnie-1g")))
    fields = csv_fields("bonnie-1g")
    assert big["block_write"].value == float(fields[11]) > 0
    assert fields[39] == "528ms" and big["block_write_latency"].value == 528_000.0
    creates = by_name(get_workload("bonnie").parse(fixture("bonnie-creates")))
    fields = csv_fields("bonnie-creates")
    assert creates["seq_create"].value == float(fields[26]) > 0
    assert creates["seq_stat"].value is None  # "+++++" in this run
    assert creates["random_delete"].value == float(fields[36]) > 0


def test_bonnie_error_is_reported_with_the_tool() -> None:
    result = fixture("bonnie-error")
    assert result.stdout == ""
    with pytest.raises(BenchmarkError, match=r"bonnie: bonnie\+\+ failed.*disk full"):
        BonnieWorkload().parse(result)


def test_bonnie_rejects_a_truncated_line() -> None:
    result = fixture("bonnie-tiny")
    cut = CommandResult(result.argv, 0, result.stdout[:60], "", 1.0)
    with pytest.raises(BenchmarkError, match="one CSV line"):
        BonnieWorkload().parse(cut)


def test_postmark_reports() -> None:
    metrics = by_name(get_workload("postmark").parse(fixture("postmark-small")))
    assert metrics["transactions"] == Metric("transactions", 75000.0, "transactions/s", True)
    assert metrics["created"].value == 38021 and metrics["created"].unit == "files/s"
    assert metrics["read"].value == 60004 and metrics["appended"].value == 14971
    assert metrics["deleted"].value == 38021
    # PostMark's megabytes are MiB; the metric is in MB (10^6 bytes).
    assert metrics["read_bw"].value == pytest.approx(344.87 * 1024**2 / 1e6)
    assert metrics["write_bw"].value == pytest.approx(218.77 * 1024**2 / 1e6)
    assert metrics["elapsed"] == Metric("elapsed", 4.0, "s", False)
    small = by_name(get_workload("postmark").parse(fixture("postmark-kilobytes")))
    assert small["read_bw"].value == pytest.approx(350.03 * 1024 / 1e6)
    tiny = by_name(get_workload("postmark").parse(fixture("postmark-tiny")))
    assert all(m.value is not None and m.value > 0 for m in tiny.values())


def test_postmark_errors_on_stderr_fail_despite_status_zero() -> None:
    result = fixture("postmark-error")
    assert result.status == 0
    with pytest.raises(BenchmarkError, match=r"postmark: \d+ errors, first: Error: cannot open"):
        get_workload("postmark").parse(result)


def test_dbench_report() -> None:
    result = fixture("dbench-tiny")
    metrics = by_name(get_workload("dbench").parse(result))
    throughput = re.search(r"Throughput ([\d.]+) MB/sec", result.stdout)
    assert throughput is not None
    assert metrics["throughput"] == Metric("throughput", float(throughput.group(1)), "MB/s",
                                           True)
    assert metrics["max_latency"].unit == "ms" and not metrics["max_latency"].higher_is_better
    counts = {n: m.value for n, m in metrics.items() if n.endswith("_count")}
    assert {"ntcreatex_count", "readx_count", "writex_count", "flush_count"} <= counts.keys()
    assert metrics["operations"].value == sum(v or 0 for v in counts.values()) > 0
    assert metrics["readx_max_latency"].value is not None
    assert metrics["readx_max_latency"].value >= (metrics["readx_avg_latency"].value or 0)


def test_dbench_error() -> None:
    with pytest.raises(BenchmarkError, match=r"dbench: dbench failed.*Child failed"):
        get_workload("dbench").parse(fixture("dbench-error"))


@pytest.mark.parametrize("profile", [p.name for p in PROFILES])
def test_fio_reports(profile: str) -> None:
    name = f"fio-{profile}"
    metrics = by_name(get_workload(name).parse(fixture(f"{name}-tiny")))
    directions = {n.split("_")[0] for n in metrics}
    expected = {"read", "write"} if profile in {"file-server", "oltp-8k"} else (
        {"write"} if "write" in profile else {"read"})
    assert directions == expected
    for d in expected:
        bw, iops = metrics[f"{d}_bw"], metrics[f"{d}_iops"]
        assert (bw.unit, iops.unit) == ("MB/s", "IOPS")
        assert bw.value and iops.value and bw.value > 0 and iops.value > 0
        assert metrics[f"{d}_clat_mean"].unit == "us"
        p99 = metrics[f"{d}_clat_p99"].value
        assert p99 is not None and p99 > 0
        if profile.endswith(("-8k", "-64k")) and profile.startswith("seq"):
            # Fixed-size requests: bandwidth / IOPS is the block size.
            block = 8192 if profile.endswith("8k") else 65536
            assert bw.value * 1e6 / iops.value == pytest.approx(block, rel=0.01)


def test_fio_mixed_profiles_honour_the_read_share() -> None:
    metrics = by_name(get_workload("fio-oltp-8k").parse(fixture("fio-oltp-8k-tiny")))
    reads, writes = metrics["read_iops"].value, metrics["write_iops"].value
    assert reads and writes
    assert reads / (reads + writes) == pytest.approx(0.67, abs=0.03)


def test_fio_errors() -> None:
    fio = get_workload("fio-seq-read-8k")
    with pytest.raises(BenchmarkError, match=r"fio-seq-read-8k: fio failed.*not a directory"):
        fio.parse(fixture("fio-error"))
    with pytest.raises(BenchmarkError, match="not JSON"):
        fio.parse(CommandResult(("fio",), 0, "{ truncated", "", 0.1))
    doc = json.loads(fixture("fio-seq-read-8k-tiny").stdout)
    doc["jobs"][0]["error"] = 5
    with pytest.raises(BenchmarkError, match="reports error 5"):
        fio.parse(CommandResult(("fio",), 0, json.dumps(doc), "", 0.1))


def test_fsmark_overall_rate_is_the_harmonic_mean_of_loops() -> None:
    result = fixture("fsmark-tiny")
    rows = [ln.split() for ln in result.stdout.splitlines() if re.match(r"^\s*\d", ln)]
    rates = [float(r[3]) for r in rows]
    metrics = by_name(get_workload("fsmark").parse(result))
    files = metrics["files"]
    assert files.unit == "files/s" and files.higher_is_better
    assert files.value == pytest.approx(len(rates) / sum(1 / r for r in rates))
    assert min(rates) <= (files.value or 0) <= max(rates)
    assert metrics["app_overhead"].unit == "us"


def test_fsmark_error() -> None:
    with pytest.raises(BenchmarkError, match=r"fsmark: fs_mark failed.*mkdir"):
        get_workload("fsmark").parse(fixture("fsmark-error"))


def test_mongo_report() -> None:
    metrics = by_name(get_workload("mongo").parse(fixture("mongo-tiny")))
    assert list(metrics) == [*phases.PHASES, "total"]
    assert all(m.unit == "s" and not m.higher_is_better for m in metrics.values())
    assert all((m.value or 0) > 0 for m in metrics.values())
    total = sum(metrics[p].value or 0 for p in phases.PHASES)
    assert metrics["total"].value == pytest.approx(total)


@pytest.mark.parametrize("name", ["bonnie", "postmark", "dbench", "fsmark", "mongo",
                                  "fio-web-server"])
def test_empty_output_is_an_error_naming_the_workload(name: str) -> None:
    with pytest.raises(BenchmarkError, match=f"^{re.escape(name)}: .* printed nothing"):
        get_workload(name).parse(CommandResult(("x",), 0, "", "", 0.1))


# ---- the phase module itself -----------------------------------------------


def test_phases_module_runs_every_phase_and_cleans_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "w"
    assert phases.main([str(work), "--files", "40", "--seed", "3", "--size-bytes", "300",
                        "--files-per-dir", "16"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["phases"]) == list(phases.PHASES)
    assert report["files"] == 40 and report["dirs"] == 3
    assert 40 * 150 <= report["bytes"] <= 40 * 450
    assert list(work.iterdir()) == []


def test_phases_tree_is_reproducible_from_the_seed(tmp_path: Path) -> None:
    a = phases.Tree(tmp_path, files=20, size_bytes=1000, files_per_dir=8, seed=5)
    b = phases.Tree(tmp_path, files=20, size_bytes=1000, files_per_dir=8, seed=5)
    c = phases.Tree(tmp_path, files=20, size_bytes=1000, files_per_dir=8, seed=6)
    assert a.files == b.files and a.files != c.files
    _, _, size, offset = a.files[0]
    assert len(a.content(size, offset)) == size
    assert a.content(100_000, 60_000)[:10] == a.block[60_000:60_010]  # wraps around


def test_phases_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("x")
    with pytest.raises(SystemExit):
        phases.main([str(tmp_path), "--files", "1", "--seed", "1"])
    assert (tmp_path / "keep").read_text() == "x"


# ---- run_workload through a machine ----------------------------------------


def test_run_workload_prepares_feeds_stdin_and_parses() -> None:
    machine = FakeMachine(strict=True)
    machine.on("mkdir -p /mnt/t/postmark")
    machine.on("env -C /mnt/t postmark", stdout=fixture("postmark-small").stdout)
    metrics = run_workload(machine, get_workload("postmark"), "/mnt/t", scale=Scale.TINY)
    assert by_name(metrics)["transactions"].value == 75000.0
    assert machine.calls == [("mkdir", "-p", "/mnt/t/postmark"),
                             ("env", "-C", "/mnt/t", "postmark")]
    assert machine.inputs[1] is not None and "set location postmark" in machine.inputs[1]
    machine.close()


def test_run_workload_failure_is_a_workload_error() -> None:
    machine = FakeMachine()
    entry = fixture("dbench-error")
    machine.on("dbench *", status=1, stdout=entry.stdout, stderr=entry.stderr)
    with pytest.raises(BenchmarkError, match="dbench"):
        run_workload(machine, get_workload("dbench"), "/mnt/t", scale=Scale.TINY)
    machine.close()


def test_missing_tool_names_the_debian_package() -> None:
    machine = FakeMachine()

    def missing(argv: tuple[str, ...], _input: str | None) -> tuple[int, str, str]:
        raise MissingPrerequisite(f"{argv[0]}: not found")

    machine.on("dbench *", respond=missing)
    with pytest.raises(MissingPrerequisite, match="install the Debian package dbench"):
        run_workload(machine, get_workload("dbench"), "/mnt/t", scale=Scale.TINY)
    # Through env (or a guest shell) a missing command is status 127.
    machine.on("env -C /mnt/t fs_mark *", status=127, stderr="env: 'fs_mark': No such file")
    with pytest.raises(MissingPrerequisite, match="install the Debian package fsmark"):
        run_workload(machine, get_workload("fsmark"), "/mnt/t", scale=Scale.TINY)
    # The loader's 127 is not a missing tool: fio in a guest of 160 MiB said this.
    machine.on("env -C /mnt/t fs_mark *", status=127, stderr=(
        "fs_mark: error while loading shared libraries: libceph-common.so.2: cannot map "
        "zero-fill pages"))
    with pytest.raises(BenchmarkError, match=r"could not load its shared libraries .*"
                                             r"libceph-common\.so\.2: cannot map"):
        run_workload(machine, get_workload("fsmark"), "/mnt/t", scale=Scale.TINY)
    machine.close()


# ---- the real tools --------------------------------------------------------


@pytest.mark.host_root
def test_every_tool_really_runs_at_tiny_scale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: bonnie++ runs as root (-u root)")
    # The timed tools run for a second here: the test is that each one starts with the
    # arguments powercut gives it and that its output parses, not how fast it runs.
    from framework.bench.workloads import dbench, fio
    monkeypatch.setitem(dbench._SIZES, Scale.TINY, dbench.DbenchSize(2, 2))
    monkeypatch.setitem(fio._SIZES, Scale.TINY, fio.FioSize(8, 1))
    missing = []
    with LocalMachine(rundir=tmp_path) as machine:
        for name in list_workloads():
            workload = get_workload(name)
            if name == "mongo":
                # Dropping the page cache would slow every other user of this host.
                workload = MongoWorkload(python=tuple(machine.python_argv()), drop_caches=False)
            if shutil.which(workload.tool) is None:
                missing.append(f"{workload.tool} (Debian package {workload.package})")
                continue
            workdir = tmp_path / name
            workdir.mkdir()
            metrics = run_workload(machine, workload, str(workdir), scale=Scale.TINY)
            measured = [m for m in metrics if m.value is not None]
            assert measured, name
            # The tools the guest's test leaves to this one: their primary metric and units.
            if name == "bonnie":
                per_char = next(m for m in metrics if m.name == "per_char_write")
                assert per_char.value is not None and per_char.value > 0, per_char
                assert {m.unit for m in metrics} <= {"KiB/s", "seeks/s", "files/s", "us", "s"}
            if name == "postmark":
                transactions = next(m for m in metrics if m.name == "transactions")
                assert transactions.value is not None and transactions.value > 0, transactions
                assert {m.unit for m in metrics} <= {"transactions/s", "files/s", "MB/s", "s"}
            assert all(m.value is not None and m.value >= 0 for m in measured), name
            assert any((m.value or 0) > 0 for m in measured), name
            shutil.rmtree(workdir)
    if missing:
        pytest.skip("not installed: " + ", ".join(missing))


def test_bonnie_block_skips_the_per_character_tests_and_fits_the_tiny_data_disk() -> None:
    from framework.bench.engine import DATA_DISK_BYTES

    argv = get_workload("bonnie-block").argv("/mnt/x", scale=Scale.TINY)
    assert argv[-1] == "-f" and argv[argv.index("-n") + 1] == "0"
    file_mib = int(argv[argv.index("-s") + 1].split(":")[0])
    assert file_mib >= 2 * int(argv[argv.index("-r") + 1])  # bonnie++'s RAM rule
    assert file_mib * (1 << 20) <= DATA_DISK_BYTES[Scale.TINY] // 2
    assert "-f" not in get_workload("bonnie").argv("/mnt/x", scale=Scale.TINY)


def test_a_duration_replaces_the_scales_time_of_a_timed_workload() -> None:
    fio = get_workload("fio-file-server")
    assert "--runtime=30" in fio.argv("/mnt/t", scale=Scale.SMALL)  # control: the scale's
    short = fio.with_duration(10)
    argv = short.argv("/mnt/t", scale=Scale.SMALL)
    assert "--runtime=10" in argv and "--runtime=30" not in argv and "--time_based" in argv
    assert "--size=256M" in argv  # the file stays the scale's
    assert short.timeout_s(Scale.SMALL) < fio.timeout_s(Scale.SMALL)
    dbench = get_workload("dbench").with_duration(25).argv("/mnt/t", scale=Scale.SMALL)
    assert dbench[3:5] == ["-t", "25"] and dbench[-1] == "4"  # the scale's clients


@pytest.mark.parametrize("name", ["fio-seq-read-64k", "bonnie", "postmark", "fsmark"])
def test_a_duration_is_refused_by_a_workload_of_fixed_work(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"^workload {name!r} .*--duration"):
        get_workload(name).with_duration(10)
