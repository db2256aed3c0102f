"""The ``powercut`` command line."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from framework import __version__
from framework.core.errors import MissingPrerequisite, PowercutError

log = logging.getLogger("powercut")

# Modules that add sub-commands: each has add_parser(subparsers).
COMMAND_MODULES = (
    "framework.cli.run",
    "framework.cli.vm",
    "framework.cli.log",
    "framework.cli.crash",
    "framework.cli.cut",
    "framework.cli.bench",
)

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


def add_machine_options(p: argparse.ArgumentParser) -> None:
    """Options that pick the kernel and the qemu guest."""
    g = p.add_argument_group("guest machine")
    g.add_argument("--kernel", metavar="BZIMAGE",
                   help="kernel image to boot (default: the newest installed Debian kernel)")
    g.add_argument("--modules", metavar="DIR",
                   help="modules for --kernel: the INSTALL_MOD_PATH that holds lib/modules/RELEASE")
    g.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                   help="qemu accelerator; auto probes KVM once and caches the verdict (default: auto)")
    g.add_argument("--memory-mib", type=int, default=2048, metavar="MIB",
                   help="guest memory; dm-log-writes pins every unflushed write (default: 2048)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="powercut", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"powercut {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-vv: every command and its output)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
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


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except MissingPrerequisite as exc:
        print(f"powercut: missing prerequisite: {exc}", file=sys.stderr)
        return 3
    except PowercutError as exc:
        print(f"powercut: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("powercut: interrupted; results so far are kept", file=sys.stderr)
        return 130


def print_json(obj: object) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    sys.exit(main())
