"""Sub-commands that deal with the machine: doctor, vm run, vm shell, run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from framework.cli import add_machine_options, doctor, print_json
from framework.core.errors import ConfigError, PowercutError
from framework.core.machine.base import DiskSpec
from framework.core.machine.kernel import KernelSpec, kernel_spec
from framework.core.machine.qemu import QemuMachine
from recovery.filesystems import GUEST_FSTYPES, kernel_modules

SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """'64M' -> bytes (K, M, G binary units)."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1] if t and t[-1] in "kmg" else ""
    try:
        value = int(t[: len(t) - len(unit)])
    except ValueError:
        raise ConfigError(f"size {text!r}: expected a number with an optional K, M or G suffix") from None
    if value <= 0:
        raise ConfigError(f"size {text!r}: must be positive")
    return value * SIZE_UNITS[unit]


def parse_disk(text: str) -> DiskSpec:
    name, sep, size = text.partition(":")
    if not sep or not name.isidentifier():
        raise ConfigError(f"--disk {text!r}: expected NAME:SIZE, e.g. data:64M")
    return DiskSpec(name, parse_size(size))


def resolve_kernel(args: argparse.Namespace) -> KernelSpec:
    """The kernel the machine options name (--kernel/--modules or --kernel-release, else
    the default), resolved once per command. Commands call it before they open a run,
    so a kernel that is not there creates no run directory and no store row."""
    spec = getattr(args, "resolved_kernel", None)
    if spec is None:
        spec = kernel_spec(args.kernel, args.modules, getattr(args, "kernel_release", None))
        args.resolved_kernel = spec
    return spec


def machine_from_args(args: argparse.Namespace, *, disks: Sequence[DiskSpec] = (),
                      fstypes: Sequence[str] = (), rundir: Path | None = None,
                      kernel: KernelSpec | None = None, cpus: int | None = None) -> QemuMachine:
    """A guest as the machine options (--kernel, --modules, --kernel-release, --accel,
    --memory-mib) ask, with the kernel modules the filesystem types ``fstypes`` need."""
    return QemuMachine(
        kernel=kernel or resolve_kernel(args),
        disks=disks,
        modules=kernel_modules(fstypes),
        accel=None if args.accel == "auto" else args.accel,
        memory_mib=args.memory_mib,
        rundir=rundir,
        cpus=cpus,
    )


def cmd_doctor(args: argparse.Namespace) -> int:
    spec: KernelSpec | None = None
    kernel_error = None
    try:
        spec = resolve_kernel(args)
    except PowercutError as exc:
        kernel_error = str(exc)
    checks = doctor.diagnose(spec, boot=args.boot, probe=args.probe, kernel_error=kernel_error)
    from framework.cli.targets import lacking  # targets reads doctor's look-ups
    from recovery.targets import list_targets

    checks += doctor.check_installed_kernels(lacking=lambda k: lacking(list_targets(), k))
    if args.json:
        print_json(doctor.as_json(checks))
    else:
        doctor.render(checks)
    bad = doctor.failed(checks)
    if bad and not args.json:
        print(f"\n{len(bad)} required item(s) missing: " + ", ".join(c.name for c in bad), file=sys.stderr)
    return 1 if bad else 0


def cmd_vm_run(args: argparse.Namespace) -> int:
    argv = list(args.cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise ConfigError("vm run: no command given (usage: powercut vm run -- CMD [ARG...])")
    disks = [parse_disk(d) for d in args.disk]
    with machine_from_args(args, disks=disks, fstypes=tuple(args.fs)) as machine:
        machine.start()
        result = machine.run(argv, timeout_s=args.timeout, ok_status=None)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.status


def cmd_vm_shell(args: argparse.Namespace) -> int:
    disks = [parse_disk(d) for d in args.disk]
    with machine_from_args(args, disks=disks, fstypes=tuple(args.fs)) as machine:
        machine.start()
        for spec in disks:
            print(f"disk {spec.name}: {machine.disk(spec.name)}", file=sys.stderr)
        print("guest shell; leave with 'exit' or Ctrl-]", file=sys.stderr)
        machine.interact()
    return 0


DOCTOR_DESCRIPTION = """\
Check that everything powercut needs is present: tools with their versions,
the guest kernel's device-mapper and virtio features, Python packages and
whether KVM is usable. Each missing item comes with its fix. Exits 1 if a
required item is missing.

Also lists the Debian kernels a guest can boot with --kernel-release (installed
in /boot, or fetched into the kernel cache with 'powercut kernels fetch'), which
one is the default and why (the release linux-image-amd64 depends on), and which
targets each one cannot run (a module it lacks, such as reiserfs on 7.x).
"""

DOCTOR_EPILOG = """\
examples:
  powercut doctor                                         the default kernel, tools, KVM
  powercut doctor --kernel-release 7.3.4+deb13-amd64      check another kernel (powercut kernels fetch)
  powercut doctor --kernel bzImage --modules DIR --boot   a built kernel, booted
"""

VM_EPILOG = """\
examples:
  powercut vm run -- uname -r
  powercut vm run --kernel-release 7.3.4+deb13-amd64 -- uname -r
  powercut vm run --disk data:64M -- sh -c 'dmsetup targets; lsblk'
  powercut vm shell --disk data:64M
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="check tools, kernel features and the accelerator",
        description=DOCTOR_DESCRIPTION, epilog=DOCTOR_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_machine_options(p)
    p.add_argument("--boot", action="store_true",
                   help="also boot the guest and check its dm targets (a few seconds under TCG)")
    p.add_argument("--probe", action="store_true", help="probe KVM now instead of using the cached verdict")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.set_defaults(func=cmd_doctor)

    vm = sub.add_parser("vm", help="run commands in a fresh guest",
                        description="Boot a throwaway guest with device-mapper and run a command or a shell in it.")
    vsub = vm.add_subparsers(dest="vm_command", metavar="VERB")
    for name, helptext, func in (
        ("run", "run one command; exits with its status", cmd_vm_run),
        ("shell", "an interactive shell on the guest console", cmd_vm_shell),
    ):
        q = vsub.add_parser(name, help=helptext, description=helptext, epilog=VM_EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        add_machine_options(q)
        q.add_argument("--disk", action="append", default=[], metavar="NAME:SIZE",
                       help="attach a sparse scratch disk (first is /dev/vda); repeatable")
        q.add_argument("--fs", action="append", default=list(GUEST_FSTYPES), metavar="FSTYPE",
                       help="filesystem types whose kernel modules to load (always: "
                            f"{', '.join(GUEST_FSTYPES)}); repeatable")
        if name == "run":
            q.add_argument("--timeout", type=float, default=600.0, metavar="S",
                           help="seconds the command may take (default: 600)")
            q.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARG...]")
        q.set_defaults(func=func)
    vm.set_defaults(func=lambda a: (vm.print_help(), 2)[1])
