"""powercut's words for what a check found: outcomes, crash-point kinds, variant kinds.

An outcome is what one crash state or power-cut trial came to: ok = mounted,
kept every promise, fsck clean; recovered = kept every promise but fsck had
to repair; data-loss = broke a durability promise; corrupt = fsck could not
repair it, or reading failed; unmountable = the kernel refused it; hang =
mount, umount or fsck outlived its deadline; error = the harness could not
finish the check (a device or mount stayed busy): not a verdict on the
filesystem, and the state is checked again on a fresh guest before it is
recorded so. A crash point is where in the recorded log a crash is placed;
a variant is how the writes not yet flushed there are treated. ``fails`` is
the one definition of a failing outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from recovery.targets import Target


class Outcome(StrEnum):
    OK = "ok"
    RECOVERED = "recovered"
    DATA_LOSS = "data-loss"
    CORRUPT = "corrupt"
    UNMOUNTABLE = "unmountable"
    HANG = "hang"
    ERROR = "error"


# Worst first: a state gets the worst outcome any of its steps shows.
SEVERITY = (Outcome.ERROR, Outcome.HANG, Outcome.UNMOUNTABLE, Outcome.DATA_LOSS, Outcome.CORRUPT,
            Outcome.RECOVERED, Outcome.OK)

#: Outcomes that fail any target.
ALWAYS_FAILING = frozenset({Outcome.DATA_LOSS, Outcome.CORRUPT, Outcome.UNMOUNTABLE, Outcome.HANG})

#: How a failing state is reported when known behaviour explains every finding
#: (crashcases.known). Not an Outcome: the raw outcome is kept beside it.
KNOWN = "known"


def worst(*outcomes: Outcome) -> Outcome:
    return min(outcomes, key=SEVERITY.index)


def fails(outcome: Outcome | str, target: Target | None) -> bool:
    """Whether ``outcome`` is a failure of ``target``; every reader of results decides so.

    A journalled filesystem promises a consistent state after replay, so a
    state that needed fsck repair fails it; for a filesystem without a
    journal, repair at boot is the expected recovery (ext2's e2fsck -p). With
    no target (a stored configuration that cannot be read) a repair fails, as
    for the journalled filesystems most targets are: a reader does not hide
    what it cannot judge.
    """
    outcome = Outcome(outcome)
    return outcome in ALWAYS_FAILING or (
        outcome is Outcome.RECOVERED and (target is None or target.journalled))


class CrashPointKind(StrEnum):
    """How a crash point was chosen."""

    MARK = "mark"
    FUA = "fua"
    FLUSH = "flush"
    EVERY = "every"
    SAMPLE = "sample"


class VariantKind(StrEnum):
    """Which state is built at a crash point (see the module docstring)."""

    PREFIX = "prefix"
    SUBSET = "subset"
    TORN = "torn"
    LYING = "lying"


PointKind = CrashPointKind


@dataclass(frozen=True, slots=True)
class Rate:
    """How often a failing state failed when it was checked: ``failed`` of ``runs``
    checks, the first included. Reliable only when every check failed and there were at
    least RELIABLE_RUNS of them (fstests' runners print "Flaky NN% (f/t)" otherwise)."""

    failed: int
    runs: int

    @property
    def reliable(self) -> bool:
        return self.runs >= RELIABLE_RUNS and self.failed == self.runs

    def words(self) -> str:
        f_t = f"{self.failed}/{self.runs}"
        if self.runs <= 1:
            return f"fails {f_t} (not checked again)"
        if self.reliable:
            return f"fails {f_t}, reliable"
        if self.failed == self.runs:
            return f"fails {f_t} (reliable only at {RELIABLE_RUNS} checks or more)"
        return f"fails {f_t}, flaky {100 * self.failed // self.runs}%"

    def to_dict(self) -> dict[str, int | bool | str]:
        return {"failed": self.failed, "runs": self.runs, "reliable": self.reliable,
                "words": self.words()}


#: Checks a failing state needs, all failing, to be called reliable.
RELIABLE_RUNS = 3
