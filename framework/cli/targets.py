"""``powercut targets [show NAME]``: the filesystem configurations, and whether this machine runs them.

Plain text on purpose: listing targets must stay instant, so this module
imports no rendering library and boots nothing.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from framework.cli import doctor, print_json, user_targets
from framework.core.errors import PowercutError, Unsupported
from framework.core.machine.kernel import KernelSpec, kernel_spec
from recovery.filesystems import adapter_for, persistence_rules
from recovery.persistence import RULE_SENTENCES, PersistenceRules
from recovery.targets import JournalPlacement, Target, get_target, list_targets

# Stand-ins for the devices in the commands `show` prints.
DATA_DEV = "DEV"
JOURNAL_DEV = "JOURNAL_DEV"


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether this machine (its tools, the guest kernel's modules) can run a target, and why not."""

    missing: tuple[str, ...]  # one reason per missing piece, with its fix
    kernel: str  # the kernel release the modules were looked up in, or why none was

    @property
    def available(self) -> bool:
        return not self.missing


@dataclass(frozen=True, slots=True)
class KernelModules:
    """The modules a guest kernel has, as module files or built in."""

    release: str
    names: frozenset[str]  # with '-' spelled '_', as modules.dep has them

    def has(self, module: str) -> bool:
        return module.replace("-", "_") in self.names


def guest_kernel_modules(spec: KernelSpec | None) -> KernelModules | str:
    """The guest kernel's modules, or a sentence saying why they are unknown."""
    if spec is None:
        return "no guest kernel found"
    modules, builtin = doctor.module_index(spec)
    if not modules and not builtin:
        return f"no modules.dep in {spec.modules_dir}"
    return KernelModules(spec.release, frozenset(modules | builtin))


def availability(target: Target, kernel: KernelModules | str) -> Availability:
    """What ``target`` needs that this machine lacks: the adapter's programs and kernel modules."""
    adapter = adapter_for(target.fstype)
    missing = [f"program {tool.binary} (install Debian package {tool.package})"
               for tool in adapter.tools
               if tool.needed and doctor.find_tool(tool.binary) is None]
    if isinstance(kernel, KernelModules):
        missing += [f"kernel module {module} (not in kernel {kernel.release})"
                    for module in adapter.kernel_modules if not kernel.has(module)]
        checked = kernel.release
    else:
        checked = f"kernel modules not checked: {kernel}"
    return Availability(tuple(missing), checked)


def lacking(targets: Iterable[Target], spec: KernelSpec) -> dict[str, tuple[str, ...]]:
    """What each of ``targets`` that the guest kernel ``spec`` or this machine cannot run
    lacks: target name -> the missing modules and programs (empty: all can run)."""
    kernel = guest_kernel_modules(spec)
    return {t.name: a.missing for t in targets if (a := availability(t, kernel)).missing}


def skip_reason(missing: dict[str, tuple[str, ...]]) -> str:
    """One line: each target that cannot run and what it lacks."""
    return "; ".join(f"target {name} needs {', '.join(why)}" for name, why in missing.items())


def require_supported(targets: Iterable[Target], spec: KernelSpec) -> None:
    """Raise Unsupported (the command is skipped) when any of ``targets`` cannot run here."""
    missing = lacking(targets, spec)
    if missing:
        raise Unsupported(skip_reason(missing))


def _default_kernel() -> KernelSpec | None:
    try:
        return kernel_spec(None, None)
    except PowercutError:
        return None


def _default_kernel_modules() -> KernelModules | str:
    return guest_kernel_modules(_default_kernel())


