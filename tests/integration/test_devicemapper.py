"""Device-mapper acceptance: a log recorded by the kernel's dm-log-writes, replayed on the
host; the log format against the real target; dm-flakey cuts; ``powercut log`` on real logs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crashcases.crash.guest import CRASH_RECORD, RecordRequest
from crashcases.execute import execute, mark_name
from crashcases.oracle.log import OracleLog
from crashcases.oracle.verify import verify
from crashcases.workload.cases import load_case
from crashcases.workload.ops import DURABILITY_OPS, Workload
from devicemapper.flakey import flakey_device
from devicemapper.logformat import END_MARK, LogFlag, LogReader, LogWriter, summarize
from devicemapper.replay import Replayer
from devicemapper.table import FlakeyMode
from framework.core import agent
from framework.core.command import CommandResult, run
from framework.core.machine.base import DiskSpec
from framework.core.machine.qemu import QemuMachine
from recovery.filesystems import kernel_modules, persistence_rules
from recovery.targets import get_target

POWERCUT = [sys.executable, "-m", "framework.cli"]
TARGET = "ext4/ordered"
DATA_BYTES = 96 << 20
BLOCK = 4096


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QemuMachine]:
    rundir = tmp_path_factory.mktemp("dm-vm")
    machine = QemuMachine(disks=[DiskSpec("data", DATA_BYTES), DiskSpec("log", 256 << 20),
                                 DiskSpec("scratch", 16 << 20), DiskSpec("cow", 16 << 20)],
                          modules=kernel_modules(("ext4",)), rundir=rundir)
    machine.start()
    yield machine
    machine.close()


@pytest.fixture(scope="module")
def recorded(vm: QemuMachine) -> tuple[Workload, OracleLog, dict[str, int], Path]:
    """A workload of appends made durable by fdatasync, recorded by the kernel target."""
    workload = load_case("hand:append-fdatasync", seed=11)
    oracle_path = vm.rundir / "oracle.json"
    request = RecordRequest(get_target(TARGET), workload, data_dev=vm.disk("data"),
                            log_dev=vm.disk("log"), oracle_path=os.fspath(oracle_path))
    info = agent.perform(vm, CRASH_RECORD, request, timeout_s=600).to_dict()
    return workload, OracleLog.from_json(oracle_path.read_text()), info, vm.disk_image("log")


@contextlib.contextmanager
def loop_mounted(image: Path, mountpoint: Path) -> Iterator[Path]:
    """Mount an ext4 image read-only on the host through a loop device; always detach."""
    # Not `losetup -r`: ext4 refuses to replay a journal on a read-only device,
    # and every state after an fsync has a journal to replay. The image is a
    # throwaway copy, so letting the kernel write to it changes nothing else.
    dev = run(["losetup", "--find", "--show", os.fspath(image)], timeout_s=30).stdout.strip()
    try:
        mountpoint.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "ext4", "-o", "ro", dev, os.fspath(mountpoint)], timeout_s=60)
        try:
            yield mountpoint
        finally:
            run(["umount", os.fspath(mountpoint)], timeout_s=60)
    finally:
        run(["losetup", "-d", dev], timeout_s=30)


def test_replay_to_every_mark_holds_exactly_what_was_fsynced(recorded, tmp_path: Path) -> None:
    workload, oracle, _info, log_image = recorded
    rules = persistence_rules(get_target(TARGET))
    replay = tmp_path / "replay.img"
    with open(replay, "wb") as f:
        f.truncate(DATA_BYTES)
    durable = [i for i, op in enumerate(workload.ops) if op.kind in DURABILITY_OPS]
    checked = 0
    with Replayer(log_image, replay) as rep:
        for k, op_index in enumerate(durable):
            name = mark_name(k)
            rep.replay_to_mark(name, after=rep.position - 1)
            state = tmp_path / f"{name}.img"
            shutil.copyfile(replay, state)
            with loop_mounted(state, tmp_path / f"mnt-{name}") as mnt:
                assert verify(oracle, mnt, last_mark=name, rules=rules) == []
                # Bytes, not only hashes: the model of the workload up to this
                # fsync, executed on the host, against the replayed file.
                model_root = tmp_path / f"model-{name}"
                model_root.mkdir()
                execute(Workload(workload.name, workload.seed, workload.ops[: op_index + 1]),
                        model_root, lambda _n: None)
                logfile = next(p for p in model_root.rglob("log") if p.is_file())
                expected = logfile.read_bytes()
                got = (mnt / logfile.relative_to(model_root)).read_bytes()
                assert got == expected, f"{name}: {len(got)} bytes on disk, {len(expected)} written"
            state.unlink()
            checked += 1
    assert checked == len(durable) == 9


def test_positive_control_replay_before_the_mark_misses_the_fsynced_append(recorded, tmp_path: Path) -> None:
    """The same comparison must fire on a state that stops short of the promise."""
    _workload, oracle, _info, log_image = recorded
    replay = tmp_path / "early.img"
    with open(replay, "wb") as f:
        f.truncate(DATA_BYTES)
    with LogReader(log_image) as reader:
        pc1 = next(e.index for e in reader if e.mark == mark_name(1))
    with Replayer(log_image, replay) as rep:
        rep.replay_to_mark(mark_name(0))
    with loop_mounted(replay, tmp_path / "mnt") as mnt:
        findings = verify(oracle, mnt, last_mark=mark_name(1), rules=persistence_rules(get_target(TARGET)))
    assert findings, f"state at pc-0 passed as pc-1 (pc-1 is entry {pc1})"


def test_kernel_log_parses_and_rewrites_byte_for_byte(recorded, tmp_path: Path) -> None:
    workload, oracle, info, log_image = recorded
    with LogReader(log_image) as reader:
        entries = list(reader)
        summary = summarize(reader)
        rewritten = tmp_path / "rewritten.log"
        with LogWriter(rewritten, sectorsize=reader.sectorsize, end_mark=False) as w:
            for e in entries:
                if e.is_mark:
                    w.mark(e.mark or "")
                elif e.is_discard:
                    w.discard(e.sector, e.nr_sectors)
                elif e.nr_sectors == 0 and e.flags == LogFlag.FLUSH:
                    w.flush()
                elif e.nr_sectors == 0:
                    # The kernel also logs data-less flushes that carry FUA and
                    # METADATA (an empty REQ_PREFLUSH|REQ_FUA|REQ_META bio);
                    # LogWriter.flush() has no flags argument for them.
                    w._append(e.sector, 0, int(e.flags), b"", b"")
                else:
                    w.write(e.sector, reader.read_payload(e), LogFlag(e.flags))
    # The target's count before removal, plus the end mark it adds on removal.
    assert len(entries) == info["entries"] + 1
    assert entries[-1].mark == END_MARK
    marks = [e.mark for e in entries if e.is_mark]
    assert marks == ["mkfs", *oracle.marks, END_MARK]
    assert oracle.marks == [mark_name(i) for i in range(workload.durability_count)]
    assert summary.flushes > 0 and summary.fuas > 0
    assert any(e.flags & LogFlag.METADATA for e in entries)
    original = log_image.read_bytes()[: rewritten.stat().st_size]
    copy = rewritten.read_bytes()
    # The kernel's super ends in four uninitialised padding bytes (28..31).
    assert original[:28] == copy[:28]
    assert original[32:] == copy[32:]


def _dd_write(vm: QemuMachine, src: Path, dev: str, block: int) -> CommandResult:
    return vm.run(["dd", f"if={src}", f"of={dev}", f"bs={BLOCK}", f"seek={block}", "count=1",
                   "oflag=direct", "conv=notrunc"], ok_status=None, timeout_s=60)


def _dd_read(vm: QemuMachine, dev: str, block: int, out: Path) -> bytes:
    vm.run(["dd", f"if={dev}", f"of={out}", f"bs={BLOCK}", f"skip={block}", "count=1",
            "iflag=direct"], timeout_s=60)
    return out.read_bytes()


def test_flakey_drop_writes_loses_every_write_after_the_cut(vm: QemuMachine) -> None:
    before, after = b"\xa5" * BLOCK, b"\x5a" * BLOCK
    (vm.rundir / "before.bin").write_bytes(before)
    (vm.rundir / "after.bin").write_bytes(after)
    scratch = vm.disk("scratch")
    with flakey_device(vm, scratch, name="pc-test-drop") as fd:
        assert _dd_write(vm, vm.rundir / "before.bin", fd.path, 0).status == 0
        fd.cut(FlakeyMode.DROP_WRITES)
        assert "drop_writes" in fd.dm.table(fd.name)
        # Both succeed from the writer's view: a power cut is silent.
        assert _dd_write(vm, vm.rundir / "after.bin", fd.path, 0).status == 0
        assert _dd_write(vm, vm.rundir / "after.bin", fd.path, 1).status == 0
        fd.restore()
        assert _dd_read(vm, fd.path, 0, vm.rundir / "r0.bin") == before
        assert _dd_read(vm, fd.path, 1, vm.rundir / "r1.bin") == bytes(BLOCK)
        # Positive control: after restore, writes reach the disk again.
        assert _dd_write(vm, vm.rundir / "after.bin", fd.path, 1).status == 0
        assert _dd_read(vm, fd.path, 1, vm.rundir / "r2.bin") == after
    assert _dd_read(vm, scratch, 0, vm.rundir / "raw.bin") == before


def test_flakey_error_writes_fails_writes_with_eio(vm: QemuMachine) -> None:
    pattern = b"\x3c" * BLOCK
    (vm.rundir / "pattern.bin").write_bytes(pattern)
    with flakey_device(vm, vm.disk("scratch"), name="pc-test-error") as fd:
        fd.cut(FlakeyMode.ERROR_WRITES)
        res = _dd_write(vm, vm.rundir / "pattern.bin", fd.path, 5)
        assert res.status != 0
        assert "Input/output error" in res.stderr
        fd.restore()
        assert _dd_read(vm, fd.path, 5, vm.rundir / "r5.bin") == bytes(BLOCK)


SLOT_SCRIPT = """
import json, os, sys
from devicemapper.ioctl import Control
from devicemapper.snapshot import SnapshotSlot
from framework.core.command import HostRunner

