"""A crash run's directory: every file the run makes or reads back, in one place.

``framework.core.rundir`` spells the file names; this class knows where each
one of a crash run is while the run goes on and once it is over, reads the
oracle once per run, keeps what a resumed run may reuse, and leaves the
recorded logs and the first failing states' images beside the results. The
results file itself has its own reader and writer (``crashcases.crash.results``).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crashcases.check import CheckResult
from crashcases.crash.guest import parse_results
from crashcases.crash.plan import CrashPlan, CrashRunResult, load_plan
from crashcases.crash.points import (
    CrashPoint,
    CrashState,
    DiskState,
    TwoLogs,
    Variant,
    annotate,
    build_state,
)
from crashcases.crash.results import CrashResults
from crashcases.oracle.log import OracleLog
from crashcases.vocabulary import PointKind, fails
from devicemapper.logformat import LogEntry, LogReader
from devicemapper.replay import Replayer, apply_entries
from framework.core import rundir
from framework.core.errors import ConfigError
from framework.core.files import write_atomic

log = logging.getLogger(__name__)

#: The recording guest's directory (its disks hold the logs until the run ends).
RECORDER = "vm-0"
#: The guest that checks findings again (--reruns).
RERUN = "vm-rerun"


class CrashRunDir:
    """The files of the crash run in ``path`` (``two_disks``: a journal disk recorded too)."""

    def __init__(self, path: Path, *, two_disks: bool = False) -> None:
        self.path = path
        self.two_disks = two_disks
        self._oracle: OracleLog | None = None

    # -- the recording --------------------------------------------------------

    @property
    def oracle_file(self) -> Path:
        return self.path / rundir.ORACLE

    @property
    def record_file(self) -> Path:
        """Written last by the recording: its presence says the recording is whole."""
        return self.path / rundir.RECORD

    def guest(self, n: int) -> Path:
        """Guest ``n``'s own directory: 0 records, 1 and on check."""
        return self.path / f"vm-{n}"

    @property
    def rerun_guest(self) -> Path:
        """The directory of the guest that checks findings again (--reruns)."""
        return self.path / RERUN

    def scratch(self, what: str) -> Path:
        """A directory of its own for one more guest on a finished run (``what``: recheck)."""
        return self.path / f"{what}-{uuid.uuid4().hex[:6]}"

    def recording_logs(self) -> dict[str, Path]:
        """The logs, by the name of the disk that holds them, where the recording guest
        keeps them until the run ends."""
        names = {"log": rundir.LOG}
        if self.two_disks:
            names["journal-log"] = rundir.JOURNAL_LOG
        return {disk: self.path / rundir.RECORDING_DISKS / name for disk, name in names.items()}

    @property
    def log_path(self) -> Path:
        return self.recording_logs()["log"]

    def verified_logs(self) -> dict[str, Path]:
        """The logs of a run that recorded, by disk name, wherever they are now, after
        checking they still hold what was recorded (rundir.verified_log)."""
        return {disk: rundir.verified_log(self.path, path.name)
                for disk, path in self.recording_logs().items()}

    def oracle(self) -> OracleLog:
        """The run's oracle, read from its file the first time it is asked for."""
        if self._oracle is None:
            self._oracle = OracleLog.load(self.oracle_file)
        return self._oracle

    def write_record(self, info: dict[str, Any]) -> None:
        """What the recording reported, with what each log holds (so that a later recheck,
        export or --resume can tell a damaged or replaced log from the recorded one)."""
        for path in self.recording_logs().values():
            info[path.name + rundir.DIGEST_SUFFIX] = rundir.content_digest(path)
        rundir.write_json_atomic(self.record_file, info)

    def saved_record(self) -> dict[str, Any] | None:
        """The whole recording an interrupted run left (its info), or None: record again."""
        logs = self.recording_logs()
        for path in logs.values():
            kept = self.path / path.name
            if kept.exists() and not path.exists():  # killed while keeping artifacts
                path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(kept, path)
        if not (all(p.exists() for p in logs.values()) and self.oracle_file.exists()
                and self.record_file.exists()):
            return None
        info = rundir.read_json_object(self.record_file, "recording's summary")
        for path in logs.values():
            rundir.verified_log(self.path, path.name)
        return info

    def forget_recording(self) -> None:
        """Before a new recording: results of another recording mean nothing here."""
        for stale in (self.path / rundir.HARVEST, self.path / rundir.RESULTS):
            stale.unlink(missing_ok=True)
        shutil.rmtree(self.guest(0), ignore_errors=True)

    # -- resuming -------------------------------------------------------------

    def harvest(self) -> dict[str, CheckResult]:
        """Every state result an interrupted run left on disk (by key), gathered into one file.

        The guests append a line per state to their results files, so a run killed with
        SIGKILL still has everything its guests finished; results.json holds what an
        interrupted run saved. Guest directories are cleared for the guests to come."""
        found: dict[str, CheckResult] = {}
        if (self.path / rundir.RESULTS).exists():
            try:
                found = {s.key: s.result for s in CrashResults.read(self.path).checked()
                         if s.result is not None}
            except ConfigError as exc:
                log.warning("%s; its results are checked again", exc)
        harvest = self.path / rundir.HARVEST
        for path in (harvest, *sorted(self.path.glob(f"vm-*/{rundir.GUEST_RESULTS}"))):
            for r in parse_results(path):
                found[r.key] = r
        write_atomic(harvest, "".join(json.dumps(r.to_dict(), sort_keys=True) + "\n"
                                      for r in found.values()))
        for vm in self.path.glob("vm-*"):
            if vm == self.guest(0):  # the recording's disks, the log among them
                for name in (rundir.GUEST_RESULTS, rundir.ORACLE):
                    (vm / name).unlink(missing_ok=True)
            else:
                shutil.rmtree(vm, ignore_errors=True)
        return found

    # -- the end --------------------------------------------------------------

    def keep(self, result: CrashRunResult, entries: list[LogEntry],
             sizes: dict[str, int]) -> list[tuple[Path, str]]:
        """Keep the logs beside the results and images of the first failing states; list
        them (path, kind) and clear the guests' directories."""
        kept = []
        for disk, path in self.recording_logs().items():
            final = self.path / path.name
            if path.exists():
                os.replace(path, final)
            kept.append((final, disk))
        for vm in self.path.glob("vm-*"):
            shutil.rmtree(vm, ignore_errors=True)
        target = result.plan.spec
        failing = [s for s in result.states
                   if s.key in result.results and fails(result.results[s.key].outcome, target)]
        final_log = self.path / rundir.LOG
        for state in failing[: result.plan.max_images]:
            image = self.path / rundir.state_image(state.key)
            write_image(final_log, entries, state, image, sizes["data"])
            kept.append((image, "crash-image"))
            if state.journal is not None:
                journal_log = self.path / rundir.JOURNAL_LOG
                jimage = self.path / rundir.state_image(state.key, "journal")
                with LogReader(journal_log) as reader:
                    jentries = list(reader)
                write_image(journal_log, jentries, state.journal, jimage, sizes["journal"])
                kept.append((jimage, "crash-image"))
        return kept


