"""Multi-factor benchmark designs: factors beyond the target, their cells and their analysis.

A bench compares targets; a *factor* varies one more thing about every
target, level by level, and the bench runs the full factorial: every
target at every combination of levels, each cell a target of its own
(``ext4/ordered[journal-size=32]``), all cells in one randomised run
order. The analysis is Jain's full factorial design with replications
(``framework.core.factorial.full_factorial``): effects with intervals,
allocation of variation and the ANOVA with every interaction.

Factors (``--factor NAME=LEVEL,LEVEL,...``):

``journal-size``
    the journal's size in MiB (mkfs ``-J size=``, ``-l size=``, ...).
``placement``
    where the journal lives: ``internal``, ``external`` or ``none``.
``data-profile``, ``journal-profile``
    the device profile of the data or journal disk.
``mount``
    a mount option set per level, options joined by ``+``
    (``mount=data=ordered,data=journal+nodelalloc``); an option replaces
    the target's option of the same name (``data=``), a flag is added.
``metric``
    several metrics of one workload as levels of one factor (seed 000's
    *access mode*: bonnie++'s block read and block write); the response is
    then each metric's value, and no cell is run twice for it.

More than one target makes ``target`` a factor too. Every cell is built
through the target loader, so a level a target cannot take (a journal
size for ext2, an external journal for btrfs) is a one-line error before
anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from framework.core.errors import ConfigError
from framework.core.factorial import FactorialDesign, full_factorial
from framework.core.stats import StatsError
from recovery.targets import Target, target_from_dict

METRIC = "metric"
TARGET = "target"


def _journal_size(table: dict[str, Any], level: str) -> None:
    try:
        size = int(level)
    except ValueError:
        raise ConfigError(f"a journal size in MiB, got {level!r}") from None
    table["journal_size_mib"] = size


def _placement(table: dict[str, Any], level: str) -> None:
    table["journal"] = level
    if level != "external":
        profiles = dict(table.get("disk_profiles") or {})
        profiles.pop("journal", None)
        table["disk_profiles"] = profiles


def _profile(role: str) -> Callable[[dict[str, Any], str], None]:
    def apply(table: dict[str, Any], level: str) -> None:
        table["disk_profiles"] = {**dict(table.get("disk_profiles") or {}), role: level}
    return apply


def _mount(table: dict[str, Any], level: str) -> None:
    options = list(table.get("mount_options") or [])
    for option in filter(None, level.split("+")):
        key = option.split("=", 1)[0]
        options = [o for o in options if o.split("=", 1)[0] != key]
        options.append(option)
    table["mount_options"] = options


#: Factor name -> how a level changes a target's table (as Target.to_dict() gives it).
_APPLY: dict[str, Callable[[dict[str, Any], str], None]] = {
    "journal-size": _journal_size,
    "placement": _placement,
    "data-profile": _profile("data"),
    "journal-profile": _profile("journal"),
    "mount": _mount,
}
FACTORS = (*_APPLY, METRIC)


@dataclass(frozen=True, slots=True)
class Factor:
    name: str
    levels: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.name}={','.join(self.levels)}"


def parse_factor(text: str) -> Factor:
    """``NAME=LEVEL,LEVEL,...`` as given to ``--factor``."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep:
        raise ConfigError(f"--factor {text!r}: expected NAME=LEVEL,LEVEL,... "
                          f"(factors: {', '.join(FACTORS)})")
    if name not in FACTORS:
        raise ConfigError(f"--factor {text!r}: unknown factor {name!r} (factors: {', '.join(FACTORS)})")
    levels = tuple(lv.strip() for lv in rest.split(","))
    if any(not lv for lv in levels):
        raise ConfigError(f"--factor {text!r}: an empty level")
    if len(levels) < 2:
        raise ConfigError(f"--factor {text!r}: a factor needs at least two levels")
    if len(set(levels)) != len(levels):
        raise ConfigError(f"--factor {text!r}: a level is named twice")
    return Factor(name, levels)


def check_factors(factors: Sequence[Factor]) -> None:
    names = [f.name for f in factors]
    for name in set(names):
        if names.count(name) > 1:
            raise ConfigError(f"--factor {name}: given twice; give all its levels in one --factor")


@dataclass(frozen=True, slots=True)
class Cell:
    """One combination of levels: the target it runs as, and the levels that made it."""

    target: Target
    base: str  # the target it was made from
    levels: tuple[tuple[str, str], ...]  # (factor, level) for every run factor, in factor order

    @property
    def name(self) -> str:
        return self.target.name


def cell_name(base: str, levels: Sequence[tuple[str, str]]) -> str:
    return f"{base}[{' '.join(f'{f}={lv}' for f, lv in levels)}]" if levels else base