origin, cow = sys.argv[1], sys.argv[2]
B = 4096

def put(path, block, byte):
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, bytes([byte]) * B, block * B)
    os.fsync(fd)
    os.close(fd)

def get(path, block):  # buffered, as a mount reads: a stale page cache would show
    fd = os.open(path, os.O_RDONLY)
    data = os.pread(fd, B, block * B)
    os.close(fd)
    return sorted(set(data))

for block in (10, 11, 12):
    put(origin, block, 0xA0 + block)
seen = {}
with Control() as control:
    # Another dm device first, so the slot is not dm-0 and its path must be read
    # from the kernel's reply.
    control.create("pc-test-first", 0, 8, "error", "")
    try:
        with SnapshotSlot(HostRunner(), origin, cow, name="pc-test-slot") as slot:
            with slot.fresh() as snap:
                seen["path"] = snap.path
                put(snap.path, 10, 0x11)
                seen["first_own_write"] = get(snap.path, 10)
            with slot.fresh() as snap:
                seen["second_block10"] = get(snap.path, 10)
                put(snap.path, 11, 0x22)
            put(origin, 12, 0x33)  # the replay moves the origin on between states
            with slot.fresh() as snap:
                seen["third_block11"] = get(snap.path, 11)
                seen["third_block12"] = get(snap.path, 12)
        seen["origin"] = [get(origin, b) for b in (10, 11, 12)]
        seen["left"] = sorted(os.listdir("/dev/mapper"))
    finally:
        control.remove("pc-test-first")
