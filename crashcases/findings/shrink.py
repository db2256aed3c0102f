"""Shrinking a failing crash state to a minimal workload, by delta debugging.

A failing state ``POINT/VARIANT`` of a crash run has a *signature*: its
variant kind, its outcome, and the set of (finding kind, path) pairs of its
findings. Operations keep their paths when others are dropped, so the paths
survive reduction even though log indices and mark numbers do not.

A *candidate* is a subsequence of the run's workload (re-created from
plan.json). It is recorded and its crash states are checked in a guest with
the run's target (user targets included), crash-point strategy, per-point
count and seed, by the same engine as ``powercut crash``. Only states of
the signature's variant kind are checked: no other state can reproduce.
The candidate *reproduces* when one of those states has the same outcome
as the original and at least one finding with the same (kind, path); a
signature without findings (unmountable, hang, an fsck verdict) needs the
outcome alone. A candidate that is not a valid workload (an op the model
refuses, e.g. a write to a file the candidate never creates) or has no
durability op is *unresolved* and costs no guest.

The search: first the cheap cut (only the ops under the top-level
directories the signature's paths name and those a rename or link ties to
them, plus ``sync``), then ddmin
(Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing
Input", TSE 2002) over the op list: complements first, then subsets,
doubling the granularity when neither reproduces. Results are cached by
the tuple of op indices. The outcome is 1-minimal: dropping any one op of
it gives a candidate that passes or is unresolved.

Every candidate runs in its own directory ``shrink-*`` under the run
directory, removed once tested, except the smallest one that reproduces:
a complete crash run directory (plan.json naming ``file:.../workload.json``,
workload.json, oracle.json, log.img, results.json, and shrink.json, which
says where it came from), so ``powercut recheck DIR KEY`` rebuilds the
state that matched.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from crashcases.crash.faults import NO_FAULTS
from crashcases.crash.plan import (
    CrashPlan,
    CrashRunResult,
    MachineFactory,
    ValidatedPlan,
    reproducer_command,
    validate_plan,
)
from crashcases.crash.points import Variant, Variants
from crashcases.crash.results import load_checked
from crashcases.crash.run import run_crash, run_spec
from crashcases.vocabulary import Outcome, VariantKind, fails
from crashcases.workload.model import FsModel
from crashcases.workload.ops import DURABILITY_OPS, Op, OpKind, Workload
from framework.core import clock, rundir
from framework.core.errors import ConfigError
from framework.core.lifecycle import Run, new_run_dir
from framework.core.rundir import write_json_atomic

log = logging.getLogger(__name__)


#: What a run directory must hold to be shrunk (the log is what makes it a crash run).
RUN_FILES = (rundir.PLAN, rundir.RESULTS, rundir.LOG)
SCRATCH_KIND = "shrink"  # candidate directories are RUN_DIR/shrink-*

T = TypeVar("T")


class Verdict(StrEnum):
    """What testing one candidate showed."""

    FAIL = "reproduces"  # ddmin's "fail": the failure is still there
    PASS = "passes"
    UNRESOLVED = "unresolved"  # not a valid workload: nothing to learn, no guest spent


# -- the signature ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Signature:
    """What must still show for a candidate to reproduce the failing state."""

    variant: VariantKind
    outcome: Outcome
    findings: frozenset[tuple[str, str]]  # (finding kind, path)

    @classmethod
    def of(cls, key: str, result: dict[str, Any]) -> Signature:
        """The signature of state ``key`` from its result as results.json stores it."""
        variant = Variant.parse(key.partition("/")[2]).kind
        return cls(variant, Outcome(result["outcome"]),
                   frozenset((str(f["kind"]), str(f["path"])) for f in result.get("findings", ())))

    def matches(self, variant: VariantKind, outcome: Outcome,
                findings: Sequence[dict[str, Any]]) -> bool:
        if variant is not self.variant or outcome is not self.outcome:
            return False
        if not self.findings:
            return True
        return any((str(f["kind"]), str(f["path"])) in self.findings for f in findings)

    def match_in(self, result: CrashRunResult) -> str | None:
        """The key of the first checked state of ``result`` that matches, or None."""
        for state in result.states:
            r = result.results.get(state.key)
            if r is not None and self.matches(state.variant.kind, r.outcome, r.findings):
                return state.key
        return None

    def top_dirs(self) -> frozenset[str] | None:
        """The top-level directories the findings name; None if one names the root or none."""
        tops = {path.split("/")[0] for _, path in self.findings}
        return None if not tops or "" in tops else frozenset(tops)

    def describe(self) -> str:
        found = ", ".join(f"{kind} at {path or '.'}" for kind, path in sorted(self.findings))
        return f"{self.outcome.value} in a {self.variant.value} state" + (
            f" with {found}" if found else "")

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant.value, "outcome": self.outcome.value,
                "findings": [{"kind": k, "path": p} for k, p in sorted(self.findings)]}


@dataclass(frozen=True, slots=True)
class Failure:
    """A failing state of an earlier run, and what shrinking it starts from."""

    run_dir: Path
    key: str
    plan: CrashPlan
    signature: Signature
    workload: Workload


def load_failure(run_dir: Path, key: str) -> Failure:
    """Read the failing state ``key`` of ``run_dir``; bad input is a one-line ConfigError."""
    run_dir = run_dir.resolve()  # candidates' plans and printed reproducers need full paths
    plan, row = load_checked(run_dir, key, RUN_FILES)
    assert row.result is not None  # load_checked returns checked states only
    try:
        signature = Signature.of(key, row.result.to_dict())
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"state {key!r}: unreadable result in results.json ({exc})") from None
    if signature.outcome is Outcome.OK:
        raise ConfigError(f"state {key!r} passed (ok): only a failing state can be shrunk")
    valid = validate_plan(plan)
    target, workload = valid.target, valid.workload
    if not fails(signature.outcome, target):
        raise ConfigError(f"state {key!r} is {signature.outcome.value}, which is no failure of "
                          f"{target.name}: only a failing state can be shrunk")
    return Failure(run_dir, key, plan, signature, workload)


# -- candidates ---------------------------------------------------------------


def unresolved_reason(ops: Sequence[Op]) -> str | None:
    """Why ``ops`` cannot be tested (not a valid workload, or nothing promised), or None."""
    model = FsModel()
    for op in ops:
        problem = model.check(op)
        if problem is not None:
            return f"{op.describe()}: {problem}"
        model.apply(op, bytes(op.length))
    if not any(op.kind in DURABILITY_OPS for op in ops):
        return "no durability op: nothing is promised"
    return None


def cheap_cut(ops: Sequence[Op], signature: Signature) -> tuple[int, ...] | None:
    """Indices of the ops under the signature's top-level directories, plus every ``sync``.

    A rename or link from one top-level directory to another ties the two: a file the
    finding names may have been made, written and fsynced under another directory's name
    before it moved, so the directories it came through are kept too (to a fixed point).
    None when the signature names no such directory or the cut would keep every op.
    """
    found = signature.top_dirs()
    if found is None:
        return None
    tops = set(found)

    def top(path: str) -> str:
        return path.split("/")[0] if path else ""

    grew = True
    while grew:
        grew = False
        for op in ops:
            ends = {top(op.path), top(op.dst)} - {""}
            if len(ends) == 2 and ends & tops and not ends <= tops:
                tops |= ends
                grew = True

    def inside(path: str) -> bool:
        return bool(path) and top(path) in tops

    kept = tuple(i for i, op in enumerate(ops)
                 if op.kind is OpKind.SYNC or inside(op.path) or inside(op.dst))
    return kept if len(kept) < len(ops) else None


def _split(items: tuple[T, ...], n: int) -> list[tuple[T, ...]]:
    """``items`` in ``n`` contiguous chunks whose sizes differ by at most one."""
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def ddmin(items: Sequence[T], test: Callable[[tuple[T, ...]], Verdict]) -> tuple[T, ...]:
    """A 1-minimal subsequence of ``items`` (which must fail) for which ``test`` says FAIL.

    Zeller and Hildebrandt's ddmin, complements first: at granularity n,
    drop one of n chunks (a failing complement continues at n - 1), else
    keep one chunk alone (continues at 2), else double n; it ends when n
    exceeds the length. PASS and UNRESOLVED both mean "not this one".
    ``test`` is never called on the empty or the whole sequence.
    """
    current = tuple(items)
    n = 2
    while len(current) >= 2:
        chunks = _split(current, n)
        reduced: tuple[T, ...] | None = None
        for i in range(n):
            complement = tuple(x for j, chunk in enumerate(chunks) if j != i for x in chunk)
            if test(complement) is Verdict.FAIL:
                reduced, n = complement, max(n - 1, 2)
                break
        if reduced is None and n > 2:  # at n = 2 the chunks are the complements just tested
            for chunk in chunks:
                if test(chunk) is Verdict.FAIL:
                    reduced, n = chunk, 2
                    break
        if reduced is not None:
            current = reduced
            continue
        if n >= len(current):
            break
        n = min(2 * n, len(current))
    return current


# -- the search ---------------------------------------------------------------


@dataclass(slots=True)
class ShrinkResult:
    """The smallest reproducing workload found so far, and what finding it cost."""

    failure: Failure
    indices: tuple[int, ...]  # into the original workload's ops
    reproducer_dir: Path | None = None  # None: nothing smaller reproduced (the run itself is it)
    reproducer_key: str | None = None
    guest_runs: int = 0  # candidates recorded and checked in a guest
    unresolved: int = 0  # candidates refused without a guest
    guest_s: float = 0.0
    wall_s: float = 0.0
    minimal: bool = False  # ddmin finished: the result is 1-minimal
    interrupted: bool = False

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(self.failure.workload.ops[i] for i in self.indices)

    @property
    def reduced(self) -> bool:
        return self.reproducer_dir is not None

    @property
    def candidates(self) -> int:
        return self.guest_runs + self.unresolved

    def reproducer(self) -> str:
        if self.reproducer_dir is None or self.reproducer_key is None:
            return reproducer_command(self.failure.run_dir, self.failure.key)
        return reproducer_command(self.reproducer_dir, self.reproducer_key)

    def to_dict(self) -> dict[str, Any]:
        f = self.failure
        return {
            "run_dir": str(f.run_dir), "state": f.key, "case": f.plan.case, "target": f.plan.target,
            "signature": f.signature.to_dict(), "original_ops": len(f.workload.ops),
            "ops": [op.describe() for op in self.ops], "op_indices": list(self.indices),
            "workload": [op.to_dict() for op in self.ops],
            "reduced": self.reduced, "minimal": self.minimal, "interrupted": self.interrupted,
            "candidates": self.candidates, "guest_runs": self.guest_runs,
            "unresolved": self.unresolved, "guest_s": round(self.guest_s, 1),
            "seconds_per_guest_run": round(self.guest_s / self.guest_runs, 1) if self.guest_runs else None,
            "wall_s": round(self.wall_s, 1),
            "reproducer_dir": str(self.reproducer_dir) if self.reproducer_dir else None,
            "reproducer_state": self.reproducer_key, "reproducer": self.reproducer(),
        }


@dataclass(slots=True)
class _Tested:
    verdict: Verdict
    why: str = ""


Progress = Callable[[str], None]


@dataclass
class Shrinker:
    """Shrinks one failing state; ``result`` always holds the best found so far."""

    failure: Failure
    factory: MachineFactory
    progress: Progress = field(default=lambda line: None)
    cache: dict[tuple[int, ...], _Tested] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.result = ShrinkResult(self.failure, tuple(range(len(self.failure.workload.ops))))
        self._start = clock.monotonic()

    # -- one candidate --------------------------------------------------------

    def test(self, indices: tuple[int, ...]) -> Verdict:
        """Test the candidate made of these ops of the original workload (cached)."""
        if indices in self.cache:
            return self.cache[indices].verdict
        ops = [self.failure.workload.ops[i] for i in indices]
        why = unresolved_reason(ops)
        if why is not None:
            self.result.unresolved += 1
            self.cache[indices] = _Tested(Verdict.UNRESOLVED, why)
            log.debug("%d ops unresolved: %s", len(ops), why)
            return Verdict.UNRESOLVED
        verdict = self._in_guest(indices, ops)
        self.cache[indices] = _Tested(verdict)
        return verdict

    def _in_guest(self, indices: tuple[int, ...], ops: list[Op]) -> Verdict:
        f = self.failure
        run_dir = new_run_dir(f.run_dir, SCRATCH_KIND)
        keep = False
        start = clock.monotonic()
        try:
            workload = Workload(name=f"shrink of {f.plan.case}", seed=f.workload.seed, ops=tuple(ops))
            (run_dir / rundir.WORKLOAD).write_text(workload.to_json())
            plan = candidate_plan(f.plan, f.signature.variant, run_dir / rundir.WORKLOAD)
            crashed = self.record_and_check(plan, run_dir, workload)
            matched = f.signature.match_in(crashed)
            seconds = clock.monotonic() - start
            self.result.guest_runs += 1
            self.result.guest_s += seconds
            verdict = Verdict.FAIL if matched else Verdict.PASS
            self.progress(f"candidate {self.result.guest_runs}: {len(ops)} ops, {verdict.value}"
                          + (f" at {matched}" if matched else "") + f" ({seconds:.1f} s)")
            if matched:
                keep = True
                self._adopt(indices, run_dir, matched)
            return verdict
        finally:
            if not keep:
                shutil.rmtree(run_dir, ignore_errors=True)

    def record_and_check(self, plan: CrashPlan, run_dir: Path, workload: Workload) -> CrashRunResult:
        """Record ``workload`` and check its states as the crash run ``plan`` in ``run_dir``."""
        run = Run(run_spec(plan), run_dir, None)  # a scratch run: no row in the results store
        run.open()
        return run_crash(ValidatedPlan(plan, plan.spec, workload), run, self.factory)

    def _adopt(self, indices: tuple[int, ...], run_dir: Path, key: str) -> None:
        old = self.result.reproducer_dir
        self.result.indices, self.result.reproducer_dir, self.result.reproducer_key = \
            indices, run_dir, key
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self.save()

    def save(self) -> None:
        """Write shrink.json into the best candidate's directory (if there is one)."""
        self.result.wall_s = clock.monotonic() - self._start
        if self.result.reproducer_dir is not None:
            write_json_atomic(self.result.reproducer_dir / rundir.SHRINK, self.result.to_dict())

    # -- the search -----------------------------------------------------------

    def shrink(self) -> ShrinkResult:
        """Cheap cut, then ddmin; on Ctrl-C ``self.result`` keeps the best so far."""
        f = self.failure
        everything = self.result.indices
        self.progress(f"shrinking {f.key} of {f.run_dir}: {len(everything)} ops, "
                      f"signature: {f.signature.describe()}")
        try:
            start = everything
            cut = cheap_cut(f.workload.ops, f.signature)
            if cut is not None:
                self.progress(f"cheap cut: {len(cut)} ops under "
                              f"{', '.join(sorted(f.signature.top_dirs() or ()))} and every sync")
                if self.test(cut) is Verdict.FAIL:
                    start = cut
            ddmin(start, self.test)
            self.result.minimal = True
        except BaseException:
            self.result.interrupted = True
            raise
        finally:
            self.save()
        return self.result


def candidate_plan(plan: CrashPlan, variant: VariantKind, workload_file: Path) -> CrashPlan:
    """The plan a candidate is checked with: the original's, on the candidate's workload file,
    for the signature's variant kind only, in one guest, without crash images."""
    return replace(plan, case=f"file:{workload_file}", variants=Variants.parse((variant.value,)),
                   jobs=1, faults=NO_FAULTS, max_images=0, max_sequences=None)

