"""``powercut doctor``: is everything powercut needs here, and if not, the fix."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from devicemapper import features as dm_features
from framework.core import command
from framework.core.command import Tool
from framework.core.errors import PowercutError
from framework.core.machine.kernel import (
    META_PACKAGE,
    DefaultChoice,
    InstalledKernel,
    KernelSpec,
    cached_kernels,
    choose_default,
    installed_kernels,
)
from recovery import filesystems

FIX_SETUP = "run 'make setup' (installs Debian package {pkg})"


@dataclass(frozen=True, slots=True)
class Check:
    area: str
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


# The programs that are neither a filesystem's (each adapter in recovery/
# lists its own) nor device-mapper's (devicemapper/features.py): the guest's
# and the benchmarks'.
GUEST_TOOLS: tuple[Tool, ...] = (
    Tool("qemu-system-x86_64", "qemu-system-x86", ("--version",)),
    Tool("busybox", "busybox-static"),
    Tool("modprobe", "kmod", ("--version",)),
)
BENCH_TOOLS: tuple[Tool, ...] = (
    Tool("fio", "fio", ("--version",), required=False),
    Tool("bonnie++", "bonnie++", required=False),
    Tool("postmark", "postmark", required=False),
    Tool("dbench", "dbench", required=False),
    Tool("fs_mark", "fsmark", required=False),
)


def all_tools() -> list[Tool]:
    """Every program doctor checks: the guest's, device-mapper's, the filesystems', the benchmarks'."""
    dm = list(dm_features.TOOLS)
    fs = list(filesystems.tools())
    return [*GUEST_TOOLS, *dm, *fs, *BENCH_TOOLS]


# Kernel features the guest needs besides device-mapper's
# (devicemapper/features.py): (config symbol, module providing it, required).
KERNEL_FEATURES: tuple[tuple[str, str, bool], ...] = (
    ("VIRTIO_BLK", "virtio_blk", True),
    ("VIRTIO_PCI", "virtio_pci", True),
    ("NET_9P_VIRTIO", "9pnet_virtio", True),
    ("9P_FS", "9p", True),
)

PYTHON_DEPS = ("pexpect", "numpy", "scipy", "statsmodels", "matplotlib", "rich")





def find_tool(binary: str) -> str | None:
    """Where ``binary`` is: on PATH, or in the sbin directories a non-root PATH lacks."""
    return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin")


def check_tools() -> list[Check]:
    checks = []
    for tool in all_tools():
        path = find_tool(tool.binary)
        if path is None:
            checks.append(Check("tools", tool.binary, False, "not found",
                                FIX_SETUP.format(pkg=tool.package), tool.required))
        else:
            checks.append(Check("tools", tool.binary, True, command.tool_version(path, tool.version_argv),
                                required=tool.required))
    return checks


_MODULE_PATH = re.compile(r"^(?:[^:\n]*/)?([^/:\n]+?)\.ko(?:\.\w+)?(?=:|$)", re.M)


def module_index(spec: KernelSpec) -> tuple[set[str], set[str]]:
    """Module names available as modules and built in, from modules.dep/.builtin."""
    def names(path: Path) -> set[str]:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return set()
        # One pass over the file: modules.dep has thousands of lines.
        return {name.replace("-", "_") for name in _MODULE_PATH.findall(text)}

    return names(spec.modules_dir / "modules.dep"), names(spec.modules_dir / "modules.builtin")


def check_msi(spec: KernelSpec) -> Check:
    """Whether the guest's virtio devices interrupt through MSI-X, with no PCI interrupt
    routing through ACPI (qemu.py adds acpi=noirq): only a kernel whose config says so."""
    config = spec.config_path()
    if spec.has_msi():
        return Check("kernel", "interrupts", True,
                     f"MSI-X, no PCI interrupt routing through ACPI (CONFIG_PCI_MSI=y in {config})",
                     required=False)
    slower = "its guests route PCI interrupts through ACPI, 0.4 s or more a boot under emulation"
    if config is None:
        return Check("kernel", "interrupts", False, f"no .config found for the image; {slower}",
                     f"put the kernel's .config beside the image as config-{spec.release}",
                     required=False)
    return Check("kernel", "interrupts", False, f"{config}: no CONFIG_PCI_MSI=y; {slower}",
                 "build the kernel with CONFIG_PCI_MSI=y", required=False)


def check_signatures(spec: KernelSpec) -> Check:
    """Whether the guest's initramfs drops the modules' signatures (initramfs.py), which
    spares their check at every boot and taints the guest's kernel 'E'."""
    if spec.loads_unsigned_modules():
        return Check("kernel", "module signatures", True,
                     "dropped in the guest's initramfs: not checked at boot; the guest's kernel "
                     "is tainted E (unsigned module)", required=False)
    why = ("no .config found for the image" if spec.config_path() is None
           else "the kernel enforces module signatures")
    return Check("kernel", "module signatures", True,
                 f"kept in the guest's initramfs ({why}): checked as each module loads",
                 required=False)


