"""--kernel-release boots another installed Debian kernel, with its own modules."""

from __future__ import annotations

import subprocess
import sys

import pytest

from framework.core.machine.kernel import choose_default, install_hint, installed_kernels

POWERCUT = [sys.executable, "-m", "framework.cli"]


def other_release() -> tuple[str | None, str]:
    """An installed kernel with modules that is not the default, or None and why there is none."""
    default = choose_default().spec.release
    others = [k.release for k in installed_kernels() if k.has_modules and k.release != default]
    if not others:
        return None, (f"only the default kernel {default} is installed; for this test "
                      f"{install_hint()}")
    return others[-1], ""


def test_vm_run_boots_the_named_release():
    release, why = other_release()
    if release is None:
        pytest.skip(why)
    out = subprocess.run([*POWERCUT, "vm", "run", "--kernel-release", release, "--",
                          "sh", "-c", "uname -r; dmsetup targets"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == release
    # The device-mapper targets came from that release's modules.
    assert any(line.startswith("log-writes") for line in lines[1:]), out.stdout