def cmd_profiles(args: argparse.Namespace) -> int:
    """List the device profiles, built in and from --targets-file, with the numbers each applies."""
    from recovery.profiles import builtin_profiles
    from recovery.targets import load_target_file

    path = getattr(args, "targets_file", None)
    user = load_target_file(path)[1] if path else {}
    profiles = [*builtin_profiles().values(), *user.values()]
    if args.json:
        print_json([{"name": p.name, **p.to_dict(), "builtin": p.name not in user}
                    for p in profiles])
        return 0
    name_w = max(len("PROFILE"), *(len(p.name) for p in profiles))
    print(f"{'PROFILE':<{name_w}}  {'READ':>5}  {'WRITE':>5}  {'FLUSH':>5}  {'MB/s':>6}  "
          f"{'IOPS':>6}  DESCRIPTION")
    for p in profiles:
        mbs = f"{p.bandwidth_mb_s:g}" if p.bandwidth_mb_s is not None else "-"
        iops = str(p.iops) if p.iops is not None else "-"
        print(f"{p.name:<{name_w}}  {p.read_ms:>3}ms  {p.write_ms:>3}ms  {p.flush_ms:>3}ms  "
              f"{mbs:>6}  {iops:>6}  {p.description}")
        if p.source:
            print(f"{'':<{name_w}}  source: {p.source}")
    print("\nREAD/WRITE/FLUSH: dm-delay in the guest (whole ms; the flush delay is what fsync "
          "and a journal commit wait for); MB/s, IOPS: qemu's throttling of the disk")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """List the targets, built in and from --targets-file, and whether this machine can run each."""
    if getattr(args, "profiles", False):
        return cmd_profiles(args)
    user = user_targets(args)
    kernel = _default_kernel_modules()
    rows = [(t, availability(t, kernel)) for t in list_targets(user)]
    if args.json:
        print_json([{"name": t.name, "fstype": t.fstype, "journal": t.journal.value,
                     "available": a.available, "missing": list(a.missing), "kernel": a.kernel,
                     "description": t.description, "builtin": t.name not in user}
                    for t, a in rows])
        return 0
    name_w = max(len("NAME"), *(len(t.name) for t, _ in rows))
    fs_w = max(len("FSTYPE"), *(len(t.fstype) for t, _ in rows))
    print(f"{'NAME':<{name_w}}  {'FSTYPE':<{fs_w}}  {'JOURNAL':<8}  {'AVAILABLE':<9}  DESCRIPTION")
    for t, a in rows:
        ok = "yes" if a.available else "no"
        print(f"{t.name:<{name_w}}  {t.fstype:<{fs_w}}  {t.journal.value:<8}  {ok:<9}  {t.description}")
        for why in a.missing:
            print(f"{'':<{name_w}}  missing: {why}")
    if isinstance(kernel, str):
        print(f"\nkernel modules not checked: {kernel}")
    return 0


@dataclass(frozen=True, slots=True)
class TargetDetails:
    """Everything `targets show` says about one target."""

    target: Target
    builtin: bool
    mkfs_commands: tuple[tuple[str, ...], ...]  # journal device first, if it has its own mkfs
    mount_options_used: tuple[str, ...]  # the target's and what its journal placement adds
    mount_replays_journal: bool
    availability: Availability
    kernel_modules: tuple[str, ...]
    tools: tuple[tuple[str, str], ...]  # (binary, Debian package)
    rules: PersistenceRules

    def to_dict(self) -> dict[str, object]:
        return {
            **self.target.to_dict(),
            "builtin": self.builtin,
            "mkfs_commands": [list(argv) for argv in self.mkfs_commands],
            "mount_options_used": list(self.mount_options_used),
            "mount_replays_journal": self.mount_replays_journal,
            "available": self.availability.available,
            "missing": list(self.availability.missing),
            "kernel": self.availability.kernel,
            "kernel_modules": list(self.kernel_modules),
            "tools": [{"binary": b, "package": p} for b, p in self.tools],
            "persistence_rules": asdict(self.rules),
            "guarantees": [RULE_SENTENCES[g] for g in self.rules.guarantees()],
        }


def details(target: Target, *, builtin: bool, kernel: KernelModules | str) -> TargetDetails:
    adapter = adapter_for(target.fstype)
    journal_dev = JOURNAL_DEV if target.needs_journal_disk else None
    commands = []
    if journal_dev is not None:
        journal_argv = adapter.journal_mkfs_argv(target, journal_dev)
        if journal_argv is not None:
            commands.append(tuple(journal_argv))
    commands.append(tuple(adapter.mkfs_argv(target, DATA_DEV, journal_dev=journal_dev)))
    return TargetDetails(
        target=target,
        builtin=builtin,
        mkfs_commands=tuple(commands),
        mount_options_used=tuple(adapter.mount_options(target, journal_dev=journal_dev)),
        mount_replays_journal=adapter.mount_replays_journal,
        availability=availability(target, kernel),
        kernel_modules=adapter.kernel_modules,
        tools=tuple((t.binary, t.package) for t in adapter.tools),
        rules=persistence_rules(target),
    )


