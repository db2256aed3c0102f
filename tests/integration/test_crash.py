"""Crash runs in the guest: positive controls fire, negative controls stay quiet,
reproducers rebuild the same state, hangs are findings."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from crashcases.crash.faults import Faults
from crashcases.crash.plan import CrashPlan, validate_plan
from crashcases.crash.points import Strategy, Variants
from crashcases.crash.run import recheck, run_crash, run_spec
from crashcases.vocabulary import Outcome
from devicemapper.replay import Replayer
from framework.core.lifecycle import run_lifecycle
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.qemu import GUEST_CPUS_VARIABLE, QemuMachine
from framework.core.store import Store
from recovery.filesystems import kernel_modules

LOSS = {Outcome.DATA_LOSS}


def factory(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
    return QemuMachine(disks=disks, modules=kernel_modules(fstypes), rundir=rundir).start()


def outcomes(result) -> dict[str, Outcome]:
    return {k: r.outcome for k, r in result.results.items()}


def crash(tmp_path: Path, *, points: str = "marks", variants: Sequence[str] = ("prefix",),
          inject_busy: str | None = None, inject_hang: str | None = None, **kw) -> object:
    plan = CrashPlan(**{"case": "hand:write-fsync-rename", **kw}, points=Strategy.parse(points),
                     variants=Variants.parse(variants),
                     faults=Faults.parse(hang=inject_hang, busy=inject_busy))
    with Store(tmp_path / "db.sqlite") as store, \
            run_lifecycle(run_spec(plan), tmp_path, store) as run:
        result = run_crash(validate_plan(plan), run, factory)
        assert Counter(c.outcome for c in store.checks(result.run_id)) == {
            k: v for k, v in result.counts().items() if v}
    assert len(result.results) == len(result.states) > 0
    return result


def test_lying_disk_fires_and_neither_busy_devices_nor_a_hung_check_end_the_run(
        tmp_path, monkeypatch):
    """The lying disk fires on both lanes while two states' devices are held open by
    another process: state 2's for a second (as by a child that forked while a lane had it
    open: the lane waits it out), state 5's for good (a harness error that names the
    holder; the guest is replaced and the state checked again). State 3's check hangs: a
    finding, and a guest replaced. Guests of two vCPUs, as by default: the lanes run at
    once, not in turns."""
    monkeypatch.setenv(GUEST_CPUS_VARIABLE, "2")
    # A budget loose enough that a loaded machine never makes fsck look hung: only the
    # injected fault may count as a hang.
    result = crash(tmp_path, target="ext4/ordered", variants=("prefix", "lying"), per_point=3,
                   inject_busy="#2@1,#5", inject_hang="#3", check_timeout_s=30)
    by_variant: dict[str, set[Outcome]] = {}
    third = result.states[2].key
    for key, o in outcomes(result).items():
        if key != third:
            by_variant.setdefault(key.split("/")[1].split(":")[0], set()).add(o)
    assert result.results[third].outcome is Outcome.HANG
    assert "stopped answering" in result.results[third].notes[0]
    assert by_variant["prefix"] == {Outcome.OK}
    assert by_variant["lying"] & (LOSS | {Outcome.UNMOUNTABLE, Outcome.CORRUPT})
    assert Outcome.ERROR not in set(outcomes(result).values())
    fifth = result.states[4].key
    assert [key for key, _ in result.harness_errors] == [fifth]
    why = result.harness_errors[0][1]
    assert "still open" in why and "(python" in why, why
    assert result.replacements == 2


def test_two_disks_a_lying_journal_disk_fires_and_prefix_states_keep_every_promise(tmp_path):
    """xfs with its log on a disk of its own, both disks recorded: the prefix states
    (both disks at each mark) are the negative control, a journal disk that ignores
    flushes the positive one; recheck rebuilds both disks."""
    result = crash(tmp_path, target="xfs/logdev", variants=("prefix", "journal-lying"), per_point=2)
    by_variant: dict[str, set[Outcome]] = {}
    for key, o in outcomes(result).items():
        by_variant.setdefault(key.split("/")[1].split(":")[0], set()).add(o)
    assert by_variant["prefix"] == {Outcome.OK}
    assert by_variant["journal-lying"] & (LOSS | {Outcome.UNMOUNTABLE, Outcome.CORRUPT})
    assert (result.run_dir / "journal-log.img").stat().st_size > 0
    lied = next(k for k, o in outcomes(result).items() if "journal-lying" in k and o is not Outcome.OK)
    assert recheck(result.run_dir, lied, factory)[1].outcome is result.results[lied].outcome
    assert list(result.run_dir.glob("state-*-journal.img.gz"))


def test_an_external_journal_made_by_mkfs_is_durable_at_the_mkfs_mark(tmp_path):
    """ext4 with its journal on a disk of its own and a workload whose first marks come
    before any journal commit (two syncs on an empty filesystem). mke2fs writes the
    journal's user list without flushing the journal disk, and dm-log-writes logs a write
    only at the flush after it: unless mkfs is followed by a flush, the journal log at the
    mkfs mark holds a journal with no user and the first states do not mount (with the
    flush taken out of recovery.mount.mkfs, the states at both syncs are unmountable)."""
    ops = [{"kind": "sync"}, {"kind": "sync"}, {"kind": "mkdir", "path": "d"},
           {"kind": "creat", "path": "d/f"}, {"kind": "fsync", "path": "d/f"}]
    workload = tmp_path / "syncs.json"
    workload.write_text(json.dumps({"name": "syncs first", "seed": 0, "ops": ops}))
    result = crash(tmp_path, target="ext4/logdev", case=f"file:{workload}")
    assert set(outcomes(result).values()) == {Outcome.OK}, {
        k: (r.outcome, r.findings[:1]) for k, r in result.results.items()}
    journal = tmp_path / "journal-at-mkfs.img"
    journal.write_bytes(b"")
    journal_log = result.run_dir / "journal-log.img"
    with open(journal, "r+b") as f:
        f.truncate(64 << 20)
    with Replayer(journal_log, journal) as rp:
        rp.replay_to_mark("mkfs")
    # The jbd2 superblock in the block after the first 4 KiB: s_nr_users at byte 64,
    # big-endian (include/linux/jbd2.h, journal_superblock_t).
    with open(journal, "rb") as f:
        f.seek(4096)
        jsb = f.read(1024)
    assert int.from_bytes(jsb[:4], "big") == 0xC03B3998
    assert int.from_bytes(jsb[64:68], "big") == 1


def test_a_page_written_back_before_an_odsync_direct_write_is_not_a_finding(tmp_path):
    """A file with the S attribute: a store through a shared mapping, then an O_DIRECT
    write over the same block. The page's writeback completes before the direct write is
    issued with FUA, but dm-log-writes logs the FUA write first and the page at the sync's
    flush: in the log's order the final state holds the page's older bytes (the control:
    that failure must be seen), in the other order it holds the direct write's, and the
    state is no finding. A recheck of it from its key reaches the same verdict."""
    ops = [{"kind": "mkdir", "path": "d"}, {"kind": "creat", "path": "d/f"}, {"kind": "sync"},
           {"kind": "setflags", "path": "d/f", "flags": 8},
           {"kind": "write", "path": "d/f", "length": 4096},
           {"kind": "mmap_write", "path": "d/f", "offset": 0, "length": 4096},
           {"kind": "direct_write", "path": "d/f", "offset": 0, "length": 4096},
           {"kind": "sync"}]
    workload = tmp_path / "dio.json"
    workload.write_text(json.dumps({"name": "mapped page, then O_DSYNC O_DIRECT", "seed": 0,
                                    "ops": ops}))
    result = crash(tmp_path, target="ext4/ordered", case=f"file:{workload}")
    assert set(outcomes(result).values()) == {Outcome.OK}, {
        k: (r.outcome, r.notes[:1], r.findings[:1]) for k, r in result.results.items()}
    reread = result.passed_on_other_reading()
    assert reread, "the final state should have failed in the log's order"
    note = result.results[reread[-1]].notes[0]
    assert "In the log's order this state fails (wrong-content" in note, note
    assert recheck(result.run_dir, reread[-1], factory)[1].outcome is Outcome.OK


def test_ext2_states_need_fsck_repair_and_recheck_agrees(tmp_path):
    result = crash(tmp_path, target="ext2", points="every:4")
    got = outcomes(result)
    recovered = [k for k, o in got.items() if o is Outcome.RECOVERED]
    assert recovered, got
    assert recheck(result.run_dir, recovered[-1], factory)[1].outcome is Outcome.RECOVERED


@pytest.mark.parametrize("target", ["ext4/ordered", "ext4/journal"])
def test_journalled_ext4_keeps_every_promise_on_generated_pairs(tmp_path, target):
    """Negative control: generated length-2 sequences, subset variants included."""
    result = crash(tmp_path, target=target, case="gen:seq2", max_sequences=8,
                   variants=("prefix", "subset"), per_point=1)
    bad = {k: (r.outcome, r.findings[:1]) for k, r in result.results.items()
           if r.outcome is not Outcome.OK}
    assert not bad


def test_nobarrier_loses_fsynced_data_the_cli_fails_with_junit_and_reproducers_agree(tmp_path):
    """Positive control: without flushes the log holds none of the workload's writes at
    its marks, exactly what a disk with a volatile cache keeps. The command exits 1 with
    a JUnit failure, and a recheck of a failing state rebuilds the same failure."""
    junit = tmp_path / "junit.xml"
    out = subprocess.run(
        [sys.executable, "-m", "framework.cli", "crash", "-q", "--target", "ext4/nobarrier",
         "--results", str(tmp_path), "--db", str(tmp_path / "db.sqlite"), "--junit", str(junit)],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr
    assert "data-loss" in out.stdout and "powercut recheck" in out.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and int(suite.get("failures", "0")) >= 1
    assert int(suite.get("tests", "0")) >= int(suite.get("failures", "0"))
    (run_dir,) = tmp_path.glob("crash-*")
    states = json.loads((run_dir / "results.json").read_text())["states"]
    lost = [s for s in states if s["result"]["outcome"] == Outcome.DATA_LOSS.value]
    assert lost, [s["result"]["outcome"] for s in states]
    first = lost[0]["result"]
    assert first["findings"][0]["kind"] == "data-loss" and first["findings"][0]["mark"]
    _, again = recheck(run_dir, lost[0]["key"], factory)
    assert again.outcome is Outcome.DATA_LOSS
    assert again.findings == first["findings"]
    assert list(run_dir.glob("state-*.img.gz")), "no crash image kept for a failing state"