def expand(targets: Sequence[Target], factors: Sequence[Factor]) -> list[Cell]:
    """Every target at every combination of the run factors' levels (metric is not one)."""
    check_factors(factors)
    run_factors = [f for f in factors if f.name != METRIC]
    combos: list[tuple[tuple[str, str], ...]] = [()]
    for factor in run_factors:
        combos = [(*c, (factor.name, lv)) for c in combos for lv in factor.levels]
    cells = []
    for target in targets:
        for combo in combos:
            cells.append(Cell(_apply(target, combo), target.name, combo))
    return cells


def _apply(target: Target, levels: tuple[tuple[str, str], ...]) -> Target:
    if not levels:
        return target
    table = target.to_dict()
    name = cell_name(target.name, levels)
    for factor, level in levels:
        try:
            _APPLY[factor](table, level)
        except ConfigError as exc:
            raise ConfigError(f"--factor {factor}: level {level!r}: {exc}") from None
    table["name"] = name
    table["description"] = f"{target.name} with {', '.join(f'{f} {lv}' for f, lv in levels)}"
    try:
        return target_from_dict(table)
    except ConfigError as exc:
        # The loader names the key (journal, journal_size_mib, ...) and what is wrong.
        what = ", ".join(f"{f}={lv}" for f, lv in levels)
        raise ConfigError(f"--factor: target {target.name!r} cannot take {what}: "
                          f"{str(exc).split(': ', 1)[-1]}") from None


def design_factors(cells: Sequence[Cell], factors: Sequence[Factor]) -> list[str]:
    """The factors of the analysis: the target if there are several, then the given ones."""
    names = [TARGET] if len({c.base for c in cells}) > 1 else []
    return names + [f.name for f in factors]


def design_rows(cells: Sequence[Cell], factors: Sequence[Factor],
                values: Callable[[str, str], Sequence[float]], primary: str,
                ) -> tuple[list[dict[str, Any]], int]:
    """Tidy rows (one per observation) for the design, balanced at r, and r.

    ``values(cell name, metric)`` are a cell's kept values of a metric in
    run order; the first r of each cell keep the design balanced (r: the
    fewest any cell has).
    """
    metric = next((f for f in factors if f.name == METRIC), None)
    metrics = metric.levels if metric is not None else (primary,)
    several = len({c.base for c in cells}) > 1
    per_cell: list[tuple[dict[str, Any], Sequence[float]]] = []
    for cell in cells:
        for m in metrics:
            keys: dict[str, Any] = {TARGET: cell.base} if several else {}
            keys.update(dict(cell.levels))
            if metric is not None:
                keys[METRIC] = m
            per_cell.append((keys, values(cell.name, m)))
    r = min((len(v) for _, v in per_cell), default=0)
    rows = [{**keys, "y": y} for keys, v in per_cell for y in v[:r]]
    return rows, r


def factorial(cells: Sequence[Cell], factors: Sequence[Factor],
              values: Callable[[str, str], Sequence[float]], primary: str,
              level: float) -> tuple[FactorialDesign | None, int, str]:
    """The full factorial design of a run (None and why, when it cannot be computed)."""
    names = design_factors(cells, factors)
    if not names:
        return None, 0, "one target and no factor: nothing to compare"
    rows, r = design_rows(cells, factors, values, primary)
    return _analysed(rows, names, r, level)


def one_factor_design(
    values: Mapping[str, Sequence[float]], level: float
) -> tuple[FactorialDesign | None, int, str]:
    """One-factor design over targets with r replications each (r: the fewest any target has).

    With the CI rule targets can end with different counts; the first r of
    each, in run order, keep the design balanced.
    """
    if len(values) < 2:
        return None, 0, "one target only: nothing to compare"
    r = min(len(v) for v in values.values())
    rows = [{TARGET: t, "y": y} for t, v in values.items() for y in v[:r]]
    return _analysed(rows, [TARGET], r, level)


def _analysed(rows: Sequence[Mapping[str, Any]], factors: Sequence[str], r: int,
              level: float) -> tuple[FactorialDesign | None, int, str]:
    """The design of ``rows`` (response ``y``, ``r`` replications), or None and why not."""
    try:
        return full_factorial(rows, factors, "y", level=level), r, ""
    except StatsError as exc:
        return None, r, str(exc)


def check_metrics(factors: Sequence[Factor], known: Mapping[str, Any]) -> None:
    """A metric level the workload did not report: one line naming the ones it did."""
    for factor in factors:
        if factor.name != METRIC:
            continue
        for level in factor.levels:
            if level not in known:
                raise ConfigError(f"--factor metric: the workload reports no metric {level!r} "
                                  f"(it reports: {', '.join(known)})")
