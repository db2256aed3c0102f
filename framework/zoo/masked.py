"""Detections that known behaviour hides: a zoo kernel's known-explained failing states
checked against the fixed kernel.

The known list (``crashcases/known.toml``) explains failing states of the fixed kernels'
family, so that they are not counted as false alarms. A reverted fix can fail in the same
way as a known behaviour: f2fs's fdatasync that writes no node block is both a known
behaviour of Debian's kernels and the bug of a zoo entry. Such a zoo kernel's failures are
explained away, and the recall would call the entry missed however often it failed.

So an entry with no unexplained failing state gets a second look. Its known-explained
failing states are *candidates* when the fixed kernel ran the same workload (the same case
and seed on the same target give the same operations) and checked the state's mark
without any failing state there. Each candidate's own sequence then runs alone with the
known list ignored, ``ZOO_RUNS`` times on the zoo kernel and ``FIXED_RUNS`` times on the
fixed one, each time recorded afresh (stopping at the first run that says no). It is a
detection only if every zoo-kernel run fails and no fixed-kernel run does: a behaviour that
shows up at random on both kernels, with probability p per run, passes that test with a
probability of p^2 (1-p)^3, at most 3.5% per candidate.

Candidates are tried by workload, the workload whose share of known-explained failing
states most exceeds the fixed kernel's share on the same workload first, then one from each
workload in turn: a known behaviour that both kernels show at random (f2fs's fsync that
writes no node block fails a few percent of gen:seq1's states on every kernel) should not
use up every try while a workload where only the zoo kernel fails waits behind it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crashcases.crash.results import CrashResults
from crashcases.vocabulary import Outcome
from framework.core.errors import ConfigError
from framework.zoo.confirm import run_alone, write_cut
from framework.zoo.kernels import Kernel

#: Candidates confirmed per entry, at most (each costs ZOO_RUNS + FIXED_RUNS small runs).
MAX_CANDIDATES = 2
ZOO_RUNS = 2
FIXED_RUNS = 3


def _results(run_dir: str) -> CrashResults | None:
    """A step's results.json; None for a step that checked nothing."""
    if not run_dir:
        return None
    try:
        return CrashResults.read(Path(run_dir))
    except ConfigError:
        return None


def _known_share(step: dict[str, Any]) -> float:
    """The share of a step's checked states that failed as known behaviour."""
    states = step.get("states") or 0
    return (step.get("known") or 0) / states if states else 0.0


def candidates(steps: Sequence[dict[str, Any]], fixed: dict[str, list[dict[str, Any]]],
               limit: int = MAX_CANDIDATES) -> list[dict[str, str]]:
    """Known-explained failing states of an entry's ``steps`` whose mark the fixed kernel's
    step of the same target and case checked with no failing state at that mark.

    ``fixed`` is the report's fixed-kernel steps by target. One candidate per mark and step;
    the steps ranked by how far their share of known failing states exceeds the fixed
    kernel's on the same workload, then taken in turn, one candidate each; at most
    ``limit``."""
    ranked: list[tuple[float, int, list[dict[str, str]]]] = []
    for n, step in enumerate(steps):
        if not step.get("known") or not step.get("run_dir"):
            continue
        base = next((s for s in fixed.get(step["target"], []) if s["case"] == step["case"]),
                    None)
        if base is None:
            continue
        base_results = _results(base.get("run_dir", ""))
        results = _results(step["run_dir"])
        if base_results is None or results is None:
            continue
        # A mark the fixed kernel gave a verdict at, none of them failing: a harness error
        # there is no verdict.
        checked = {s.last_mark for s in base_results.checked()}
        failed = {s.last_mark for s in base_results.failing()} | {
            s.last_mark for s in base_results.checked() if s.outcome is Outcome.ERROR}
        mark_of = {s.key: s.last_mark for s in results.states}
        seen: set[str] = set()
        mine: list[dict[str, str]] = []
        for finding in results.findings:
            if not finding.known:
                continue
            for key in finding.states:
                mark = mark_of.get(key)
                if not mark or mark in seen or mark not in checked or mark in failed:
                    continue
                seen.add(mark)
                mine.append({"target": step["target"], "case": step["case"],
                             "run_dir": step["run_dir"], "state": key, "mark": mark,
                             "known_as": finding.explanation[:200]})
        if mine:
            ranked.append((_known_share(step) - _known_share(base), -n, mine))
    ranked.sort(key=lambda r: (r[0], r[1]), reverse=True)
    out: list[dict[str, str]] = []
    for turn in range(max((len(r[2]) for r in ranked), default=0)):
        out += [r[2][turn] for r in ranked if turn < len(r[2])]
    return out[:limit]


