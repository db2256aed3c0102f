"""Integration tests boot a real qemu guest with the Debian kernel."""

from __future__ import annotations

import shutil

import pytest

from framework.core.errors import MissingPrerequisite
from framework.core.machine.base import DiskSpec
from framework.core.machine.kernel import default_kernel
from framework.core.machine.qemu import GUEST_CPUS_VARIABLE, QemuMachine
from recovery.filesystems import kernel_modules


def guest_prerequisites() -> str | None:
    """Why a guest cannot boot here, or None."""
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 missing: install qemu-system-x86 ('make setup')"
    if shutil.which("busybox") is None:
        return "busybox missing: install busybox-static ('make setup')"
    try:
        default_kernel()
    except MissingPrerequisite as exc:
        return str(exc)
    return None


#: The longest tests (a minute or more each under TCG), started first so that two workers
#: (make test: pytest -n 2 --dist worksteal) do not end with one of them running alone.
LONGEST = (
    "test_user_targets.py::test_a_study_runs_crash_cut_and_bench",
    "test_shrink.py::test_a_planted_fsync_failure",
    "test_bench.py::test_bench_against_a_baseline_without_a_journal",
    "test_resume.py::test_a_study_killed_in_crash_and_in_bench",
    "test_crash.py::test_lying_disk_fires_and_neither",
    "test_faults.py::test_a_state_that_panics",
    "test_sweep.py::",
    "test_bench.py::test_each_workload_runs_on_ext4_ordered[mongo]",
    "test_crash.py::test_two_disks_",
    "test_run.py::test_study_runs_steps_and_judges_controls",
    "test_cut.py::test_a_cut_takes_the_external_journal_disk_down",
)


def _rank(item: pytest.Item) -> int:
    return next((i for i, key in enumerate(LONGEST) if f"integration/{key}" in item.nodeid),
                len(LONGEST))


def pytest_collection_modifyitems(config, items):
    reason = guest_prerequisites()
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            # The image's guests boot in the container, from the image's qemu and kernels.
            if reason and item.get_closest_marker("image") is None:
                item.add_marker(pytest.mark.skip(reason=reason))
    items.sort(key=_rank)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def one_vcpu_guests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guests of a test, and of the commands it starts, get one vCPU. make test runs two
    workers on a 2-core host, and two guests of two vCPUs each are four busy threads on two
    cores: the user-target study and the shrink test run side by side took 189 s (342 s of
    CPU) with two vCPUs a guest and 119 s (181 s) with one. The checking lanes still run as
    two processes, in turns; a test that needs them at once asks for two vCPUs."""
    monkeypatch.setenv(GUEST_CPUS_VARIABLE, "1")


@pytest.fixture(scope="session")
def guest():
    """One guest shared by the read-only checks of a session (boots take seconds)."""
    machine = QemuMachine(disks=[DiskSpec("data", 128 << 20), DiskSpec("log", 128 << 20),
                                 DiskSpec("scratch", 128 << 20)],
                          modules=kernel_modules(("ext4", "xfs")))
    machine.start()
    yield machine
    machine.close()
