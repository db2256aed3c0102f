"""An fstests test's own verdict on a kernel, run in a guest.

fstests (xfstests) is not packaged; a checkout built with its own ``make``
(outside powercut's checkout) is named with ``--fstests`` or
``POWERCUT_XFSTESTS``. The guest sees the host read-only, so the checkout
runs from a copy in the guest's run directory, with a ``local.config``
that names three scratch disks: the test device (made with the target's
filesystem first), the scratch device and the log-writes device the
dm-log-writes tests need; a target with its journal on a disk of its own
gets a fourth, SCRATCH_LOGDEV (with USE_EXTERNAL=yes). There is no udevd in powercut's guests:
libdevmapper makes the device nodes itself. The verdict is fstests' own:
``./check`` says the test passed, failed, or was not run (and why).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from framework.core import clock
from framework.core.errors import ConfigError
from framework.core.machine.base import DiskSpec
from framework.core.machine.kernel import KernelSpec, kernel_spec
from framework.core.machine.qemu import QemuMachine
from framework.zoo.kernels import Kernel
from recovery.disks import disk_bytes
from recovery.filesystems import kernel_modules
from recovery.mount import mkfs
from recovery.target import JournalPlacement
from recovery.targets import resolve

MiB = 1 << 20
CHECK_TIMEOUT_S = 3600.0
#: What a checkout has once fstests' own ``make`` has built it.
BUILT = ("check", "ltp/fsx")


def check_built(checkout: Path, option: str) -> Path:
    """``checkout`` if fstests' ``make`` has built it, else a one-line error naming ``option``."""
    missing = [part for part in BUILT if not (checkout / part).is_file()]
    if missing:
        raise ConfigError(f"{option} {checkout}: not a built fstests checkout (no "
                          f"{' or '.join(missing)}; run make in it)")
    return checkout


def built_checkout(given: str | os.PathLike[str] | None, option: str) -> Path | None:
    """The built fstests checkout ``option`` names, else POWERCUT_XFSTESTS, else None."""
    chosen = given or os.environ.get("POWERCUT_XFSTESTS")
    return check_built(Path(chosen), option) if chosen else None


@dataclass(frozen=True, slots=True)
class Verdict:
    test: str
    kernel: str
    verdict: str  # "passed", "failed", "not run", "missing" (not in the checkout), "error"
    why: str = ""  # not run: fstests' reason; failed: the first lines of the diff
    wall_s: float = 0.0  # guest start to the verdict
    output: str = ""  # what ./check printed, and the test's .out.bad when it failed

    def to_dict(self) -> dict[str, str | float]:
        return {"test": self.test, "kernel": self.kernel, "verdict": self.verdict, "why": self.why,
                "wall_s": round(self.wall_s, 1)}


def local_config(fstype: str, mkfs_options: str, *, logdev: bool = False) -> str:
    """fstests' local.config for the guest's disks; ``logdev``: a fourth disk as the scratch
    filesystem's external journal (SCRATCH_LOGDEV, USE_EXTERNAL=yes)."""
    lines = [f"export FSTYP={fstype}", "export TEST_DEV=/dev/vda", "export TEST_DIR=/mnt/test",
             "export SCRATCH_DEV=/dev/vdb", "export SCRATCH_MNT=/mnt/scratch",
             "export LOGWRITES_DEV=/dev/vdc",
             *(["export SCRATCH_LOGDEV=/dev/vdd", "export USE_EXTERNAL=yes"] if logdev else []),
             "# No udevd in powercut's guests: libdevmapper makes the /dev/mapper nodes itself.",
             "export DM_DISABLE_UDEV=1", "export UDEV_SETTLE_PROG=true", "unset UDEV_WAIT_PROG"]
    if mkfs_options:
        lines.append(f'export MKFS_OPTIONS="{mkfs_options}"')
    return "\n".join(lines) + "\n"


def verdict_of(test: str, report: str, results: Path) -> tuple[str, str]:
    """fstests' verdict of ``test`` from ./check's summary lines ("Ran: ...", "Not run: ...",
    "Failures: ...") and its results directory (the reason, the diff)."""
    listed: dict[str, set[str]] = {}
    for line in report.splitlines():
        head, sep, rest = line.partition(":")
        if sep and head.strip() in ("Ran", "Not run", "Failures"):
            listed.setdefault(head.strip(), set()).update(rest.split())
    if test in listed.get("Not run", set()):
        notrun = results / f"{test}.notrun"
        return "not run", notrun.read_text().strip() if notrun.is_file() else ""
    if test in listed.get("Failures", set()):
        bad = results / f"{test}.out.bad"
        return "failed", " / ".join(bad.read_text().splitlines()[-3:]) if bad.is_file() else ""
    if test in listed.get("Ran", set()):
        return "passed", ""
    return "error", " / ".join(report.strip().splitlines()[-3:]) or "./check said nothing"


def run_test(checkout: Path, test: str, target_name: str, kernel: Kernel | KernelSpec,
             workdir: Path, *, prepare: Callable[[Path], None] | None = None) -> Verdict:
    """``test`` of ``checkout`` on ``kernel`` (a zoo kernel, or any kernel powercut boots),
    its filesystem that of ``target_name``; ``prepare`` may add tests to the guest's copy of
    the checkout first (an exported test, say)."""
    spec = kernel if isinstance(kernel, KernelSpec) else kernel_spec(kernel.image, kernel.modules)
    label = kernel.release if isinstance(kernel, KernelSpec) else kernel.name
    target = resolve(target_name)
    start = clock.monotonic()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    copy = workdir / "xfstests"
    shutil.copytree(checkout, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    shutil.rmtree(copy / "results", ignore_errors=True)
    if prepare is not None:
        prepare(copy)
    if not (copy / "tests" / test).is_file():
        return Verdict(test, label, "missing", f"{test} is not in {checkout}")
    logdev = target.needs_journal_disk
    (copy / "local.config").write_text(local_config(target.fstype, " ".join(target.mkfs_options),
                                                    logdev=logdev))
    disks = [DiskSpec("test", 1024 * MiB), DiskSpec("scratch", 2048 * MiB),
             DiskSpec("logwrites", 2048 * MiB),
             *([DiskSpec("logdev", disk_bytes([target])["journal"])] if logdev else [])]
    modules = (*kernel_modules((target.fstype,)), "dm-thin-pool")
    with QemuMachine(kernel=spec, disks=disks, modules=modules, rundir=workdir,
                     missing_modules_ok=True) as guest:
        guest.start()  # a guest that dies while booting boots once more by itself
        # The test device is only where fstests keeps its own files: its journal stays inside.
        mkfs(guest, replace(target, journal=JournalPlacement.INTERNAL) if logdev else target,
             guest.disk("test"))
        guest.run(["mkdir", "-p", "/mnt/test", "/mnt/scratch"], timeout_s=60)
        ran = guest.run(["sh", "-c", f"cd {os.fspath(copy)} && ./check {test}"],
                        timeout_s=CHECK_TIMEOUT_S, ok_status=None)
    verdict, why = verdict_of(test, ran.stdout + ran.stderr, copy / "results")
    bad = copy / "results" / f"{test}.out.bad"
    output = ran.stdout + ran.stderr + (f"\n--- {test}.out.bad\n{bad.read_text()}"
                                        if bad.is_file() else "")
    # The guest's copy of the checkout is a scratch directory of this run: said as
    # FSTESTS, so that the output kept in a report names no directory of this host.
    here = os.fspath(copy)
    return Verdict(test, label, verdict, why.replace(here, "FSTESTS"),
                   clock.monotonic() - start, output.replace(here, "FSTESTS"))