def check_kernel(spec: KernelSpec) -> list[Check]:
    modules, builtin = module_index(spec)
    checks = [Check("kernel", "image", True, f"{spec.image} ({spec.release})"), check_msi(spec),
              check_signatures(spec)]
    if not modules and not builtin:
        checks.append(Check("kernel", "modules", False, f"no modules.dep in {spec.modules_dir}",
                            f"install the modules for {spec.release} and run depmod"))
        return checks
    features = [(f.config, f.module, f.required) for f in dm_features.KERNEL_FEATURES]
    for symbol, mod, required in [*features, *KERNEL_FEATURES]:
        key = mod.replace("-", "_")
        if key in builtin:
            checks.append(Check("kernel", f"CONFIG_{symbol}", True, "built in", required=required))
        elif key in modules:
            checks.append(Check("kernel", f"CONFIG_{symbol}", True, f"module {mod}", required=required))
        else:
            checks.append(Check("kernel", f"CONFIG_{symbol}", False,
                                f"{mod} is neither built in nor a module of {spec.release}",
                                f"rebuild the kernel with CONFIG_{symbol}=m (or =y)", required))
    return checks


def check_installed_kernels(root: Path = Path("/"), cache: Path | None = None,
                            lacking: Callable[[KernelSpec], dict[str, tuple[str, ...]]] | None = None,
                            ) -> list[Check]:
    """The Debian kernels a guest can boot with --kernel-release (installed in /boot, or
    fetched into the kernel cache), the default and why; with ``lacking`` (target name ->
    what it lacks, for a kernel), which targets each one cannot run."""
    choice: DefaultChoice | None
    try:
        choice = choose_default(root)
    except PowercutError:
        choice = None
    checks = []

    def runs(spec: KernelSpec) -> str:
        if lacking is None:
            return ""
        missing = lacking(spec)
        if not missing:
            return "; runs every target"
        return "; cannot run " + ", ".join(
            f"{name} ({', '.join(why)})" for name, why in missing.items())

    for k in installed_kernels(root):
        if not k.has_modules:
            checks.append(Check("kernels", k.release, False,
                                f"no modules in {root / 'lib' / 'modules' / k.release}",
                                f"apt-get install --reinstall linux-image-{k.release}", required=False))
            continue
        detail = "in /boot"
        if choice is not None and choice.spec.release == k.release:
            detail += f"; the default: {choice.reason}"
        else:
            detail += f"; boot it with --kernel-release {k.release}"
        checks.append(Check("kernels", k.release, True,
                            detail + runs(_spec_of(k, root)), required=False))
    for c in cached_kernels(cache):
        checks.append(Check("kernels", c.release, True,
                            f"in the cache ({c.version} from {c.suite}); boot it with "
                            f"--kernel-release {c.release}" + runs(c.spec()), required=False))
    if choice is None:
        checks.append(Check("kernels", "default", False, "no kernel with modules",
                            f"apt-get install {META_PACKAGE} (make setup)", required=False))
    checks.append(Check("kernels", "another", True,
                        "'powercut kernels list' shows what Debian's archive offers (7.x from "
                        "trixie-backports, sid, experimental); 'powercut kernels fetch newest' "
                        "fetches one into the cache", required=False))
    return checks


def _spec_of(kernel: InstalledKernel, root: Path) -> KernelSpec:
    return KernelSpec(image=kernel.image, release=kernel.release, modules_root=root)


def check_python() -> list[Check]:
    # Imported here: it costs ~20 ms, which `powercut targets` (which reads
    # this module's tool and kernel look-ups) should not pay.
    import importlib.metadata

    checks = []
    for dep in PYTHON_DEPS:
        try:
            checks.append(Check("python", dep, True, importlib.metadata.version(dep)))
        except importlib.metadata.PackageNotFoundError:
            checks.append(Check("python", dep, False, "not installed", "run 'make setup'"))
    checks.append(check_interpreter())
    from devicemapper import native

    if native.available():
        checks.append(Check("python", "compiled log walker", True, "built", required=False))
    else:
        checks.append(Check("python", "compiled log walker", False,
                            "not built: logs are walked and replayed in Python (slower)",
                            "run 'make setup' (installs Debian packages gcc, python3-dev)",
                            required=False))
    return checks


