"""Fixtures shared by unit tests that need the host's loop devices."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests check results, not speed: hypothesis's per-example deadline (200 ms) fails
# an example that a loaded host merely ran slowly (one did here at a load average of 5, with
# two guests under TCG beside the suite), and a test that fails by the host's load is flaky.
settings.register_profile("powercut", deadline=None)
settings.load_profile("powercut")


@pytest.fixture(autouse=True)
def empty_kernel_cache(tmp_path_factory: pytest.TempPathFactory,
                       monkeypatch: pytest.MonkeyPatch) -> Path:
    """Unit tests see an empty kernel cache of their own, not the kernels this machine
    fetched (``powercut kernels fetch``)."""
    cache = tmp_path_factory.mktemp("kernel-cache")
    monkeypatch.setenv("POWERCUT_KERNEL_CACHE", os.fspath(cache))
    return cache


@dataclass(frozen=True)
class LoopFs:
    dev: str  # /dev/loopN
    image: Path  # the 64 MiB sparse file behind it


@pytest.fixture
def loop_ext4(tmp_path: Path) -> Iterator[LoopFs]:
    """A fresh ext4 on a loop device (root only), detached afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root for loop devices")
    image = tmp_path / "fs.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                         check=True).stdout.strip()
    yield LoopFs(dev, image)
    subprocess.run(["losetup", "-d", dev], check=False)
