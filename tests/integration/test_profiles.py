"""Device profiles in a real guest: the hdd profile's flush delay reaches fsync, ram adds none.

Both disks are made as crash, cut and bench make them (``plan_disks``:
qemu throttling from the profile) and put behind dm-delay by the helper
they use (``delayed_path``); fio then times an fsync after every 4 KiB
write. The hdd check fails if dm-delay is not stacked or its flush delay
is not set (fsync then costs what it costs on ram, well under a
millisecond under emulation).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from devicemapper.delay import delayed_path
from framework.core.machine.qemu import QemuMachine
from recovery.disks import plan_disks
from recovery.targets import Target, get_target, with_profiles

MiB = 1 << 20


def _targets() -> list[Target]:
    base = get_target("ext2")
    return [dataclasses.replace(with_profiles(base, {"data": p}), name=f"ext2@{p}")
            for p in ("ram", "hdd")]


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[QemuMachine, list[Target]]]:
    targets = _targets()
    plan = plan_disks(targets, data_bytes=16 * MiB)
    machine = QemuMachine(disks=plan.specs, rundir=tmp_path_factory.mktemp("profile-vm"))
    machine.start()
    yield machine, targets
    machine.close()


def _fsync_ms(machine: QemuMachine, dev: str) -> tuple[float, float]:
    """(mean fsync latency in ms, write IOPS) of 4 KiB O_DIRECT writes, each followed by fsync."""
    out = machine.run(["fio", "--output-format=json", "--name=p", f"--filename={dev}",
                       "--rw=randwrite", "--bs=4k", "--ioengine=psync", "--direct=1",
                       "--fsync=1", "--size=8M", "--runtime=3", "--time_based"], timeout_s=120)
    job = json.loads(out.stdout[out.stdout.find("{"):])["jobs"][0]
    return job["sync"]["lat_ns"]["mean"] / 1e6, job["write"]["iops"]


def test_hdd_flush_delay_reaches_fsync_and_ram_adds_none(
        vm: tuple[QemuMachine, list[Target]]) -> None:
    machine, (ram, hdd) = vm
    plan = plan_disks([ram, hdd], data_bytes=16 * MiB)
    measured = {}
    for target in (ram, hdd):
        dev = machine.disk(plan.disk(target, "data"))
        with delayed_path(machine, dev, target.delays("data"), name="pc-delay-test") as path:
            assert (path != dev) == (target.delays("data") is not None)
            measured[target.name] = _fsync_ms(machine, path)
    hdd_profile = hdd.profile("data")
    assert hdd_profile is not None and hdd_profile.flush_ms == 12
    ram_fsync, _ = measured[ram.name]
    hdd_fsync, hdd_iops = measured[hdd.name]
    # dm-delay holds a flush at least flush_ms (it rounds up to whole jiffies, never down).
    assert hdd_fsync >= hdd_profile.flush_ms, measured
    assert ram_fsync < hdd_profile.flush_ms / 2, measured
    # Each write waits write_ms and its fsync flush_ms: at most 1000 / 16 per second.
    assert hdd_iops <= 1000 / (hdd_profile.write_ms + hdd_profile.flush_ms), measured