def check_interpreter(maps: Path = Path("/proc/self/maps")) -> Check:
    """Whether this interpreter loads libpython as a shared library, which guests pay for.

    Every guest task is a fresh interpreter run under emulation. There, a python3 that
    loads libpython3.11.so (and was built without --enable-optimizations) started a
    check task 0.7 to 0.9 s later than Debian's python3, which has libpython linked in
    (docs/measurements/2026-11-27-guest-interpreter.md). The process's own mappings say
    which kind this is; sysconfig's Py_ENABLE_SHARED says 1 for both."""
    import platform

    what = f"{platform.python_version()} ({os.path.realpath(sys.executable)})"
    try:
        shared = "libpython" in maps.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Check("python", "interpreter", True, f"{what}; cannot read {maps}", required=False)
    if shared:
        return Check("python", "interpreter", False,
                     f"{what} loads libpython as a shared library: such a build started "
                     "guest tasks 0.7-0.9 s later under TCG than Debian's python3",
                     "make the virtualenv with an interpreter that has libpython linked in, "
                     "such as Debian's: rm -rf .venv .stamps && make setup PYTHON=/usr/bin/python3",
                     required=False)
    return Check("python", "interpreter", True, f"{what}, libpython linked in", required=False)


def check_kvm(spec: KernelSpec, probe: bool) -> list[Check]:
    from framework.core.machine import qemu

    if not os.path.exists("/dev/kvm"):
        return [Check("accel", "kvm", False, "no /dev/kvm: guests run under TCG (10-50x slower)",
                      "enable virtualisation or load kvm_intel/kvm_amd", required=False)]
    if not probe:
        try:
            cached = qemu.cached_accel(spec)
        except PowercutError:
            cached = None
        if cached is None:
            return [Check("accel", "kvm", True, "/dev/kvm present; not probed yet (--probe boots a probe guest)",
                          required=False)]
        accel, reason = cached
    else:
        accel = qemu.choose_accel(spec)
        accel, reason = qemu.cached_accel(spec) or (accel, "")
    if accel == "kvm":
        return [Check("accel", "kvm", True, f"usable: {reason}", required=False)]
    return [Check("accel", "kvm", False, f"not usable, guests use TCG: {reason}",
                  "nothing to do (TCG works); on bare metal check the kvm module", required=False)]


def check_guest(spec: KernelSpec) -> list[Check]:
    """Boot the guest and ask its kernel which dm targets it has."""
    from framework.core import agent
    from framework.core.machine.qemu import QemuMachine

    machine = QemuMachine(kernel=spec, missing_modules_ok=True, boot_timeout_s=120)
    try:
        machine.start()
        facts = agent.call(machine, {"task": "env"}, timeout_s=120)[0]
    except PowercutError as exc:
        return [Check("guest", "boot", False, str(exc), "see the console log; check the kernel and qemu")]
    finally:
        machine.close()
    checks = [Check("guest", "boot", True, f"ready in {machine.boot_s:.1f} s ({machine.accel})")]
    for target in dm_features.dm_targets():
        ok = target in facts["dm_targets"]
        checks.append(Check("guest", f"dm target {target}", ok,
                            "loaded" if ok else "missing from 'dmsetup targets' in the guest",
                            "" if ok else "the kernel needs this device-mapper target"))
    return checks


def diagnose(spec: KernelSpec | None, *, boot: bool = False, probe: bool = False,
             kernel_error: str | None = None) -> list[Check]:
    checks = check_tools() + check_python()
    if spec is None:
        checks.append(Check("kernel", "image", False, kernel_error or "no kernel",
                            f"install {META_PACKAGE} (make setup), or pick an installed kernel "
                            "with --kernel-release (listed below) or a built one with --kernel"))
        return checks
    checks += check_kernel(spec)
    checks += check_kvm(spec, probe)
    if boot:
        checks += check_guest(spec)
    return checks


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.required and not c.ok]


def render(checks: list[Check], echo: Callable[[str], None] = print) -> None:
    width = max(len(c.name) for c in checks)
    area = ""
    for c in checks:
        if c.area != area:
            area = c.area
            echo(f"{area}:")
        mark = "ok  " if c.ok else ("FAIL" if c.required else "warn")
        line = f"  {mark} {c.name:<{width}}  {c.detail}"
        if c.fix and not c.ok:
            line += f"  -> {c.fix}"
        echo(line)


def as_json(checks: list[Check]) -> list[dict[str, object]]:
    return [asdict(c) for c in checks]