def confirm_masked(candidate: dict[str, str], kernel: Kernel, fixed: Kernel, work: Path,
                   seed: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Run a candidate's sequence alone, known list ignored: ZOO_RUNS times on ``kernel``,
    FIXED_RUNS times on ``fixed``. Confirmed if every zoo run fails and no fixed run does."""
    workload, path = write_cut(Path(candidate["run_dir"]), candidate["state"], work)
    runs: dict[str, list[dict[str, Any]]] = {kernel.name: [], fixed.name: []}

    def says_no(k: Kernel, n: int, times: int) -> bool:
        step = run_alone(path, candidate["target"], k, work / f"{k.name}-{n}", seed, say,
                         ("--ignore-known",))
        say(f"zoo: masked {candidate['state']} on {k.name} (run {n + 1} of {times}): "
            f"{step.states} states, {step.failing} failing")
        runs[k.name].append(step.to_dict())
        return not step.states or bool(step.error) or bool(step.failing) != (k is kernel)

    # Stop at the first run that says no: the runs left would not change the answer.
    any(says_no(k, n, times) for k, times in ((kernel, ZOO_RUNS), (fixed, FIXED_RUNS))
        for n in range(times))
    zoo, base = runs[kernel.name], runs[fixed.name]
    done = len(zoo) == ZOO_RUNS and len(base) == FIXED_RUNS
    return {**candidate, "workload": str(path), "ops": len(workload.ops),
            "zoo": zoo, "fixed": base,
            "confirmed": done and all(r["states"] and not r["error"] for r in zoo + base)
            and all(r["failing"] > 0 for r in zoo) and not any(r["failing"] for r in base)}


def second_look(row: dict[str, Any], fixed_steps: dict[str, list[dict[str, Any]]],
                kernel: Kernel, fixed: Kernel, work: Path, seed: int,
                say: Callable[[str], None]) -> dict[str, Any] | None:
    """The ``masked`` field of an entry's row that no unexplained failing state detected:
    its candidates and their confirmations, stopping at the first confirmed one; None when
    it has no candidate."""
    found = candidates(row["steps"], fixed_steps)
    if not found:
        return None
    say(f"zoo: {row['name']}: {len(found)} known-explained failing state(s) the fixed "
        "kernel passed at the same mark; running each alone on both kernels")
    tried = []
    for n, c in enumerate(found):
        try:
            tried.append(confirm_masked(c, kernel, fixed, work / row["name"] / f"masked-{n}",
                                        seed, say))
        except ConfigError as exc:
            tried.append({**c, "error": str(exc), "confirmed": False})
        if tried[-1]["confirmed"]:
            break
    return {"candidates": tried, "confirmed": any(t["confirmed"] for t in tried)}


def describe(masked: dict[str, Any] | None) -> str:
    """One cell: what the second look found."""
    if not masked:
        return ""
    for t in masked["candidates"]:
        if t.get("confirmed"):
            zf = sum(1 for r in t["zoo"] if r["failing"])
            ff = sum(1 for r in t["fixed"] if r["failing"])
            return (f"known-explained state {t['state']} ({t['case']}, {t['ops']} ops): failing "
                    f"alone in {zf} of {len(t['zoo'])} zoo-kernel runs, {ff} of "
                    f"{len(t['fixed'])} fixed-kernel runs")
    return (f"{len(masked['candidates'])} known-explained state(s) tried alone; none failed "
            "only on the zoo kernel")
