"""Reproducers filesystem developers accept: a standalone shell script and an fstests test.

A failing crash state of a run (``POINT/VARIANT`` in results.json) is turned
into one of two self-contained forms, on the host, without a guest:

- ``write_script``: a POSIX shell script plus the state's image (gzip'ed)
  beside it. The script needs only dmsetup, losetup, the filesystem's
  checker and coreutils. It attaches the image read-only to a loop device,
  puts a non-persistent dm-snapshot over it (the COW on a loop-backed
  temporary file), so journal replay at mount and fsck never change the
  image, then recovers the state as ``crashcases.check`` does (checker
  first for filesystems whose kernel does not replay a journal, a timed
  mount, a read-only fsck), and checks each broken promise of the state's
  findings with plain shell: ``test -e``, ``stat -c %s``, sha256 of 4 KiB
  blocks. One line per check, ``ok: ...`` or ``FAIL: ...``; exit 1 if any
  check fails (the finding reproduces), 0 if none does, 2 if it cannot run.
- ``write_fstests``: an fstests test in the style of its dm-log-writes
  tests (generic/455, generic/482): the workload is run again through
  ``$XFS_IO_PROG`` and coreutils on a log-writes device over dm-thin, with
  ``_log_writes_mark pc-N`` after every durability operation (the mark
  names powercut's recording uses), the log is replayed to the state's
  mark, and the same checks run; its golden output is what a filesystem
  that keeps every promise prints. Only prefix states at a mark can be
  expressed so: the other variants need the script.

The checks are computed from the run's oracle and the workload re-created
from plan.json, not from the finding's text alone: a block must hold one of
the versions the oracle allows, hashed here from the re-created data. The
script uses the workload's own bytes (``op_data``) and verifies them
against the oracle's hashes; the fstests test writes one byte pattern per
operation (``pwrite -S``), so its expected hashes come from the same model
fed with those patterns.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashcases.crash.plan import CrashPlan, validate_plan
from crashcases.crash.points import Variant
from crashcases.crash.results import load_checked
from crashcases.oracle.log import OracleError, OracleLog, data_digests
from crashcases.vocabulary import Outcome, fails
from crashcases.workload.model import FsModel
from crashcases.workload.ops import (
    Op,
    Workload,
    needs_data,
    op_data,
)
from framework.core import rundir
from framework.core.errors import ConfigError
from recovery.targets import Target

MiB = 1 << 20
#: The fstests test name used when none is given.
DEFAULT_TEST_NAME = "generic/999"
#: fstests groups of the exported test (all named in fstests' doc/group-names.txt).
FSTESTS_GROUPS = ("auto", "quick", "log", "replay", "recoveryloop", "thin")
#: ... and of the dm-flakey form (fstests' own crash tests are "auto quick log" mostly).
FLAKEY_GROUPS = ("auto", "quick", "log", "recoveryloop")


class ExportError(ConfigError):
    """A state cannot be exported as asked (names the input and what is wrong)."""


# -- the state ------------------------------------------------------------------


@dataclass(frozen=True)
class ExportState:
    """A failing crash state of a finished run and everything needed to reproduce it."""

    run_dir: Path
    key: str
    plan: CrashPlan
    target: Target
    workload: Workload
    oracle: OracleLog
    variant: Variant
    point: int
    point_kind: str
    last_mark: str | None
    result: dict[str, Any]

    @property
    def outcome(self) -> Outcome:
        return Outcome(self.result["outcome"])

    @property
    def findings(self) -> list[dict[str, Any]]:
        return list(self.result.get("findings") or ())

    @property
    def mark_index(self) -> int:
        return self.oracle.mark_index(self.last_mark)

    @property
    def window_end(self) -> int:
        """The last op whose effects may be in the state: the next mark's durability op."""
        marks = self.oracle.mark_records
        k = self.mark_index
        return marks[k + 1].op if k + 1 < len(marks) else self.oracle.n_ops - 1

    @property
    def mark_op(self) -> int:
        """The durability op the state's mark follows (-1: the state is the one after mkfs)."""
        return self.oracle.mark_records[self.mark_index].op if self.last_mark else -1

    def durability_words(self, mark: str) -> str:
        """``fsync h/data``: the durability op a mark follows."""
        try:
            rec = self.oracle.mark_records[self.oracle.mark_index(mark)]
        except OracleError:
            return "an unknown operation"
        return f"{rec.kind} {rec.path or '.'}"

    def promise_words(self, mark: str) -> str:
        """``fsync h/data at pc-1``: a mark and the durability op it follows."""
        return f"{self.durability_words(mark)} at {mark}"


