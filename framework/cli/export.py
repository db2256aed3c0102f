"""``powercut export``: a failing crash state as a shell reproducer or an fstests test."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from crashcases.findings.export import (
    DEFAULT_TEST_NAME,
    ExportError,
    ExportState,
    load_export_state,
)
from crashcases.findings.fstests import next_test_name, write_fstests
from crashcases.findings.script import write_script
from framework.cli import add_machine_options

DESCRIPTION = """\
Turn failing state STATE of the crash run RUN_DIR into a reproducer that
needs no powercut, in one of two forms (no guest is booted; nothing is
written if the input is bad):

--script OUT.sh   a POSIX shell script, and the state's disk image beside it
                  (OUT.img.gz). As root it attaches the image read-only to a
                  loop device under a non-persistent dm-snapshot (COW on a
                  temporary file), recovers it as powercut does for the target
                  (read-only fsck first where the kernel does not replay a
                  journal), mounts it and checks each broken promise with
                  plain shell: test -e, stat -c %s, sha256 of 4 KiB blocks.
                  It prints "ok: ..." or "FAIL: ..." per check and exits 1
                  if the finding reproduces, 0 if not, 2 if it cannot run.
                  It needs dmsetup, losetup, the filesystem's checker and
                  coreutils; it touches no device but those it creates.
                  Works for every variant (prefix, subset, torn, lying).

--fstests DIR     an fstests test, DIR/tests/generic/999 and its golden
                  999.out (--test-name to choose), written like fstests'
                  dm-log-writes tests: the workload runs again through
                  $XFS_IO_PROG and coreutils on log-writes over dm-thin, with
                  _log_writes_mark pc-N after every durability operation,
                  then _log_writes_replay_log replays to the state's mark and
                  the same checks run. The golden output is what a filesystem
                  that keeps every promise prints. Only prefix states at a
                  mark can be replayed so; other variants need --script.
                  If DIR is a built checkout, the test is added to its
                  tests/generic/group.list too. Where the state allows it,
                  a second test in the dm-flakey form that fstests' own
                  crash tests use is written as the next test number: the
                  workload runs on dm-flakey up to the mark's durability
                  operation, _flakey_drop_and_remount loses every write
                  after it, and the same checks run. A dm-flakey cut drops
                  writes issued after it; writes completed but not yet
                  flushed stay, as on a disk without a write cache.
                  A target with its journal on a disk of its own (ext4/logdev,
                  xfs/logdev) is written in the dm-log-writes form only, with
                  both disks recorded: LOGWRITES_DEV split in two logs, the
                  journal on SCRATCH_LOGDEV (USE_EXTERNAL=yes); the script
                  and the dm-flakey form cannot express such a state.

The state's image comes from the run (state-*.img.gz) or is rebuilt from
its log.img. A state that passed, is not in the run, or whose image cannot
be rebuilt is a one-line error; so is an output that already exists,
unless --force.
"""

EPILOG = """\
examples:
  powercut crash --target ext4/nobarrier --case hand:write-fsync-rename
  powercut export results/crash-.../ 41/prefix --script repro.sh
  sudo sh repro.sh                  # ok:/FAIL: lines; exit 1 = reproduced
  powercut export results/crash-.../ 57/lying:1234 --script lying.sh
  powercut export results/crash-.../ 41/prefix --fstests ~/xfstests-dev
  cd ~/xfstests-dev && ./check generic/999
  powercut export results/crash-.../ 41/prefix --fstests ~/xfstests-dev --test-name ext4/900

