"""Failing states grouped into distinct findings, the unit a maintainer acts on.

A crash run that fails hundreds of states usually shows a handful of bugs,
each reached from many crash points and many workload sequences. States
group by a *signature*:

- the filesystem;
- the kind of broken promise: a missing name, old data, zeros, a size, a link
  count, an unexpected name, a type, a symlink target, an xattr, an identity,
  an I/O error, or no finding but an unmountable state, an fsck error or a hang;
- the durability operation that made the promise (fsync, fdatasync, sync,
  directory fsync, ...);
- the operations since the durable point before it, by kind and with their
  names normalised: the packing namespace (``s0017/``) dropped and every name
  replaced by its place of first appearance (``n1``, ``n2/n3``), sizes and
  offsets left out, so that the same sequence on other files, sizes or
  sequence numbers is one finding.

The finding whose promise is the earliest stands for a state with several
(the first broken promise is the cause the others follow from). Each group
keeps its states and a representative: the state whose workload is the
shortest up to its crash point, then the earliest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashcases.check import CheckResult
from crashcases.oracle.finding import Broken, Finding
from crashcases.oracle.log import OracleLog
from crashcases.vocabulary import Outcome, Rate
from crashcases.workload.ops import Op, Workload

#: The kind of broken promise of each Broken, in the words maintainers use.
PROMISE_KINDS = {
    Broken.MISSING: "missing name",
    Broken.SIZE_BELOW: "size",
    Broken.SIZE_ABOVE: "size",
    Broken.VERSIONS: "old data",
    Broken.OTHER_FILE: "other file's data",
    Broken.PRESENT: "unexpected name",
    Broken.LATE: "unexpected name",
    Broken.NEVER_MADE: "unexpected name",
    Broken.TYPE: "wrong type",
    Broken.TARGET: "symlink target",
    Broken.XATTR: "xattr",
    Broken.ATTR: "attribute",
    Broken.NLINK: "link count",
    Broken.ONE_INODE: "identity",
    Broken.MANY_INODES: "identity",
    Broken.IO: "io error",
}


#: The durability op of a signature made without the run's workload and oracle (a state
#: stored before signatures were kept, whose run directory is gone): by kind alone.
BY_KIND = "?"


@dataclass(frozen=True, slots=True)
class Signature:
    fstype: str
    promise: str  # the kind of broken promise (PROMISE_KINDS, or unmountable/fsck error/hang)
    durability: str  # the op that made the promise ("" when none is known)
    ops: tuple[str, ...]  # the ops since the durable point before it, normalised

    def words(self) -> str:
        if self.durability == BY_KIND:
            return f"{self.fstype}: {self.promise} (by kind alone: stored without its operations)"
        since = "; ".join(self.ops) if self.ops else "nothing"
        return f"{self.fstype}: {self.promise} after {self.durability or 'no durability op'} (ops since the durable point before: {since})"

    def to_dict(self) -> dict[str, Any]:
        return {"fstype": self.fstype, "promise": self.promise, "durability": self.durability,
                "ops": list(self.ops)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Signature:
        return cls(str(d["fstype"]), str(d["promise"]), str(d.get("durability") or ""),
                   tuple(str(op) for op in d.get("ops") or ()))


@dataclass(slots=True)
class FindingGroup:
    """One distinct finding: its signature, its states (in run order), its representative."""

    signature: Signature
    states: list[str] = field(default_factory=list)
    representative: str = ""
    explanation: str = ""  # the representative's, in words
    #: workload ops up to the representative's crash point (how short its reproducer is)
    length: int = 0
    #: How often the representative failed when checked again (None: it was not).
    rate: Rate | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"signature": self.signature.to_dict(), "words": self.signature.words(),
                "states": list(self.states), "representative": self.representative,
                "explanation": self.explanation,
                "fails": self.rate.to_dict() if self.rate is not None else None}


def normalise(ops: Iterable[Op]) -> tuple[str, ...]:
    """``ops`` by kind with their names replaced by their place of first appearance."""
    names: dict[str, str] = {}

    def name(path: str) -> str:
        if not path:
            return "."
        parts = path.split("/")
        if parts[0].startswith("s") and parts[0][1:].isdigit():
            parts = parts[1:]  # the packing namespace: one sequence of many
            if not parts:
                return "."
        out = []
        for part in parts:
            out.append(names.setdefault(part, f"n{len(names) + 1}"))
        return "/".join(out)

    words = []
    for op in ops:
        text = f"{op.kind} {name(op.path)}"
        if op.dst:
            text += f" {name(op.dst)}"
        if op.kind.value == "fallocate":
            text += f" {op.falloc}"
        words.append(text)
    return tuple(words)


class Grouper:
    """Signatures of one run's failing states (one workload, one oracle)."""

    def __init__(self, fstype: str, workload: Workload, oracle: OracleLog) -> None:
        self.fstype, self.workload, self.oracle = fstype, workload, oracle

    def _span(self, mark: str | None) -> tuple[str, tuple[Op, ...]]:
        """The durability op of ``mark`` and the ops from the durable point before it."""
        if mark is None:
            return "", ()
        try:
            k = self.oracle.mark_index(mark)
        except Exception:  # a mark this oracle does not have: by kind alone
            return "", ()
        records = self.oracle.mark_records
        first = records[k - 1].op + 1 if k > 0 else 0
        ops = tuple(op for i, op in enumerate(self.workload.ops[first:records[k].op + 1], first)
                    if i not in self.oracle.skipped)
        return records[k].kind, ops

    def signature(self, result: CheckResult, last_mark: str | None) -> Signature:
        first = primary(result.findings)
        # A block of another file's data breaks no promise: its shape is the ops before the
        # crash point, as for a state that does not mount.
        mark = last_mark if first is None or first.broken is Broken.OTHER_FILE else first.mark
        durability, ops = self._span(mark)
        return Signature(self.fstype, promise_kind(result.outcome, first), durability,
                         normalise(ops))

    def length(self, last_mark: str | None) -> int:
        """Workload ops up to the crash point at ``last_mark`` (the whole run without one)."""
        if last_mark is None:
            return 0
        try:
            return self.oracle.mark_records[self.oracle.mark_index(last_mark)].op + 1
        except Exception:
            return len(self.workload.ops)


