"""Integration tests boot a real qemu guest with the Debian kernel."""

from __future__ import annotations

import shutil

import pytest

from framework.core.errors import MissingPrerequisite
from framework.core.machine.base import DiskSpec
from framework.core.machine.kernel import default_kernel
from framework.core.machine.qemu import QemuMachine
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


def pytest_collection_modifyitems(config, items):
    reason = guest_prerequisites()
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def guest():
    """One guest shared by the read-only checks of a session (boots take seconds)."""
    machine = QemuMachine(disks=[DiskSpec("data", 128 << 20), DiskSpec("log", 128 << 20),
                                 DiskSpec("scratch", 128 << 20)],
                          modules=kernel_modules(("ext4", "xfs")))
    machine.start()
    yield machine
    machine.close()