exit status: 0 written; 2 bad input (nothing written).
"""


def cmd_export(args: argparse.Namespace) -> int:
    state = load_export_state(Path(args.run_dir), args.state)
    if args.report:
        return export_report(args, state)
    if args.script:
        script, image = write_script(state, Path(args.script), force=args.force)
        size_mib = image.stat().st_size / (1 << 20)
        print(f"wrote {script}")
        print(f"  and {image} ({size_mib:.1f} MiB), which it reads")
        print(f"run as root: sh {_shown(script)}   (exit 1: reproduced, 0: not)")
    else:
        where = Path(args.fstests)
        names = {"log-writes": args.test_name,
                 "flakey": args.flakey_test_name or next_test_name(args.test_name)}
        forms = ("log-writes", "flakey") if args.form == "both" else (args.form,)
        written = []
        for form in forms:
            try:
                test, out = write_fstests(state, where, names[form], force=args.force, form=form)
            except ExportError as exc:
                if args.form != "both" or form == "log-writes":
                    raise
                print(f"no dm-flakey form: {exc}")
                continue
            written.append(names[form])
            print(f"wrote {test} ({form})")
            print(f"  and {out} (the golden output)")
        journal = (", and SCRATCH_LOGDEV with USE_EXTERNAL=yes for the journal's disk"
                   if state.target.needs_journal_disk else "")
        print(f"run: cd {_shown(where.resolve())} && ./check {' '.join(written)}   "
              f"(needs SCRATCH_DEV, and LOGWRITES_DEV for the dm-log-writes form{journal}, in "
              "local.config)")
    return 0


def export_report(args: argparse.Namespace, state: ExportState) -> int:
    """--report DIR: the bug report folder; with --run-fstests, its fstests tests run in a
    guest on the kernel the machine options name, and their verdicts go into the report."""
    from crashcases.findings.report import FORMS, FstestsRun, write_report

    out = Path(args.report)
    also = [Path(p) for p in args.also]
    cause = Path(args.cause) if args.cause else None
    fix = Path(args.fix) if args.fix else None
    forms = FORMS if args.form == "both" else (args.form,)
    files = write_report(state, out, also=also, cause_file=cause, fix_file=fix,
                         test_name=args.report_test_name, force=args.force, forms=forms)
    runs: list[FstestsRun] = []
    if args.run_fstests:
        from framework.cli.vm import resolve_kernel
        from framework.zoo.fstests import check_built, run_test

        checkout = check_built(Path(args.run_fstests), "--run-fstests")
        spec = resolve_kernel(args)

        def add_tests(copy: Path) -> None:
            for name, form in files.tests:
                write_fstests(state, copy, name, force=True, form=form)

        # The guest's copy of the checkout goes to a scratch directory, not the report.
        with tempfile.TemporaryDirectory(prefix="powercut-fstests-") as scratch:
            for name, form in files.tests:
                print(f"fstests {name} ({form}) on {spec.release} ...", flush=True)
                verdict = run_test(checkout, name, state.target.name, spec,
                                   Path(scratch) / name.replace("/", "-"), prepare=add_tests)
                runs.append(FstestsRun(name, form, spec.release, verdict.verdict,
                                       verdict.output))
                print(f"  {verdict.verdict}" + (f": {verdict.why}" if verdict.why else ""))
        files = write_report(state, out, also=also, cause_file=cause, fix_file=fix,
                             test_name=args.report_test_name, runs=runs, force=True,
                             forms=forms)
    print(f"wrote {files.report}")
    for name, form in files.tests:
        print(f"  and tests/{name} ({form})")
    return 0


def _shown(path: Path) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else os.fspath(path)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="turn a failing crash state into a shell or fstests reproducer",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a crash run directory (results/crash-...)")
    p.add_argument("state", metavar="STATE",
                   help="a failing state POINT/VARIANT of that run, e.g. 41/prefix or 57/lying:1234")
    form = p.add_mutually_exclusive_group(required=True)
    form.add_argument("--script", metavar="OUT.sh",
                      help="write a standalone shell reproducer here, and the state's image "
                           "beside it (OUT.img.gz)")
    form.add_argument("--fstests", metavar="DIR",
                      help="write an fstests test into this fstests checkout (prefix states at "
                           "a mark only)")
    form.add_argument("--report", metavar="DIR",
                      help="write a bug report folder: report.md in the form a filesystem's "
                           "list takes, the fstests tests in both forms, the workload, and "
                           "--cause and --fix when given")
    rep = p.add_argument_group("bug reports (--report)")
    rep.add_argument("--also", action="append", default=[], metavar="RUN_DIR",
                     help="another crash run of the same workload and target, on another "
                          "kernel: its verdict goes into the report's table of kernels "
                          "(repeatable)")
    rep.add_argument("--cause", metavar="FILE",
                     help="the cause, in Markdown, with the kernel functions cited (default: "
                          "the known-behaviour entry that explained the state, if any)")
    rep.add_argument("--fix", metavar="FILE", help="a candidate fix, copied as fix.patch")
    rep.add_argument("--report-test-name", metavar="DIR/NUM",
                     help="the first fstests test's name (default: FS/999 for ext4, xfs, "
                          "btrfs and f2fs, else generic/999; the second form takes the next)")
    rep.add_argument("--run-fstests", metavar="CHECKOUT",
                     help="run the report's fstests tests in a guest against this built "
                          "fstests checkout, on the kernel the machine options name, and keep "
                          "their verdicts and output in the report")
    add_machine_options(p)
    p.add_argument("--test-name", default=DEFAULT_TEST_NAME, metavar="DIR/NUM",
                   help=f"the fstests test to write (default: {DEFAULT_TEST_NAME})")
    p.add_argument("--form", choices=("both", "log-writes", "flakey"), default="both",
                   help="with --fstests or --report: the dm-log-writes form, the dm-flakey form (the "
                        "workload up to the mark's durability op, _flakey_drop_and_remount, "
                        "the checks), or both where the state allows (default: both)")
    p.add_argument("--flakey-test-name", metavar="DIR/NUM",
                   help="the dm-flakey test to write (default: the test after --test-name)")
    p.add_argument("--force", action="store_true", help="replace outputs that already exist")
    p.set_defaults(func=cmd_export)