def write_image(log_path: Path, entries: Sequence[LogEntry], state: CrashState | DiskState,
                out: Path, size_bytes: int) -> None:
    """The crash state (or a two-disk state's journal disk) as a gzip-compressed raw image
    (the bytes before mount)."""
    raw = out.with_suffix("")
    with open(raw, "wb") as f:
        f.truncate(size_bytes)
    with Replayer(log_path, raw) as rep:
        if state.base >= 0:
            rep.replay_to(state.base)
    if state.extra:
        with LogReader(log_path) as reader:
            fd = os.open(raw, os.O_RDWR)
            try:
                torn = {k: range(*v) for k, v in state.torn.items()}
                apply_entries([entries[i] for i in state.extra], reader, fd, torn=torn)
            finally:
                os.close(fd)
    with open(raw, "rb") as src, gzip.open(out, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    raw.unlink()


def load_state(run_dir: Path, key: str) -> tuple[CrashPlan, CrashState]:
    """Rebuild a state of an earlier run from its key (``POINT/VARIANT``)."""
    plan = load_plan(run_dir)
    point_text, sep, variant_text = key.partition("/")
    if not sep or not point_text.isdigit():
        raise ConfigError(f"state {key!r}: expected POINT/VARIANT, e.g. 120/prefix or 120/subset:77")
    variant = Variant.parse(variant_text)
    files = CrashRunDir(run_dir, two_disks=plan.spec.needs_journal_disk)
    logs = files.verified_logs()
    marks = files.oracle().marks
    with LogReader(logs["log"]) as reader:
        entries = list(reader)
    index = int(point_text)
    if index >= len(entries):
        raise ConfigError(f"state {key!r}: the log has only {len(entries)} entries")
    point: CrashPoint = annotate(entries, [(index, PointKind.SAMPLE)], set(marks))[0]
    if files.two_disks:
        with LogReader(logs["journal-log"]) as reader:
            journal_entries = list(reader)
        state, why = TwoLogs(entries, journal_entries, marks).state(point, variant)
        if state is None and why is not None:
            raise ConfigError(f"state {key!r}: not explored in a two-disk run: {why.value}")
    else:
        if variant.on_journal:
            raise ConfigError(f"state {key!r}: target {plan.target} has no journal disk")
        state = build_state(entries, point, variant, marks)
    if state is None:
        raise ConfigError(f"state {key!r}: this variant does not exist at that point")
    return plan, state