print(json.dumps(seen))
"""


def test_snapshot_slot_gives_every_state_the_origin_as_it_is(vm: QemuMachine) -> None:
    """Reused snapshots: a write in one is gone in the next, the origin never
    changes through them, and origin writes between uses show in the next."""
    script = vm.rundir / "slot.py"
    script.write_text(SLOT_SCRIPT)
    res = vm.run([*vm.python_argv(), os.fspath(script), vm.disk("scratch"), vm.disk("cow")],
                 timeout_s=300)
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    ls = vm.run(["ls", "-l", "/dev/mapper/pc-test-slot"], timeout_s=30, ok_status=None)
    assert ls.status != 0  # removed at the end
    assert seen["path"] != "/dev/dm-0"
    assert seen["first_own_write"] == [0x11]  # positive control: the snapshot takes writes
    assert seen["second_block10"] == [0xAA]
    assert seen["third_block11"] == [0xAB]
    assert seen["third_block12"] == [0x33]
    assert seen["origin"] == [[0xAA], [0xAB], [0x33]]
    assert "pc-test-slot" not in seen["left"]


def _powercut(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*POWERCUT, *args], capture_output=True, text=True, timeout=120)


def test_log_commands_on_the_kernel_log_and_a_truncated_copy(recorded, tmp_path: Path) -> None:
    _workload, _oracle, info, log_image = recorded
    ok_info = _powercut("log", "info", os.fspath(log_image))
    assert ok_info.returncode == 0, ok_info.stderr
    assert str(info["entries"] + 1) in ok_info.stdout
    ok_list = _powercut("log", "list", os.fspath(log_image))
    assert ok_list.returncode == 0, ok_list.stderr
    assert "pc-8" in ok_list.stdout and END_MARK in ok_list.stdout
    with LogReader(log_image) as reader:
        last = reader.entry(reader.nr_entries - 2)
        cut_at = last.header_offset - 100
    truncated = tmp_path / "truncated.log"
    truncated.write_bytes(log_image.read_bytes()[:cut_at])
    for verb in ("info", "list"):
        bad = _powercut("log", verb, os.fspath(truncated))
        assert bad.returncode != 0
        assert "Traceback" not in bad.stderr
        lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "truncated.log" in lines[0], bad.stderr