def _words(options: Sequence[str]) -> str:
    return " ".join(options) if options else "(none)"


def _options(options: Sequence[str]) -> str:
    """Mount options as mount -o takes them."""
    return ",".join(options) if options else "(none)"


def _journal_words(target: Target) -> str:
    size = f"{target.journal_size_mib} MiB" if target.journal_size_mib else "mkfs default size"
    if target.journal is JournalPlacement.EXTERNAL:
        return f"external, on a disk of its own ({size})"
    if target.journal is JournalPlacement.INTERNAL:
        return f"internal, on the data disk ({size})"
    return "none: recovery is fsck's job"


def cmd_show(args: argparse.Namespace) -> int:
    """Show one target: mkfs and mount options, journal, availability and persistence rules."""
    user = user_targets(args)
    target = get_target(args.name, user)
    d = details(target, builtin=target.name not in user, kernel=_default_kernel_modules())
    if args.json:
        print_json(d.to_dict())
        return 0
    origin = "built in" if d.builtin else f"from {os.fspath(args.targets_file)}"
    print(f"{target.name} ({origin})")
    if target.description:
        print(f"  {target.description}")
    print(f"filesystem:      {target.fstype}")
    print(f"journal:         {_journal_words(target)}")
    if target.journalled and not d.mount_replays_journal:
        print("                 replayed by fsck before the mount, not by the kernel at mount")
    print(f"mkfs options:    {_words(target.mkfs_options)}")
    print(f"mount options:   {_options(target.mount_options)}")
    for argv in d.mkfs_commands:
        print(f"mkfs command:    {' '.join(argv)}")
    print(f"mounted with:    {_options(d.mount_options_used)}")
    if target.disk_profiles:
        print("disk profiles:   " + ", ".join(f"{role}={name}" for role, name in target.disk_profiles))
    if d.availability.available:
        print(f"available:       yes (programs found; kernel {d.availability.kernel})")
    else:
        print("available:       no")
        for why in d.availability.missing:
            print(f"  missing: {why}")
    print(f"persistence rules ({d.rules.name}): what POSIX promises, and")
    sentences = [RULE_SENTENCES[g] for g in d.rules.guarantees()]
    for sentence in sentences:
        print(f"  - {sentence}")
    if not sentences:
        print("  - nothing more.")
    return 0


def _add_common(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    # In 'show', SUPPRESS keeps what was given before the verb instead of
    # resetting it to the default.
    p.add_argument("--json", action="store_true",
                   default=argparse.SUPPRESS if suppress else False, help="print JSON")
    p.add_argument("--targets-file", metavar="FILE",
                   default=argparse.SUPPRESS if suppress else None,
                   help="also load the user targets in this TOML file (same format as "
                        "recovery/builtin_targets.toml)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "targets", help="list the filesystem configurations and whether this machine runs them",
        description="List the targets (built in, and from --targets-file) with their filesystem, "
                    "journal placement, availability on this machine (programs on the host, "
                    "modules of the guest kernel) and description. 'targets show NAME' prints "
                    "one target's options, commands and persistence rules.",
    )
    _add_common(p, suppress=False)
    p.add_argument("--profiles", action="store_true",
                   help="list the device profiles (built in, and [profiles.NAME] of "
                        "--targets-file) with their delays and limits instead")
    p.set_defaults(func=cmd_list)
    verbs = p.add_subparsers(dest="targets_command", metavar="VERB")
    show = verbs.add_parser("show", help="one target in detail", description=cmd_show.__doc__)
    show.add_argument("name", metavar="NAME", help="target name, e.g. one from 'powercut targets'")
    _add_common(show, suppress=True)
    show.set_defaults(func=cmd_show)
