"""Recovery sweeps, driven from the host: the design of points, the run, the fitted lines.

A sweep asks how recovery time grows with four factors: the filesystem's
size, the number of files in it, the data in flight at the power cut and
the journal's size. Each point is one ``sweep-point`` task in the guest
(``crashcases.sweep.guest``): mkfs at that size, populate, write and fsync
the data in flight, cut, then time the kernel's journal replay at mount,
the checker's journal-only replay where it has one, and a forced full
fsck, each on its own.

The design crosses sizes with in-flight levels and, by default, spreads
the file counts over that grid as a cyclic Latin square (level
``(i + j) mod k``), so each file count meets each size and each in-flight
level equally often and the three main effects are orthogonal at a third
(or a k-th) of the full factorial's cost. Journal sizes, for targets whose
journal mkfs sizes, are crossed with the whole grid. Points run in a
seeded random order per target, so a drift of the emulated machine's speed
does not line up with any factor.

Per target an OLS line (``framework.core.stats.linear_fit``) of mount time
and fsck time on size (GiB), files (thousands), in-flight data (MiB) and
journal size (MiB) gives each slope with its interval.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import logging
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashcases.sweep.guest import FILE_BYTES, SWEEP_POINT, PointRequest, PointResult
from crashcases.vocabulary import Outcome
from framework.core import agent, clock, rundir
from framework.core.errors import ConfigError, PowercutError
from framework.core.lifecycle import EngineRun, Run, RunSpec, read_plan
from framework.core.machine.base import DiskSpec, Machine
from framework.core.machine.slot import GuestLost, GuestSlot, Verdict
from recovery.disks import DEFAULT_JOURNAL_BYTES, MARGIN_BYTES, MiB
from recovery.filesystems import adapter_for, tool_versions
from recovery.mount import Timeouts
from recovery.targets import Target, resolve, target_from_dict

log = logging.getLogger(__name__)


if TYPE_CHECKING:
    from framework.core import stats


MachineFactory = Callable[[Sequence[DiskSpec], Path, tuple[str, ...]], Machine]

DESIGNS = ("latin", "full")
#: Outcome of a point the harness could not run (the guest's error is in its notes).
ERROR = "error"
#: Scratch disk the checker's journal-only replay writes to (a snapshot's COW).
COW_BYTES = 256 * MiB

# Predictors of the fits, in the units the slopes are read in.
SIZE_GIB, FILES_K, DIRTY_MIB, JOURNAL_MIB = "size_gib", "files_k", "dirty_mib", "journal_mib"
PREDICTORS = (SIZE_GIB, FILES_K, DIRTY_MIB, JOURNAL_MIB)
PREDICTOR_UNITS = {SIZE_GIB: "GiB", FILES_K: "1,000 files", DIRTY_MIB: "MiB in flight",
                   JOURNAL_MIB: "MiB of journal"}
RESPONSES = ("mount_s", "fsck_s", "journal_only_s")


@dataclass(frozen=True, slots=True)
class SweepPlan:
    targets: tuple[str, ...]
    sizes_mib: tuple[int, ...] = (512, 1024, 2048)
    files: tuple[int, ...] = (500, 1000, 2000)
    dirty_mib: tuple[int, ...] = (0, 8, 32)
    #: Journal sizes for targets whose journal mkfs sizes (others: n/a).
    journal_mib: tuple[int, ...] = (64,)
    reps: int = 1
    design: str = "latin"
    seed: int = 0
    point_timeout_s: float = 600.0
    user_targets: tuple[Target, ...] = ()

    def spec(self, name: str) -> Target:
        return resolve(name, self.user_targets)


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One point of the design: ``index`` numbers it within its target (stable across runs)."""

    target: str
    index: int
    rep: int
    size_mib: int
    files: int
    dirty_mib: int
    journal_mib: int | None  # None: the target's journal is not sized (or there is none)

    @property
    def key(self) -> str:
        return f"{self.target}#{self.index}"

    def factors(self) -> dict[str, float | None]:
        return {SIZE_GIB: self.size_mib / 1024, FILES_K: self.files / 1000,
                DIRTY_MIB: float(self.dirty_mib),
                JOURNAL_MIB: None if self.journal_mib is None else float(self.journal_mib)}


