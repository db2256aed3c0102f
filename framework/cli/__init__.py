"""The ``powercut`` command line."""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from framework import __version__
from framework.core.errors import SKIPPED, MissingPrerequisite, PowercutError, Unsupported

if TYPE_CHECKING:
    from recovery.targets import Target

log = logging.getLogger("powercut")

# Every sub-command: the module whose add_parser(subparsers) defines it, and
# its one line for `powercut --help`. Only the module of the command being
# run is imported, so `powercut --help` and light commands start fast; a
# unit test imports every module and checks it defines the commands named.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("framework.cli.vm", "check tools, kernel features and KVM; say how to fix what is missing"),
    "run": ("framework.cli.run", "run a study: crash, power-cut and benchmark steps (default: quick)"),
    "targets": ("framework.cli.targets", "list targets and show one's options and persistence rules"),
    "crash": ("framework.cli.crash", "record a workload and check every crash state"),
    "coverage": ("framework.cli.coverage",
                 "which syscalls, flags and argument classes workloads give a filesystem"),
    "recheck": ("framework.cli.crash", "rebuild one crash state of an earlier run and check it again"),
    "shrink": ("framework.cli.shrink", "minimise the workload of a failing crash state (delta debugging)"),
    "export": ("framework.cli.export", "turn a failing crash state into a shell or fstests reproducer"),
    "cut": ("framework.cli.cut", "power cuts on a live workload (dm-flakey) and the recovery after them"),
    "sweep": ("framework.cli.sweep", "recovery time against size, files, data in flight, journal size"),
    "bench": ("framework.cli.bench", "throughput overhead of journalling per target, with intervals"),
    "report": ("framework.cli.report", "one self-contained HTML report of a run or study"),
    "compare": ("framework.cli.compare", "what changed from run A to run B; exit 1 on a regression"),
    "merge": ("framework.cli.merge", "combine results databases (CI shards) into one"),
    "ci": ("framework.cli.ci", "run a study on a kernel and judge it against a baseline"),
    "log": ("framework.cli.log", "inspect and replay dm-log-writes logs"),
    "vm": ("framework.cli.vm", "run commands in a fresh guest"),
    "kernels": ("framework.cli.kernels", "Debian kernels and kernel sources from any suite, in a cache"),
    "zoo": ("framework.cli.zoo", "detection power on real bugs: build the zoo's kernels, run the recall"),
}
COMMAND_MODULES = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))

DESCRIPTION = """\
powercut: crash-consistency and recovery-time tests for Linux filesystems.

Runs workloads over device-mapper targets that record writes (dm-log-writes)
or drop them (dm-flakey), rebuilds every crash state, checks that each one
mounts, fscks clean and keeps what fsync promised, times recovery (journal
replay at mount, fsck) and measures what journalling costs in throughput.
Device-mapper work runs in a qemu guest (the installed Debian kernel by
default, or --kernel/--modules for a kernel under test).
"""

EPILOG = """\
start here:
  powercut doctor            what is installed, what is missing and the fix
  powercut run               the default study (quick)
  powercut vm run -- CMD     run one command in a fresh guest
  powercut COMMAND --help    every command explains its options
"""


def add_machine_options(p: argparse.ArgumentParser, *, memory_default: int | None = 2048) -> None:
    """Options that pick the kernel and the qemu guest."""
    g = p.add_argument_group("guest machine")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--kernel", metavar="BZIMAGE",
                       help="kernel image to boot, e.g. a bzImage under test (default: the installed "
                            "Debian kernel that linux-image-amd64 depends on; 'powercut doctor' shows it)")
    which.add_argument("--kernel-release", metavar="RELEASE",
                       help="boot another Debian kernel: /boot/vmlinuz-RELEASE with "
                            "/lib/modules/RELEASE, or one fetched into the kernel cache with "
                            "'powercut kernels fetch', e.g. --kernel-release 7.3.4+deb13-amd64; "
                            "downloads nothing ('powercut kernels list' shows both)")
    g.add_argument("--modules", metavar="DIR",
                   help="modules for --kernel: the INSTALL_MOD_PATH that holds lib/modules/RELEASE")
    g.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                   help="qemu accelerator; auto probes KVM once and caches the verdict (default: auto)")
    g.add_argument("--memory-mib", type=int, default=memory_default, metavar="MIB",
                   help="guest memory; dm-log-writes pins every unflushed write (default: 2048)"
                   if memory_default is not None else
                   "guest memory of every step (default: each step's own, else 2048); "
                   "dm-log-writes pins every unflushed write")