RUN_FILES = (rundir.PLAN, rundir.RESULTS, rundir.ORACLE)


def load_export_state(run_dir: Path, key: str) -> ExportState:
    """Read state ``key`` of ``run_dir``; bad input is a one-line ExportError."""
    run_dir = run_dir.resolve()
    try:
        plan, row = load_checked(run_dir, key, RUN_FILES)
    except ConfigError as exc:
        raise ExportError(str(exc)) from None
    assert row.result is not None  # load_checked returns checked states only
    result = row.result.to_dict()
    valid = validate_plan(plan)
    target, workload = valid.target, valid.workload
    try:
        outcome = Outcome(result["outcome"])
    except (KeyError, ValueError):
        raise ExportError(f"state {key!r}: unreadable result in {rundir.RESULTS}") from None
    if outcome is Outcome.OK:
        raise ExportError(f"state {key!r} passed (ok): nothing to reproduce")
    if not fails(outcome, target):
        raise ExportError(f"state {key!r} is {outcome.value}, which is no failure of "
                          f"{target.name}: nothing to reproduce")
    try:
        oracle = OracleLog.load(run_dir / rundir.ORACLE)
    except OracleError as exc:
        raise ExportError(str(exc)) from None
    if oracle.n_ops != len(workload.ops):
        raise ExportError(
            f"{run_dir}: the workload re-created from plan.json has {len(workload.ops)} ops, "
            f"oracle.json recorded {oracle.n_ops}: was the case changed since the run?")
    last_mark = row.last_mark
    if last_mark is not None and last_mark not in oracle.marks:
        raise ExportError(f"state {key!r}: its mark {last_mark!r} is not in {rundir.ORACLE}")
    point_text = key.partition("/")[0]
    return ExportState(
        run_dir=run_dir, key=key, plan=plan, target=target, workload=workload, oracle=oracle,
        variant=Variant.parse(key.partition("/")[2]),
        point=int(point_text) if point_text.isdigit() else -1,
        point_kind=row.point_kind, last_mark=last_mark, result=result)


# -- the data the workload wrote ------------------------------------------------

#: What op ``index`` writes: (index, op) -> bytes.
DataSource = Callable[[int, Op], bytes]


def recorded_data(seed: int) -> DataSource:
    """The bytes the recorded workload wrote (generated from its seed)."""
    return lambda index, op: op_data(seed, index, op.length)


def pattern_byte(index: int) -> int:
    """The byte op ``index`` writes in the fstests form: never 0, so data is not a hole."""
    return index % 255 + 1


def pattern_data(index: int, op: Op) -> bytes:
    return bytes([pattern_byte(index)]) * op.length


def skipped(oracle: OracleLog, index: int) -> bool:
    """Whether the recording skipped op ``index`` (unsupported there, or made invalid by that)."""
    return index in oracle.skipped


class Contents:
    """The data of chosen inodes after each op that changed it, by re-running the model."""

    def __init__(self, state: ExportState, data: DataSource, inodes: Iterable[int], *,
                 verify: bool) -> None:
        self.state, self.data = state, data
        oracle = state.oracle
        wanted = {ino: {v.op: v for v in oracle.inodes[ino].data}
                  for ino in inodes if ino in oracle.inodes}
        self._versions: dict[tuple[int, int], bytes] = {}
        model = FsModel()
        last = max((op for versions in wanted.values() for op in versions), default=-1)
        for index, op in enumerate(state.workload.ops[: last + 1]):
            if skipped(oracle, index):
                continue
            model.apply(op, data(index, op) if needs_data(op) else b"")
            for ino, versions in wanted.items():
                if index in versions and ino in model.nodes:
                    content = bytes(model.nodes[ino].data)
                    recorded = versions[index]
                    if verify and data_digests(content, oracle.block_bytes) != recorded.blocks:
                        raise ExportError(
                            f"{state.run_dir}: the workload re-created from plan.json does not "
                            f"match oracle.json (inode {ino} after {oracle.describe_op(index)}): "
                            "was the case changed since the run?")
                    self._versions[(ino, index)] = content

    def of(self, ino: int, op: int) -> bytes:
        return self._versions[(ino, op)]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- checks -------------------------------------------------------------------

#: Where the checked tree is mounted, in both forms.
ROOT_VAR = "pc_root"


def shell_path(path: str) -> str:
    """``"$pc_root"/h/data``: a workload path under the mounted state, quoted for sh."""
    return f'"${ROOT_VAR}"' + (f"/{shlex.quote(path)}" if path else "")