def primary(findings: Sequence[dict[str, Any]]) -> Finding | None:
    """The finding that stands for a state: the one whose promise is the earliest."""
    parsed = [Finding.from_dict(f) for f in findings]
    promised = [f for f in parsed if f.mark is not None and f.op is not None]
    if promised:
        return min(promised, key=lambda f: (f.op or 0, f.path))
    return parsed[0] if parsed else None


def promise_kind(outcome: Outcome | str, finding: Finding | None) -> str:
    """The kind of broken promise of a state whose primary finding is ``finding`` (None:
    it has none, so what failed is the mount, fsck or a deadline)."""
    if finding is None:
        return {Outcome.UNMOUNTABLE: "unmountable", Outcome.HANG: "hang"}.get(
            Outcome(outcome), "fsck error")
    if finding.broken is Broken.BLOCK:
        return "zeros" if finding.found == "zeros" else "old data"
    if finding.broken is None:
        return finding.kind.value
    return PROMISE_KINDS[finding.broken]


def signature_by_kind(fstype: str, outcome: Outcome | str,
                      findings: Sequence[dict[str, Any]]) -> Signature:
    """A state's signature from its outcome and findings alone (see BY_KIND)."""
    return Signature(fstype, promise_kind(outcome, primary(findings)), BY_KIND, ())


def group_states(states: Sequence[tuple[str, str | None, CheckResult]],
                 signature: Callable[[CheckResult, str | None], Signature],
                 length: Callable[[str | None], int]) -> list[FindingGroup]:
    """``states`` (key, last mark, result; in run order, failing only) by signature, the
    group with the most states first."""
    return group_signed([(key, signature(result, mark), length(mark), result.explanation)
                         for key, mark, result in states])


def group_signed(states: Sequence[tuple[str, Signature, int, str]]) -> list[FindingGroup]:
    """``states`` already signed (key, signature, ops up to the crash point, explanation; in
    run order) by signature, the group with the most states first. Reports group the
    signatures the store kept this way."""
    groups: dict[Signature, FindingGroup] = {}
    for key, sig, n, explanation in states:
        group = groups.setdefault(sig, FindingGroup(sig))
        group.states.append(key)
        if not group.representative or n < group.length:
            group.representative, group.length = key, n
            group.explanation = explanation
    return sorted(groups.values(), key=lambda g: (-len(g.states), g.states[0]))


def findings_words(groups: Sequence[FindingGroup]) -> str:
    """"3 findings (412 states)"."""
    states = sum(len(g.states) for g in groups)
    return (f"{len(groups)} finding{'' if len(groups) == 1 else 's'} "
            f"({states} state{'' if states == 1 else 's'})")
