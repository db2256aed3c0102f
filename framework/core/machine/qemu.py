"""QemuMachine: a qemu guest with device-mapper, driven over its serial console."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import re
import shlex
import shutil
import signal
import string
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pexpect

from framework.core import clock, command, cost, rundir
from framework.core.command import Argv, CommandResult
from framework.core.errors import (
    BootError,
    ConfigError,
    ConsoleTimeout,
    GuestDied,
    MachineError,
    MissingPrerequisite,
    ScratchDeviceError,
)
from framework.core.machine import initramfs
from framework.core.machine.base import DiskSpec, Machine, project_root, venv_python
from framework.core.machine.console import ConsoleRunner
from framework.core.machine.kernel import KernelSpec, boot_image, default_kernel

log = logging.getLogger(__name__)

QEMU = "qemu-system-x86_64"
#: The kernel word that leaves PCI interrupt routing through ACPI out (see qemu_argv()).
ACPI_NOIRQ = "acpi=noirq"
MSIZE = 512 * 1024
KVM_PROBE_TIMEOUT_S = 25.0
#: Console lines that say the guest kernel died (panic(), die() and the BUG() family
#: print these, kernel/panic.c and arch/x86/kernel/dumpstack.c in 6.1 and 6.12).
KERNEL_DIED = re.compile(r"Kernel panic|Oops|BUG: |general protection fault|kernel BUG at")
#: Of those, the lines after which the kernel has killed a task or thread (die() in
#: arch/x86/kernel/dumpstack.c, BUG() and list corruption with
#: CONFIG_BUG_ON_DATA_CORRUPTION, page faults in kernel mode): not the "BUG: soft lockup"
#: a starved emulated CPU can print and live on from.
KERNEL_KILLED = re.compile(r"Kernel panic|Oops|general protection fault|kernel BUG at|"
                           r"BUG: unable to handle|BUG: kernel NULL pointer dereference")


def drive_argv(spec: DiskSpec, index: int, image: Path, *, cache: str) -> list[str]:
    """The -drive and -device arguments of scratch disk ``spec`` (the guest's vd[a+index])."""
    options = ",readonly=on" if spec.readonly else ""
    # qemu's block throttling (docs/throttle.txt; -drive throttling.* options): a device
    # profile's limits on the disk as a whole, reads and writes together.
    if spec.bandwidth_bytes_s is not None:
        options += f",throttling.bps-total={spec.bandwidth_bytes_s}"
    if spec.iops is not None:
        options += f",throttling.iops-total={spec.iops}"
    # werror/rerror=report: a write the host cannot make (its filesystem full) is an I/O
    # error in the guest, which fails the task at once; qemu's default for virtio-blk,
    # enospc, stops the whole guest instead, and the task waits out its deadline.
    return ["-drive",
            f"file={image},format=raw,if=none,id=disk{index},cache={cache},discard=unmap,"
            f"werror=report,rerror=report{options}",
            "-device", f"virtio-blk-pci,drive=disk{index},serial={spec.name[:20]}"]


#: vCPUs of a guest by default: a checking guest's two lanes run at once, one on each.
GUEST_CPUS = 2
#: The environment variable that sets the vCPUs of guests that do not ask for a number
#: (every guest but the bench's, whose --cpus changes what it measures).
GUEST_CPUS_VARIABLE = "POWERCUT_GUEST_CPUS"


def guest_cpus() -> int:
    """The vCPUs of a guest that asks for no number: POWERCUT_GUEST_CPUS when it is set,
    else GUEST_CPUS. One vCPU still runs both checking lanes, in turns (they are processes);
    it suits hosts that run several guests at once on few cores, as a test suite on two."""
    raw = os.environ.get(GUEST_CPUS_VARIABLE, "").strip()
    if not raw:
        return GUEST_CPUS
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{GUEST_CPUS_VARIABLE}={raw!r}: not a number of vCPUs (1 or more)")
    return int(raw)


def guests_per_host(cores: int | None = None) -> int:
    """How many guests to run at once on this host by default: one per GUEST_CPUS cores
    (POWERCUT_GUEST_CPUS changes a guest's vCPUs, not this).

    Under TCG each vCPU is a host thread that keeps a core busy, so one guest with two
    lanes already uses two cores; more guests than that share the same cores and add no
    throughput. Oversubscription is safe (a 2-core host ran two and more guests at once
    through thousands of checked states without a harness error), so --jobs may ask for
    more; this is only the default."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, cores // GUEST_CPUS)


_PRINTABLE = frozenset(string.printable)


def _printable(line: str) -> str:
    """A console line without its control characters and escape debris, stripped."""
    return "".join(c for c in line if c in _PRINTABLE).strip()


class QemuMachine(Machine):
    """Boots a kernel under qemu and runs commands in it over the serial console.

    Scratch disks are sparse raw files in the run directory, attached as
    virtio-blk with ``format=raw`` in the order given: /dev/vda, /dev/vdb...
    """

    name = "qemu"

    def __init__(
        self,
        *,
        kernel: KernelSpec | None = None,
        disks: Iterable[DiskSpec] = (),
        modules: Iterable[str] = (),
        memory_mib: int = 2048,
        cpus: int | None = None,
        accel: str | None = None,
        rundir: Path | None = None,
        boot_timeout_s: float = 120.0,
        disk_cache: str = "unsafe",
        missing_modules_ok: bool = False,
    ) -> None:
        self.kernel = kernel or default_kernel()
        self.disk_specs = list(disks)
        if len(self.disk_specs) > 20:
            raise ScratchDeviceError("at most 20 scratch disks per guest")
        #: Kernel modules to load beyond the base ones (virtio, 9p, device-mapper):
        #: the filesystems' modules, which the application asks the adapters for.
        self.modules = tuple(modules)
        self.memory_mib = memory_mib
        self.cpus = cpus if cpus is not None else guest_cpus()
        self.requested_accel = accel
        self.accel = ""
        self.boot_timeout_s = boot_timeout_s
        self.disk_cache = disk_cache
        self.missing_modules_ok = missing_modules_ok
        self.missing_modules: list[str] = []
        self._own_rundir = rundir is None
        # Absolute: the guest mounts the run directory at the same path.
        self.rundir = Path(tempfile.mkdtemp(prefix="powercut-vm-")) if rundir is None else Path(rundir).resolve()
        self.rundir.mkdir(parents=True, exist_ok=True)
        self._console_start = 0  # where this guest's part of the console log starts
        self._death_scanned = 0  # how far kernel_death() has read the console log
        self._death_seen: str | None = None
        self.child: pexpect.spawn | None = None
        self._up_since: float | None = None  # when the guest booted (cost: guest seconds)
        self.console: ConsoleRunner | None = None
        self.boot_s: float | None = None
        self.guest_uptime_s: float | None = None
        self._transcript: object | None = None
        #: The initramfs carries its modules without their signatures where the kernel
        #: loads them so (see initramfs.drop_signature()).
        self.unsigned_modules = self.kernel.loads_unsigned_modules()
        #: ... and its compressed modules unpacked (see initramfs.unpacked_module()).
        self.unpack_modules = True

    # --- lifecycle -------------------------------------------------------

    def disk_image(self, name: str) -> Path:
        for spec in self.disk_specs:
            if spec.name == name and spec.image is not None:
                return spec.image
        return self.rundir / "disks" / f"{name}.img"

    def qemu_argv(self, initrd: Path, accel: str) -> list[str]:
        if shutil.which(QEMU) is None:
            raise MissingPrerequisite(f"{QEMU}: not found; install qemu-system-x86 (make setup)")
        append = " ".join(
            [
                "console=ttyS0",
                "quiet",
                "loglevel=4",
                "panic=-1",
                "edd=off",
                "nokaslr",
                "tsc=reliable",
                "no_timer_check",
                "i8042.noaux",
                "i8042.nokbd",
                "rdinit=/init",
                # No crypto self-tests: the kernel tests each algorithm it registers (at
                # boot, and when a module such as crc32c loads), a third of a second per
                # boot under emulation. The parameter was added for short-lived VMs
                # (crypto/testmgr.c, Documentation/admin-guide/kernel-parameters.txt,
                # "cryptomgr.notests"); it changes no algorithm, and fips=1 overrides it.
                "cryptomgr.notests",
                f"powercut.rundir={self.rundir}",
                f"powercut.msize={MSIZE}",
            ]
        )
        if self.kernel.has_msi():
            # No PCI interrupt routing through ACPI. Enabling each virtio device's interrupt
            # link (\_SB_.LNKx, run by the AML interpreter) took 0.1-0.25 s a device under
            # emulation, 0.4 s or more of a guest's start with its disks. With "acpi=noirq"
            # (Documentation/admin-guide/kernel-parameters.txt) pci_acpi_init()
            # (arch/x86/pci/acpi.c) returns early, pirq_enable_irq() (arch/x86/pci/irq.c)
            # finds no entry for the device in the MP tables and leaves it without INTx, and
            # virtio_pci takes MSI-X, which vp_find_vqs() tries first in any case
            # (drivers/virtio/virtio_pci_common.c). ACPI power-off is unchanged. A kernel
            # whose config is not found, or has no MSI, keeps INTx through ACPI.
            append += f" {ACPI_NOIRQ}"
        keep = initramfs.hidden_paths(guest_paths())
        if keep:
            append += " powercut.keep=" + ":".join(os.fspath(p) for p in keep)
        argv = [
            QEMU,
            "-nodefaults",
            "-no-user-config",
            "-display", "none",
            "-no-reboot",
            "-M", "pc",
            "-m", str(self.memory_mib),
            "-smp", str(self.cpus),
            "-chardev", "stdio,id=con,signal=off",
            "-serial", "chardev:con",
            "-kernel", os.fspath(boot_image(self.kernel.image, initramfs.cache_dir() / "boot-images")),
            "-initrd", os.fspath(initrd),
            "-append", append,
            "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-fsdev", f"local,id=rundir,path={self.rundir},security_model=none,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=rundir,mount_tag=rundir",
        ]
        qboot = Path("/usr/share/qemu/qboot.rom")
        if qboot.exists():
            # qboot loads -kernel straight away; SeaBIOS spends seconds under TCG.
            argv += ["-bios", os.fspath(qboot)]
        if accel == "kvm":
            argv += ["-accel", "kvm", "-cpu", "host"]
        else:
            argv += ["-accel", "tcg,thread=multi", "-cpu", "max"]
        for i, spec in enumerate(self.disk_specs):
            argv += drive_argv(spec, i, self.disk_image(spec.name), cache=self.disk_cache)
        return argv

    def _make_disks(self) -> None:
        for spec in self.disk_specs:
            if spec.image is not None:
                if not spec.image.is_file():
                    raise ScratchDeviceError(f"{spec.image}: disk image not found (disk {spec.name!r})")
                continue
            image = self.disk_image(spec.name)
            image.parent.mkdir(parents=True, exist_ok=True)
            with open(image, "wb") as f:
                f.truncate(spec.size_bytes)

    def start(self) -> QemuMachine:
        """Boot the guest and wait until its shell answers."""
        accel = self.requested_accel or choose_accel(self.kernel)
        modules, self.missing_modules = initramfs.resolve_modules(
            initramfs.modules_for(self.modules),
            self.kernel.release,
            self.kernel.modules_root,
            missing_ok=self.missing_modules_ok,
        )
        initrd = initramfs.initramfs(modules, unsigned=self.unsigned_modules,
                                     unpack=self.unpack_modules)
        self.rundir.mkdir(parents=True, exist_ok=True)  # again after a failed boot's close()
        self._make_disks()
        try:
            try:
                self._boot(initrd, accel, self.boot_timeout_s)
            except BootError as exc:
                # The guest has not touched a scratch disk before its shell answers, so a boot
                # that failed loses nothing: qemu or the kernel hung or died early once under
                # emulation on a busy host (an RCU stall past the timeout, an oops in
                # sched_clock). Two failures in a row are the error.
                log.warning("%s; booting it again", exc)
                self.kill()  # a guest that never booted has no shell to leave
                self._stop_qemu()
                self._boot(initrd, accel, self.boot_timeout_s)
        except BaseException:
            self.kill()
            self.close()
            raise
        return self

    def _boot(self, initrd: Path, accel: str, timeout_s: float) -> None:
        argv = self.qemu_argv(initrd, accel)
        log.debug("+ %s", shlex.join(argv))
        self.accel = accel
        transcript = open(self.rundir / rundir.CONSOLE, "ab")  # noqa: SIM115 - closed in close()
        # A replacement guest appends to the same console log: what it says starts here.
        self._console_start = transcript.tell()
        self._death_seen = None
        self._transcript = transcript
        start = clock.monotonic()
        self._up_since = start
        self.child = pexpect.spawn(argv[0], argv[1:], timeout=timeout_s, maxread=65536,
                                   echo=False, env=_qemu_env())
        self.child.logfile_read = transcript
        deadline = clock.Deadline(timeout_s)
        try:
            self.child.expect([initramfs.READY_MARKER + rb" ([0-9.]+)".decode()],
                              timeout=deadline.remaining())
        except pexpect.TIMEOUT:
            raise BootError(
                f"guest did not reach the ready marker within {timeout_s:g} s "
                f"(accel {accel}); last console lines: {self.console_tail()}"
            ) from None
        except pexpect.EOF:
            raise BootError(
                f"qemu exited during boot (accel {accel}); last console lines: {self.console_tail()}"
            ) from None
        match = self.child.match
        self.guest_uptime_s = float(match.group(1)) if match and not isinstance(match, type) else None
        self.console = ConsoleRunner(self.child, self.rundir / ".console")
        self.console.sync(timeout_s=max(deadline.remaining(), 10.0))
        self.boot_s = clock.monotonic() - start
        log.debug("guest ready in %.2f s (accel %s)", self.boot_s, accel)

    def _exit_words(self) -> str:
        """How qemu ended, once it has: by a signal (killed from outside) or with a status."""
        child = self.child
        if child is not None:
            with contextlib.suppress(Exception):
                child.isalive()  # reaps it, which sets the statuses
            if child.signalstatus is not None:
                try:
                    return f"qemu ended by {signal.Signals(child.signalstatus).name}"
                except ValueError:
                    return f"qemu ended by signal {child.signalstatus}"
            if child.exitstatus is not None:
                return f"qemu exited with status {child.exitstatus}"
        return "qemu exited"

    def _console_lines(self, start: int = 0) -> list[str]:
        """The console log from byte ``start`` on, as printable non-empty lines."""
        try:
            with open(self.rundir / rundir.CONSOLE, "rb") as f:
                f.seek(start)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return []
        body = (_printable(ln) for ln in text.splitlines())
        return [ln for ln in body if ln]

    def _death_lines(self) -> str:
        """What this guest's console said as it died: the first line of a kernel panic or
        oops since it booted (the call trace after it fills the tail), and the last lines."""
        body = self._console_lines(self._console_start)
        first = next((ln for ln in body if KERNEL_DIED.search(ln)), None)
        last = body[-4:]
        shown = ([first, "..."] if first is not None and first not in last else []) + last
        return " | ".join(shown) or "(no console output)"

    def kernel_death(self) -> str | None:
        """The first line since this guest booted in which its kernel said it killed a task
        (KERNEL_KILLED), or None. Read on from where the last call stopped."""
        if self._death_seen is not None:
            return self._death_seen
        try:
            with open(self.rundir / rundir.CONSOLE, "rb") as f:
                f.seek(max(self._death_scanned, self._console_start))
                text = f.read()
        except OSError:
            return None
        whole = text[: text.rfind(b"\n") + 1]  # a line still being written is read next time
        self._death_scanned = max(self._death_scanned, self._console_start) + len(whole)
        for line in whole.decode("utf-8", "replace").splitlines():
            if KERNEL_KILLED.search(line):
                self._death_seen = _printable(line)
                return self._death_seen
        return None

    def console_tail(self, lines: int = 6) -> str:
        return " | ".join(self._console_lines()[-lines:]) or "(no console output)"

    def kill(self) -> None:
        """Stop qemu at once (after a timeout the guest state is not trusted)."""
        if self.child is not None and self.child.isalive():
            with contextlib.suppress(Exception):
                self.child.kill(signal.SIGKILL)
            with contextlib.suppress(Exception):
                self.child.wait()
        self.console = None

    def close(self) -> None:
        self._stop_qemu()
        if self._own_rundir:
            shutil.rmtree(self.rundir, ignore_errors=True)

    def _stop_qemu(self) -> None:
        """Power the guest off (or kill qemu) and close its console log."""
        up, self._up_since = self._up_since, None
        if up is not None:
            cost.add_guest_seconds(clock.monotonic() - up)
        child = self.child
        if child is not None and child.isalive():
            try:
                # Leaving the shell makes /init sync and power off.
                child.send("exit\n")
                child.expect(pexpect.EOF, timeout=10)
            except Exception as exc:
                log.debug("clean poweroff failed (%s); killing qemu", exc)
            finally:
                self.kill()
        if child is not None:
            with contextlib.suppress(Exception):
                child.close(force=True)
        self.child = None
        self.console = None
        if self._transcript is not None:
            with contextlib.suppress(Exception):
                self._transcript.close()  # type: ignore[attr-defined]
            self._transcript = None

    # --- protocol --------------------------------------------------------

    def run(
        self,
        argv: Argv,
        *,
        timeout_s: float = 60.0,
        ok_status: Iterable[int] | None = (0,),
        input: str | None = None,
        env: dict[str, str] | None = None,
        watch: Callable[[], str | None] | None = None,
    ) -> CommandResult:
        if self.console is None:
            raise MachineError("the guest is not running")
        try:
            return self.console.run(argv, timeout_s=timeout_s, ok_status=ok_status, input=input,
                                    env=env, cwd=os.fspath(project_root()), watch=watch)
        except GuestDied as exc:
            how = self._exit_words()
            self.kill()
            said = self._death_lines()
            raise GuestDied(f"{exc} ({how}); console: {said}", console=said,
                            panicked=bool(KERNEL_DIED.search(said))) from None
        except (ConsoleTimeout, MachineError):
            # A command that outlived its deadline leaves the guest in an
            # unknown state: tear it down so nothing is reused by mistake.
            self.kill()
            raise

    def disk(self, name: str) -> str:
        for i, spec in enumerate(self.disk_specs):
            if spec.name == name:
                return f"/dev/vd{chr(ord('a') + i)}"
        raise ScratchDeviceError(f"no scratch disk named {name!r} in this guest")

    def python_argv(self) -> list[str]:
        return [venv_python()]

    #: run() starts every command in the checkout, so ``python -m`` finds powercut's
    #: modules without the virtualenv's site-packages (framework.core.agent).
    runs_from_checkout = True

    def describe(self) -> dict[str, str]:
        return {
            "machine": "qemu",
            **self.kernel.facts(),
            "accel": self.accel,
            "qemu": qemu_version(),
            "memory_mib": str(self.memory_mib),
            "cpus": str(self.cpus),
        }

    def interact(self) -> None:
        """Hand the console to the user's terminal (Ctrl-] leaves)."""
        if self.child is None:
            raise MachineError("the guest is not running")
        self.child.send("stty sane; PS1='guest# '\n")
        self.child.interact(escape_character="\x1d")


def guest_paths() -> list[Path]:
    """Host paths the guest must see: the checkout and the Python that runs powercut."""
    paths = [project_root(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    for p in paths:
        if any(c.isspace() for c in os.fspath(p)):
            raise MachineError(f"{p}: a path with white space cannot be passed to the guest; "
                               "move the checkout or the virtualenv")
    return paths


def _qemu_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TERM", "dumb")
    return env


def qemu_version() -> str:
    try:
        out = command.run([QEMU, "--version"], timeout_s=10).stdout
    except Exception:
        return "unknown"
    return out.splitlines()[0].removeprefix("QEMU emulator version ").strip() if out else "unknown"


# --- accelerator choice ----------------------------------------------------


def _accel_cache() -> Path:
    return initramfs.cache_dir() / "accel.json"


def _accel_key(kernel: KernelSpec) -> str:
    return f"{platform.release()}|{qemu_version()}|{kernel.release}"


_said: set[str] = set()


def cached_accel(kernel: KernelSpec) -> tuple[str, str] | None:
    """The cached accelerator verdict and its reason, if a probe ran before."""
    try:
        entry = json.loads(_accel_cache().read_text()).get(_accel_key(kernel))
    except (FileNotFoundError, ValueError):
        return None
    return (entry["accel"], entry["reason"]) if entry else None


def choose_accel(kernel: KernelSpec, *, probe_timeout_s: float = KVM_PROBE_TIMEOUT_S) -> str:
    """KVM if a probe boot reaches the ready marker in time, else TCG; cached."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        verdict, reason = "tcg", "/dev/kvm is not usable"
    else:
        key = _accel_key(kernel)
        cache = _accel_cache()
        try:
            cached = json.loads(cache.read_text())
        except (FileNotFoundError, ValueError):
            cached = {}
        if key in cached:
            verdict, reason = cached[key]["accel"], cached[key]["reason"] + " (cached)"
        else:
            verdict, reason = probe_kvm(kernel, probe_timeout_s)
            cached[key] = {"accel": verdict, "reason": reason, "when": clock.timestamp()}
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(cached, indent=1))
    if verdict not in _said:
        _said.add(verdict)
        log.info("accelerator: %s (%s)", verdict, reason)
    return verdict


def probe_kvm(kernel: KernelSpec, timeout_s: float) -> tuple[str, str]:
    probe = QemuMachine(kernel=kernel, accel="kvm", boot_timeout_s=timeout_s, memory_mib=512)
    start = clock.monotonic()
    try:
        probe.start()
    except BootError as exc:
        # Nested KVM either hangs early in boot or trips over MSRs; both mean TCG.
        return "tcg", f"KVM probe boot failed: {str(exc)[:200]}"
    finally:
        probe.close()
    return "kvm", f"a KVM probe boot was ready in {clock.monotonic() - start:.1f} s"