class _TargetNames(argparse.Action):
    """--target NAME, repeatable, each also a comma list: one spelling on every command."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        names = list(getattr(namespace, self.dest, None) or [])
        names += [n.strip() for n in str(values).split(",") if n.strip()]
        if not names:
            parser.error(f"{option_string}: expected a target name, e.g. ext4/ordered")
        setattr(namespace, self.dest, list(dict.fromkeys(names)))


def add_target_options(p: argparse.ArgumentParser, *, what: str, required: bool = True) -> None:
    """--target (alias --targets) and --targets-file, the same on every command."""
    p.add_argument("--target", "--targets", dest="target", action=_TargetNames, required=required,
                   metavar="NAME[,NAME...]",
                   help=f"{what}; repeat the option or give a comma list "
                        "(names: 'powercut targets')")
    p.add_argument("--targets-file", metavar="FILE",
                   help="your own targets in TOML, in the format of the built-in "
                        "recovery/builtin_targets.toml; --target may name them")


def user_targets(args: argparse.Namespace) -> dict[str, Target]:
    """The targets of --targets-file (none without it); bad TOML is a one-line error."""
    from recovery.targets import load_targets

    path = getattr(args, "targets_file", None)
    return load_targets(path) if path else {}


def add_profile_option(p: argparse.ArgumentParser) -> None:
    """--profile: the device profile of each disk, for every target of the run."""
    p.add_argument("--profile", metavar="ROLE=NAME[,ROLE=NAME]",
                   help="device profile of the data and/or journal disk for every target of the "
                        "run, e.g. data=hdd,journal=ram (a bare NAME is the data disk's); "
                        "built in: ram, nvme, ssd, hdd, usb-flash, or [profiles.NAME] of "
                        "--targets-file ('powercut targets --profiles' lists them with their "
                        "numbers). Overrides a target's own disk_profiles for the roles named")


def named_user_targets(args: argparse.Namespace) -> tuple[Target, ...]:
    """The --targets-file definitions that --target names, with --profile applied to every
    named target (built in or not): what a plan must carry."""
    from recovery.profiles import parse_profile_option
    from recovery.targets import DISK_ROLES, get_target, load_target_file, with_profiles

    path = getattr(args, "targets_file", None)
    extra, profiles = load_target_file(path) if path else ({}, {})
    option = getattr(args, "profile", None)
    if not option:
        return tuple(extra[name] for name in args.target if name in extra)
    roles = parse_profile_option(option, DISK_ROLES)
    return tuple(with_profiles(get_target(name, extra), roles, profiles) for name in args.target)


def case_of(args: argparse.Namespace) -> str:
    """--case as a run keeps it: a workload file (file:PATH) by its absolute path, so that
    the run's recheck, shrink and export find it from any directory."""
    case = str(args.case)
    if case.startswith("file:") and len(case) > len("file:"):
        return "file:" + os.path.abspath(case.removeprefix("file:"))
    return case


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (the first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv``, only the module of the command it names is imported."""
    parser = argparse.ArgumentParser(
        prog="powercut", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"powercut {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-vv: every command and its output)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = _command_of(argv) if argv is not None else None
    if wanted in COMMANDS:
        importlib.import_module(COMMANDS[wanted][0]).add_parser(sub)
    elif argv is None:
        for module in COMMAND_MODULES:
            importlib.import_module(module).add_parser(sub)
    else:
        # Top-level help, or a word that is no command: list them all, import none.
        for name, (_, helptext) in COMMANDS.items():
            sub.add_parser(name, help=helptext)
    return parser


def configure_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if verbose == 0:
        # The accelerator verdict is said once, even when quiet.
        logging.getLogger("framework.core.machine.qemu").setLevel(logging.INFO)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, kill): unwind like Ctrl-C so every guest,
    # dm device and mount is torn down and the results store says interrupted.
    raise KeyboardInterrupt


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """The command line; a command that writes run directories and was given no --db keeps
    its database beside them, in the --results directory."""
    args = parser.parse_args(argv)
    if getattr(args, "db", "") is None and getattr(args, "results", None):
        from framework.core import rundir  # here, not at the top: light commands start faster

        args.db = os.path.join(args.results, getattr(args, "db_name", rundir.DB))
    return args


def main(argv: Sequence[str] | None = None, *,
         on_error: Callable[[PowercutError], None] | None = None, nested: bool = False) -> int:
    """Run one command; its exit status. ``on_error`` sees the error a failing command
    ended with (a study uses it to stop after a guest that did not boot). ``nested``: the
    command is a step of another (a study's step, a ci run's study); Ctrl-C or SIGTERM then
    ends the command as usual and is raised again, so the outer command stops too instead
    of going on with its next step."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parse(parser, argv)
    configure_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except Unsupported as exc:
        print(f"powercut: skipped: {exc}", file=sys.stderr)
        if on_error is not None:
            on_error(exc)
        return SKIPPED
    except MissingPrerequisite as exc:
        print(f"powercut: missing prerequisite: {exc}", file=sys.stderr)
        return 3
    except PowercutError as exc:
        from framework.core.store import StoreError  # not at import: guest programs start here

        db = getattr(args, "db", None)
        if isinstance(exc, StoreError) and db and os.fspath(db) not in str(exc):
            exc = StoreError(f"{db}: {exc}")  # every database error names the database
        print(f"powercut: {exc}", file=sys.stderr)
        if on_error is not None:
            on_error(exc)
        return 2
    except OSError as exc:
        where = _full(exc, args)
        if where is None:
            raise
        print(f"powercut: {where}: no space left on device; what is stored so far is kept: "
              "make room, then carry on with --resume RUN_DIR", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("powercut: interrupted; results so far are kept", file=sys.stderr)
        if nested:
            raise
        return 130


def _full(exc: BaseException, args: argparse.Namespace) -> str | None:
    """Where the space ran out, if ``exc`` (or what caused it) says it did; else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return os.fspath(seen.filename) if seen.filename else (
                getattr(args, "results", None) or os.getcwd())
        seen = seen.__cause__ or seen.__context__
    return None


def print_json(obj: object) -> None:
    import json  # here, not at the top: light commands start faster

    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    sys.exit(main())
