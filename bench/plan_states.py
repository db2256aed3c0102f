"""Planning crash states when the log holds a FUA write it cannot order (a script, not a
test): prints figures.

Builds a synthetic log of ``--entries`` entries (8-sector writes over a 5,000-sector
span, a flush every 12 entries and a mark after it), once as it is (the anchor: what
planning costs with no FUA write to reorder) and once with a FUA write and a plain write
over the same sectors before the first flush (every later state then has another
reading). Plans prefix and subset states at every mark in both, best of ``--reps``, and
prints the two times, their ratio, and how many states got another reading.

Usage: python bench/plan_states.py [--entries 20000] [--reps 3]
"""

from __future__ import annotations

import argparse
import time

from crashcases.crash.points import MARKS, Variants, enumerate_points, plan_states
from devicemapper.logformat import LogEntry, LogFlag


def synthetic(entries: int, *, unordered: bool) -> tuple[list[LogEntry], list[str]]:
    w, flush, fua, mark = LogFlag.NONE, LogFlag.FLUSH, LogFlag.FUA, LogFlag.MARK
    spec: list[tuple[LogFlag, int, int, str | None]] = [(w, 0, 4, None), (flush, 0, 0, None),
                                                        (mark, 0, 0, "mkfs")]
    if unordered:
        spec += [(fua, 100, 8, None), (w, 100, 8, None), (flush, 0, 0, None)]
    marks: list[str] = []
    for i in range(entries):
        if i % 12 == 11:
            marks.append(f"pc-{i}")
            spec.append((mark, 0, 0, marks[-1]))
        elif i % 12 == 10:
            spec.append((flush, 0, 0, None))
        else:
            spec.append((w, 1000 + (i * 7) % 5000, 8, None))
    return [LogEntry(i, s, n, fl, 0, m, 0, 0, 512) for i, (fl, s, n, m) in enumerate(spec)], marks


def best(entries: list[LogEntry], marks: list[str], reps: int) -> tuple[float, int, int]:
    points = enumerate_points(entries, MARKS, workload_marks=marks)
    variants = Variants.parse(["prefix", "subset"])
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        states = plan_states(entries, points, variants, workload_marks=marks, per_point=1)
        times.append(time.perf_counter() - t0)
    return min(times), len(states), sum(1 for s in states if s.reorder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    anchor = best(*synthetic(args.entries, unordered=False), args.reps)
    other = best(*synthetic(args.entries, unordered=True), args.reps)
    print(f"log of {args.entries:,} entries, prefix and subset states at every mark, "
          f"best of {args.reps}")
    print(f"  anchor, no FUA write to reorder: {anchor[0]:.3f} s for {anchor[1]:,} states")
    print(f"  one FUA pair before the first flush: {other[0]:.3f} s for {other[1]:,} states, "
          f"{other[2]:,} with another reading ({other[0] / anchor[0]:.2f}x the anchor)")


if __name__ == "__main__":
    main()