@dataclass(frozen=True, slots=True)
class SweepRow:
    """A point and what became of it."""

    point: SweepPoint
    outcome: str  # an Outcome's value, or ERROR
    result: PointResult | None
    notes: tuple[str, ...] = ()

    @property
    def timed(self) -> bool:
        """Whether its timings describe a recovery that worked (fits use only these)."""
        return self.outcome in (Outcome.OK.value, Outcome.RECOVERED.value)

    def value(self, response: str) -> float | None:
        return None if self.result is None else getattr(self.result, response)

    def fit_row(self) -> dict[str, float | None]:
        return {**self.point.factors(), **{r: self.value(r) for r in RESPONSES}}

    def to_dict(self) -> dict[str, Any]:
        return {"point": asdict(self.point), "outcome": self.outcome,
                "result": self.result.to_dict() if self.result is not None else None,
                "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SweepRow:
        result = raw.get("result")
        return cls(SweepPoint(**raw["point"]), str(raw["outcome"]),
                   PointResult.from_dict(result) if result is not None else None,
                   tuple(raw.get("notes", ())))


# --- the design ------------------------------------------------------------------


def grid(sizes: Sequence[int], files: Sequence[int], dirty: Sequence[int],
         design: str) -> list[tuple[int, int, int]]:
    """(size, files, dirty) cells: ``full`` crosses all three; ``latin`` crosses sizes with
    dirty levels and gives cell (i, j) the file count number (i + j) mod k.

    The cyclic square is balanced (each file count equally often in every row and
    every column) only when k divides both the number of sizes and of dirty levels."""
    if design == "full":
        return list(itertools.product(sizes, files, dirty))
    if design != "latin":
        raise ConfigError(f"--design {design!r}: expected one of {', '.join(DESIGNS)}")
    k = len(files)
    if len(sizes) % k or len(dirty) % k:
        raise ConfigError(
            f"--design latin: {k} file counts cannot be balanced over {len(sizes)} sizes x "
            f"{len(dirty)} dirty levels (the count must divide both); give {len(sizes)} or "
            f"1 file counts, or --design full")
    return [(s, files[(i + j) % k], d) for i, s in enumerate(sizes) for j, d in enumerate(dirty)]


def journal_levels(plan: SweepPlan, target: Target) -> tuple[int | None, ...]:
    """The journal sizes ``target`` is swept over: the plan's where mkfs sizes its journal."""
    if target.journalled and adapter_for(target.fstype).journal_sizable and plan.journal_mib:
        return plan.journal_mib
    return (None,)


def design_points(plan: SweepPlan, targets: Sequence[Target]) -> list[SweepPoint]:
    """Every point of the sweep, target by target, each target's in a seeded random order."""
    cells = grid(plan.sizes_mib, plan.files, plan.dirty_mib, plan.design)
    out: list[SweepPoint] = []
    for target in targets:
        points = [SweepPoint(target.name, 0, rep, size, files, dirty, journal)
                  for rep in range(plan.reps)
                  for journal in journal_levels(plan, target)
                  for size, files, dirty in cells]
        points = [SweepPoint(p.target, i, p.rep, p.size_mib, p.files, p.dirty_mib, p.journal_mib)
                  for i, p in enumerate(points)]
        random.Random(f"powercut-sweep:{plan.seed}:{target.name}").shuffle(points)
        out += points
    return out


def _positive(values: Sequence[int], option: str, *, zero: bool = False) -> None:
    if not values:
        raise ConfigError(f"{option}: give at least one value")
    for v in values:
        if v < 0 or (v == 0 and not zero):
            raise ConfigError(f"{option}: {v} is not a {'non-negative' if zero else 'positive'} "
                              "number")
    if len(set(values)) != len(values):
        raise ConfigError(f"{option}: a level is given twice ({', '.join(map(str, values))})")


def validate_sweep_plan(plan: SweepPlan) -> list[Target]:
    """Fail on bad options before anything is created or a guest boots."""
    if not plan.targets:
        raise ConfigError("name a target (--target NAME)")
    _positive(plan.sizes_mib, "--sizes")
    _positive(plan.files, "--files", zero=True)
    _positive(plan.dirty_mib, "--dirty", zero=True)
    if plan.journal_mib:
        _positive(plan.journal_mib, "--journal-sizes")
    if plan.reps < 1:
        raise ConfigError(f"--reps must be at least 1, got {plan.reps}")
    if plan.point_timeout_s <= 0:
        raise ConfigError(f"--point-timeout must be positive, got {plan.point_timeout_s:g}")
    grid(plan.sizes_mib, plan.files, plan.dirty_mib, plan.design)
    targets = [plan.spec(name) for name in plan.targets]
    smallest = min(plan.sizes_mib)
    for target in targets:
        adapter = adapter_for(target.fstype)
        if target.disk_profiles:
            # Refused rather than ignored: plain disks would be timed as if they were the
            # profiled devices.
            raise ConfigError(f"the sweep cannot do {target.name} yet: it does not apply device "
                              "profiles (disk_profiles); use a target without them")
        if not adapter.mount_replays_journal:
            raise ConfigError(f"the sweep cannot do {target.name}: its kernel does not replay the "
                              "journal at mount (the checker does), so there is no mount to time")
        if smallest * MiB < adapter.min_size_bytes:
            need = -(-adapter.min_size_bytes // MiB)
            raise ConfigError(f"--sizes {smallest}: {target.name} needs at least {need} MiB "
                              f"({target.fstype}'s mkfs refuses less)")
        for journal in journal_levels(plan, target):
            if journal is None:
                continue
            if journal * MiB < adapter.min_journal_size_bytes:
                raise ConfigError(f"--journal-sizes {journal}: {target.name} needs at least "
                                  f"{adapter.min_journal_size_bytes // MiB} MiB of journal")
            if not target.needs_journal_disk and journal * 4 >= smallest:
                raise ConfigError(f"--journal-sizes {journal}: an internal journal must stay "
                                  f"under a quarter of the smallest size ({smallest} MiB)")
    # Populated files take a block and an inode each; leave the filesystem half free.
    need_mib = (max(plan.files) * 2 * FILE_BYTES) // MiB + max(plan.dirty_mib)
    if need_mib * 2 > smallest:
        raise ConfigError(f"--sizes {smallest}: {max(plan.files)} files and "
                          f"{max(plan.dirty_mib)} MiB in flight need about {need_mib} MiB; "
                          f"give sizes of at least {need_mib * 2} MiB")
    return targets


def disk_specs(plan: SweepPlan, targets: Sequence[Target]) -> list[DiskSpec]:
    """One data disk for the largest size (each point uses a prefix), a journal disk for
    external journals, and the scratch disks the checker's journal-only replay writes to."""
    disks = [DiskSpec("data", max(plan.sizes_mib) * MiB + MARGIN_BYTES)]
    journals = [j for t in targets for j in journal_levels(plan, t) if j is not None]
    external = [t for t in targets if t.needs_journal_disk]
    if external:
        size = max([DEFAULT_JOURNAL_BYTES, *(j * MiB + MARGIN_BYTES for j in journals),
                    *(adapter_for(t.fstype).min_journal_size_bytes + MARGIN_BYTES
                      for t in external)])
        disks.append(DiskSpec("journal", size))
    replaying = [t for t in targets
                 if t.journalled and adapter_for(t.fstype).journal_only_argv("dev") is not None]
    if replaying:
        cow = max([COW_BYTES, *(j * MiB + COW_BYTES for j in journals)])
        disks.append(DiskSpec("cow", cow))
        if any(t.needs_journal_disk for t in replaying):
            disks.append(DiskSpec("cow-journal", max(cow, disks[1].size_bytes)))
    return disks


# --- the run -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TargetFit:
    """A target's fitted lines: one per response that has timings."""

    target: str
    fits: tuple[stats.LinearFit, ...]


@dataclass
class SweepResult(EngineRun[SweepPlan]):
    rows: list[SweepRow] = field(default_factory=list)

    def for_target(self, target: str) -> list[SweepRow]:
        return sorted((r for r in self.rows if r.point.target == target),
                      key=lambda r: r.point.index)

    def fits(self, level: float = 0.95) -> list[TargetFit]:
        return [TargetFit(t, fit_target(self.for_target(t), level)) for t in self.plan.targets]

    def to_dict(self) -> dict[str, Any]:
        plan = asdict(self.plan)
        plan["user_targets"] = [t.to_dict() for t in self.plan.user_targets]
        return {"run_dir": os.fspath(self.run_dir), "plan": plan, "run_id": self.run_id,
                "replacements": self.replacements, "wall_s": self.wall_s,
                "rows": [r.to_dict() for r in self.rows],
                "fits": [fit_to_dict(f) for f in self.fits()]}


def fit_target(rows: Sequence[SweepRow], level: float = 0.95) -> tuple[stats.LinearFit, ...]:
    """Mount time and fsck time (and the checker's journal-only replay, where timed) on the
    factors, over the points whose recovery worked."""
    from framework.core.stats import linear_fit  # numpy, scipy: only a fit pays for them

    timed = [r.fit_row() for r in rows if r.timed]
    fits = []
    for response in RESPONSES:
        if response == "journal_only_s" and not any(r[response] is not None for r in timed):
            continue
        predictors = [p for p in PREDICTORS if any(r[p] is not None for r in timed)]
        fits.append(linear_fit(timed, response, predictors, level))
    return tuple(fits)


def fit_to_dict(tf: TargetFit) -> dict[str, Any]:
    return {"target": tf.target, "fits": [
        {"response": f.response, "n": f.n, "reason": f.reason, "r_squared": f.r_squared,
         "intercept": f.intercept, "dropped": list(f.dropped),
         "slopes": {s.predictor: {"estimate": s.estimate, "low": s.interval.low,
                                  "high": s.interval.high, "level": s.interval.level,
                                  "p_value": s.p_value} for s in f.slopes}}
        for f in tf.fits]}


CSV_COLUMNS = ("target", "index", "rep", "size_mib", "files", "dirty_mib", "journal_mib",
               "outcome", "mount_s", "fsck_s", "journal_only_s", "fsck_verdict", "mkfs_s",
               "populate_s", "dirty_s", "replayed", "notes")


def rows_csv(rows: Sequence[SweepRow]) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(CSV_COLUMNS)
    for r in rows:
        p, res = r.point, r.result
        w.writerow([p.target, p.index, p.rep, p.size_mib, p.files, p.dirty_mib,
                    "" if p.journal_mib is None else p.journal_mib, r.outcome,
                    *("" if res is None or getattr(res, c) is None else f"{getattr(res, c):.4f}"
                      for c in ("mount_s", "fsck_s", "journal_only_s")),
                    "" if res is None else res.fsck_verdict or "",
                    *("" if res is None else f"{getattr(res, c):.4f}"
                      for c in ("mkfs_s", "populate_s", "dirty_s")),
                    "" if res is None else int(bool(res.replay_messages)),
                    "; ".join(r.notes)])
    return out.getvalue()


class SweepEngine:
    """Boots one guest for the sweep, runs each point, replaces a guest that hung."""

    def __init__(self, plan: SweepPlan, run_dir: Path, factory: MachineFactory,
                 targets: Sequence[Target], *, guest_module: str = agent.GUEST_MODULE) -> None:
        self.plan, self.run_dir, self.factory = plan, run_dir, factory
        # The guest program that serves the points (any that offers SWEEP_POINT).
        self.guest_module = guest_module
        self.by_name = {t.name: t for t in targets}
        self.disks = disk_specs(plan, targets)
        self.disk_names = {d.name for d in self.disks}
        self.fstypes = tuple(dict.fromkeys(t.fstype for t in targets))
        self.vm_dir = run_dir / "vm"
        self.slot = GuestSlot(lambda: self.factory(self.disks, self.vm_dir, self.fstypes),
                              name="sweep guest")

    @property
    def replacements(self) -> int:
        return self.slot.replacements

    def close(self) -> None:
        self.slot.close()

    def request(self, machine: Machine, point: SweepPoint) -> PointRequest:
        base = self.by_name[point.target]
        target = replace(base, journal_size_mib=point.journal_mib or base.journal_size_mib)
        external = target.needs_journal_disk
        budget = self.plan.point_timeout_s * 0.8
        return PointRequest(
            target, key=point.key, data_dev=machine.disk("data"), size_mib=point.size_mib,
            files=point.files, dirty_mib=point.dirty_mib, seed=self.plan.seed,
            journal_dev=machine.disk("journal") if external else None,
            cow_dev=machine.disk("cow") if "cow" in self.disk_names else None,
            cow_journal_dev=(machine.disk("cow-journal")
                             if external and "cow-journal" in self.disk_names else None),
            timeouts=Timeouts.within(budget, shares=4))

    def run_point(self, point: SweepPoint) -> SweepRow:
        losses: list[GuestLost] = []
        while True:
            try:
                result = self.slot.perform(
                    SWEEP_POINT, lambda machine: self.request(machine, point),
                    module=self.guest_module, timeout_s=self.plan.point_timeout_s)
                break
            except GuestLost as exc:
                # Stuck in the kernel, or a guest that stopped answering: a finding; a guest
                # that died (killed from outside, a kernel panic) or met a device that stayed
                # busy is replaced and the point measured again, as the slot's policy says
                # (framework.core.machine.slot). Nothing in a lost guest is trusted after it.
                log.warning("sweep point %s: %s", point.key, exc)
                verdict = self.slot.lost(exc, losses)
                if verdict is Verdict.AGAIN:
                    continue
                return SweepRow(point, Outcome.HANG.value if verdict is Verdict.HANG else ERROR,
                                None, (str(exc),))
            except PowercutError as exc:
                # The point could not be made (mkfs refused it, a tool failed): reported,
                # not timed; the guest cleaned up after itself and goes on with the next.
                log.warning("sweep point %s failed: %s", point.key, exc)
                return SweepRow(point, ERROR, None, (str(exc),))
        return SweepRow(point, result.outcome.value, result, result.notes)


def store_row(run: Run, row: SweepRow) -> None:
    if run.store is None or run.run_id is None:
        return
    p, res = row.point, row.result
    run.store.add_sweep_point(
        run.run_id, p.target, point=p.index, rep=p.rep, size_mib=p.size_mib, files=p.files,
        dirty_mib=p.dirty_mib, journal_mib=p.journal_mib, outcome=row.outcome,
        mount_s=res.mount_s if res else None, fsck_s=res.fsck_s if res else None,
        journal_only_s=res.journal_only_s if res else None,
        replay_messages=res.replay_messages if res else (),
        details={**(res.to_dict() if res else {}), "notes": list(row.notes)})


def run_spec(plan: SweepPlan) -> RunSpec:
    """How a sweep of ``plan`` is recorded: each target with its whole configuration."""
    plan_doc = asdict(plan)
    plan_doc["user_targets"] = [t.to_dict() for t in plan.user_targets]
    return RunSpec("sweep", f"sweep {' '.join(plan.targets)}", plan=plan_doc,
                   seeds={"sweep": plan.seed},
                   targets={t: plan.spec(t).to_dict() for t in plan.targets},
                   tool_versions=tool_versions(plan.spec(t).fstype for t in plan.targets))


def load_sweep_plan(run_dir: Path) -> SweepPlan:
    """The plan of an earlier sweep (its plan.json), user targets included."""
    raw = read_plan(run_dir, "sweep")
    try:
        for key in ("targets", "sizes_mib", "files", "dirty_mib", "journal_mib"):
            raw[key] = tuple(raw[key])
        raw["user_targets"] = tuple(target_from_dict(t) for t in raw.get("user_targets", ()))
        return SweepPlan(**raw)
    except (TypeError, KeyError, ValueError) as exc:
        raise ConfigError(f"{run_dir / rundir.PLAN}: not a sweep plan ({exc})") from None


def earlier_rows(run_dir: Path) -> dict[str, SweepRow]:
    """The points an interrupted sweep saved in its results.json, by key."""
    if not (run_dir / rundir.RESULTS).exists():
        return {}
    try:
        rows = [SweepRow.from_dict(r)
                for r in rundir.read_results(run_dir, "sweep's results")["rows"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{run_dir / rundir.RESULTS}: not a sweep's results ({exc})") from None
    return {r.point.key: r for r in rows}


def run_sweep(plan: SweepPlan, run: Run, factory: MachineFactory, *,
              progress: Callable[[SweepRow], None] | None = None,
              targets: Sequence[Target] | None = None, resume: bool = False,
              guest_module: str = agent.GUEST_MODULE) -> SweepResult:
    """Every point of ``plan`` inside ``run``; each is stored and saved as soon as it is known.

    ``guest_module``: the guest program that serves the points. ``resume``: ``run`` is an interrupted sweep reopened; the points its results.json
    holds are kept and the others are run."""
    start = clock.monotonic()
    targets = list(targets) if targets is not None else validate_sweep_plan(plan)
    result = SweepResult(run.run_dir, plan, run_id=run.run_id)
    earlier = earlier_rows(run.run_dir) if resume else {}

    def booted(disks: Sequence[DiskSpec], rundir: Path, fstypes: tuple[str, ...]) -> Machine:
        return run.started(factory(disks, rundir, fstypes))

    engine = SweepEngine(plan, run.run_dir, booted, targets, guest_module=guest_module)
    try:
        for point in design_points(plan, targets):
            row = earlier.get(point.key)
            if row is None:
                row = engine.run_point(point)
                store_row(run, row)
            result.rows.append(row)
            run.save_results(result.to_dict())
            if progress is not None:
                progress(row)
        return result
    finally:
        result.replacements = engine.replacements
        engine.close()
        result.wall_s = clock.monotonic() - start
        with contextlib.suppress(PowercutError, OSError):
            run.save_results(result.to_dict())
            (run.run_dir / rundir.RESULTS_CSV).write_text(rows_csv(result.rows))
