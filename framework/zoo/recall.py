"""The recall run: the same general workloads on every zoo kernel and on the fixed one.

The workloads are one list for every filesystem: a sample spread over every
operation variant followed by each durability op that could make it durable
(``gen:seq1``), bounded bursts of operations with no durability op between
most of them, then one of a name they used or of a directory above it
(``gen:burst``), chains that fsync a file, change it or its names and make
that durable (``gen:chain``), a data-heavy random operation stream with
durability ops interleaved (``stress:N``, checked at every durability mark),
and a stream of data operations on two files at offsets relative to their ends
(``ranges:N``). The first list was fixed before any bug was looked at;
``gen:chain`` came later, from what the misses of three recalls had in common,
as a general shape of workload rather than a case for any one bug,
``stress:400`` took the place of ``random:400`` after the oracle learned to see
stale data, and ``ranges:600`` the place of ``gen:seq2`` (see ``WORKLOADS``).
The generators use every operation the target's filesystem has. An entry is run
on the targets whose configuration has the bug (fast_commit is a mkfs
feature, an external log a placement), never with a workload written for it.

Per kernel and target the workloads run in order within a budget: on a zoo
kernel until a step finds a failing state that no known behaviour explains
(detected; the time to it is from the kernel's first step to that state's
check), on the fixed kernel all of them, where any such state is a false
alarm. A zoo kernel whose failing states known behaviour explains gets a
second look (``framework.zoo.masked``). Each step is one ``powercut crash``
command, printed, so any step can be run again by hand; a step the budget cuts
short is interrupted (SIGTERM) and keeps what it checked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from framework.core import clock, rundir
from framework.core.errors import ConfigError
from framework.zoo import masked
from framework.zoo import steps as crash_steps
from framework.zoo.commands import STOP as _STOP
from framework.zoo.confirm import add_same_image, confirm, lacks_same_image
from framework.zoo.entry import ZooEntry
from framework.zoo.fstests import built_checkout
from framework.zoo.kernels import FIXED, Kernel, installed
from framework.zoo.plans import W8, WorkloadPlan, plan_named, step_share
from framework.zoo.steps import Step


@dataclass(frozen=True, slots=True)
class RecallPlan:
    #: Checking time per kernel (an entry's targets share it; the fixed kernel has it for
    #: each target it is run on): the workload plan's unless a run says otherwise.
    budget_s: float = W8.budget_s
    seed: int = 0
    fstests: str | None = None  # a built fstests checkout (None: POWERCUT_XFSTESTS or none)
    #: Each workload may check for at most its share of what is left of the budget (equal,
    #: or as the plan's weights say; what it does not use passes on; the share counts from
    #: the end of its recording), so one slow workload cannot starve the others; without
    #: shares a workload may use all that is left.
    shares: bool = True
    jobs: int = 1  # kernels checked at once, each in a guest of its own
    confirm: bool = True  # run each detection's sequence alone on both kernels (zoo.confirm)
    #: The frozen, versioned workloads (framework.zoo.plans).
    workloads: WorkloadPlan = W8

    def step_limit(self, left: float, n: int) -> float:
        """Seconds the ``n``-th workload may use, ``left`` seconds being left."""
        return step_share(left, self.workloads.weights_from(n), self.shares)


def run_kernel(kernel: Kernel, target: str, results: Path, plan: RecallPlan, *,
               stop_at_detection: bool, say: Callable[[str], None]) -> list[Step]:
    """The workloads on ``kernel`` for ``target`` within the budget."""
    results.mkdir(parents=True, exist_ok=True)
    db = results / rundir.ZOO_DB
    steps: list[Step] = []
    start = clock.monotonic()
    workloads = plan.workloads.workloads
    for n, (case, options) in enumerate(workloads):
        left = plan.budget_s - (clock.monotonic() - start)
        if left < 30 or _STOP.event.is_set():
            break
        step = Step(kernel.name, target, case,
                    crash_steps.crash_argv(kernel, target, case, options, plan.seed, results, db))
        crash_steps.run_step(step, results, plan.step_limit(left, n), say, left_s=left)
        if step.error and not _STOP.event.is_set():
            # Once more, with what is left: a guest kernel that panicked at boot under TCG
            # booted the next time; a step that fails twice stays an error of this kernel.
            again = Step(kernel.name, target, case, step.argv)
            left = plan.budget_s - (clock.monotonic() - start)
            if left >= 30:
                crash_steps.run_step(again, results, plan.step_limit(left, n), say,
                          left_s=left)
                again.wall_s += step.wall_s
                if again.error:
                    again.error = f"twice: {step.error}; {again.error}"
                step = again
        steps.append(step)
        say(f"zoo: {kernel.name} {target} {case}: {step.states} states, {step.failing} failing "
            f"({step.findings} findings), {step.known} known, {step.wall_s:.0f} s"
            + (" (budget ended it)" if step.interrupted else "")
            + (f" (error: {step.error})" if step.error else ""))
        if stop_at_detection and step.failing:
            break
    return steps


def _entry_row(entry: ZooEntry, kernel: Kernel, fixed: Kernel, results: Path,
               plan: RecallPlan, say: Callable[[str], None]) -> dict[str, Any]:
    """One entry's kernel on its targets until the first unexplained failing state."""
    steps: list[Step] = []
    kernel_start = clock.timestamp()
    # The budget is the kernel's: an entry on several targets shares it among them.
    targets = entry_targets(entry, plan.workloads)
    share = replace(plan, budget_s=plan.budget_s / len(targets))
    for t in targets:
        steps += run_kernel(kernel, t, results / entry.name / t.replace("/", "-"), share,
                            stop_at_detection=True, say=say)
        if any(s.failing for s in steps):
            break
    first = min((s.first_failure for s in steps if s.first_failure), default="")
    row = {
        **{k: v for k, v in entry.to_dict().items() if k in (
            "name", "filesystem", "targets", "fix", "subject", "fstests", "hand_port")},
        "detected": any(s.failing for s in steps),
        "time_to_first_failure_s": crash_steps.seconds_between(kernel_start, first),
        "states": sum(s.states for s in steps),
        "failing_states": sum(s.failing for s in steps),
        "findings": sum(s.findings for s in steps),
        "checking_s": sum(s.wall_s for s in steps),
        "errors": [f"{s.target} {s.case}: {s.error}" for s in steps if s.error],
        "steps": [s.to_dict() for s in steps],
    }
    detecting = next((s for s in steps if s.failing and s.representative), None)
    if plan.confirm and detecting is not None:
        row["confirm"] = confirm_detection(entry, detecting, kernel, fixed, results, plan, say)
    return row


def entry_targets(entry: ZooEntry, workloads: WorkloadPlan) -> tuple[str, ...]:
    """The targets an entry's kernel is checked on, by the plan's rule."""
    if workloads.targets == "entry":
        return entry.targets
    raise ConfigError(f"workload plan {workloads.version}: unknown targets rule "
                      f"{workloads.targets!r}")


def confirm_detection(entry: ZooEntry, step: Step, kernel: Kernel, fixed: Kernel,
                      results: Path, plan: RecallPlan,
                      say: Callable[[str], None]) -> dict[str, Any]:
    """The detecting state's sequence alone on both kernels (framework.zoo.confirm); a
    confirmation that cannot run says why instead of ending the recall."""
    try:
        return confirm(Path(step.run_dir), step.representative, step.target, kernel, fixed,
                       results / entry.name / "confirm", plan.seed, say)
    except ConfigError as exc:
        say(f"zoo: {entry.name}: no confirmation: {exc}")
        return {"state": step.representative, "error": str(exc), "confirmed": False,
                "false_alarm": False}


def run_recall(entries: Sequence[ZooEntry], cache: Path, results: Path, plan: RecallPlan, *,
               say: Callable[[str], None] = print, out: Path | None = None,
               entry_set: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole recall: the fixed kernel on every target any entry names, then each entry's
    kernel on its targets, ``plan.jobs`` kernels at a time. A kernel that is not built is a
    one-line error before anything runs."""
    fixed = installed(cache, FIXED)
    kernels = {e.name: installed(cache, e.name) for e in entries}
    missing = ([FIXED] if fixed is None else []) + [n for n, k in kernels.items() if k is None]
    if missing:
        where = f" --entries {entry_set['directory']}" if entry_set else ""
        raise ConfigError(f"zoo kernel {missing[0]!r} is not built in {cache}: "
                          f"run 'powercut zoo build{where}' first")
    assert fixed is not None
    started = clock.wall()
    targets = list(dict.fromkeys(t for e in entries for t in entry_targets(e, plan.workloads)))
    baseline: dict[str, list[Step]] = {}
    rows: list[dict[str, Any] | None] = [None] * len(entries)
    lock = threading.Lock()

    def report(final: bool) -> dict[str, Any]:
        done = [r for r in rows if r is not None]
        return totals({
            "budget_s": plan.budget_s, "seed": plan.seed, "shares": plan.shares,
            "jobs": plan.jobs, "complete": final,
            "plan": plan.workloads.to_dict(), "entry_set": entry_set,
            "workloads": [{"case": c, "options": list(o)} for c, o in plan.workloads.workloads],
            "kernels": {FIXED: fixed.to_dict(),
                        **{n: k.to_dict() for n, k in kernels.items() if k}},
            "entries": done,
            "fixed": {t: [s.to_dict() for s in steps] for t, steps in baseline.items()},
            "wall_s": clock.wall() - started,
        })

    def keep(update: Callable[[], None]) -> None:
        """Record one finished kernel and write what is finished so far: a run killed
        half-way keeps its finished kernels in zoo.json ("complete": false)."""
        with lock:
            if _STOP.event.is_set():
                return  # a kernel the stop cut short is not a finished one
            update()
            if out is not None:
                rundir.write_json_atomic(out, report(final=False))

    def fixed_target(t: str) -> None:
        steps = run_kernel(fixed, t, results / FIXED / t.replace("/", "-"), plan,
                           stop_at_detection=False, say=say)
        keep(lambda: baseline.__setitem__(t, steps))

    def entry_row(i: int, entry: ZooEntry, kernel: Kernel) -> None:
        row = _entry_row(entry, kernel, fixed, results, plan, say)
        keep(lambda: rows.__setitem__(i, row))

    with ThreadPoolExecutor(max(1, plan.jobs)) as pool:
        futures = [pool.submit(fixed_target, t) for t in targets]
        for i, entry in enumerate(entries):
            kernel = kernels[entry.name]
            assert kernel is not None
            futures.append(pool.submit(entry_row, i, entry, kernel))
        try:
            for f in futures:
                f.result()
        except BaseException:
            # Ctrl-C or SIGTERM (or a step's error): the running crash commands stop and
            # keep what they checked; zoo.json keeps the kernels that finished.
            _STOP.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            _STOP.event.clear()
    baseline = {t: baseline[t] for t in targets}  # in the targets' order, not finishing order
    if plan.confirm:
        fixed_steps = {t: [s.to_dict() for s in steps] for t, steps in baseline.items()}
        for entry, row in zip(entries, rows, strict=True):
            if row is not None and not _STOP.event.is_set():
                _look_again(row, fixed_steps, kernels[entry.name], fixed, results, plan, say)
    checkout = built_checkout(plan.fstests, "--fstests")
    if checkout:
        for entry, row in zip(entries, rows, strict=True):
            if entry.fstests and row is not None:
                row.update(fstests_verdicts(entry, checkout, kernels[entry.name], fixed,
                                            results / "fstests", say))
    final = report(final=True)
    if out is not None:
        rundir.write_json_atomic(out, final)
    return final


def fstests_verdicts(entry: ZooEntry, checkout: Path, kernel: Kernel | None, fixed: Kernel,
                     work: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """The entry's fstests test on its kernel and on the fixed one: it should fail on the
    first and pass on the second."""
    from framework.zoo.fstests import run_test

    assert kernel is not None
    got = {}
    for k in (kernel, fixed):
        say(f"zoo: fstests {entry.fstests} on {k.name} ({entry.targets[0]})")
        got[k.name] = run_test(checkout, entry.fstests, entry.targets[0], k,
                               work / f"{entry.name}-{k.name}")
    zoo, base = got[kernel.name], got[fixed.name]
    words = f"{zoo.verdict} on the zoo kernel, {base.verdict} on the fixed one"
    return {"fstests": entry.fstests, "fstests_verdict": words,
            "fstests_runs": [zoo.to_dict(), base.to_dict()],
            "fstests_agrees": zoo.verdict == "failed" and base.verdict == "passed"}


def _has_verdicts(row: dict[str, Any]) -> bool:
    """Whether fstests gave its verdict on both kernels (a test missing from the checkout or a
    check that said nothing is run again by the next ``complete``)."""
    runs = row.get("fstests_runs") or []
    return len(runs) == 2 and all(r["verdict"] not in ("error", "missing") for r in runs)


def complete(report: dict[str, Any], entries: Sequence[ZooEntry], cache: Path, results: Path,
             *, fstests: Path | None, say: Callable[[str], None] = print,
             only: Sequence[str] = (),
             after: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """What a finished recall lacks, added: each detection's confirmation (or the recheck of
    its state on both kernels, for a confirmation made before that step existed) and, with
    a built fstests checkout, each entry's fstests verdicts. The report's totals are made
    again.

    ``only`` names the entries to complete (default: every one); ``after`` sees the report
    after each entry, so what was done survives a kill."""
    fixed = installed(cache, FIXED)
    if fixed is None:
        raise ConfigError(f"zoo kernel {FIXED!r} is not built in {cache}")
    by_name = {e.name: e for e in entries}
    rows = {row["name"] for row in report["entries"]}
    unknown = sorted(set(only) - rows)
    if unknown:
        raise ConfigError(f"zoo complete: {', '.join(unknown)} not in this report's entries")
    plan = RecallPlan(report["budget_s"], report["seed"],
                      workloads=plan_named((report.get("plan") or {}).get("version")))
    for row in report["entries"]:
        if only and row["name"] not in only:
            continue
        entry, kernel = by_name.get(row["name"]), installed(cache, row["name"])
        if entry is None or kernel is None:
            raise ConfigError(f"zoo entry {row['name']!r} is not known or not built in {cache}")
        steps = [Step(**{k: v for k, v in s.items() if k in Step.__slots__})
                 for s in row["steps"]]
        for step in steps:
            if step.failing and not step.representative and step.run_dir:
                crash_steps.read_step(step, Path(step.run_dir))
        detecting = next((s for s in steps if s.failing and s.representative), None)
        if detecting is not None and not row.get("confirm", {}).get("fixed"):
            row["confirm"] = confirm_detection(entry, detecting, kernel, fixed, results, plan,
                                               say)
        elif detecting is not None and lacks_same_image(row["confirm"]):
            add_same_image(row["confirm"], kernel, fixed, say)
        if "masked" not in row:
            _look_again(row, report["fixed"], kernel, fixed, results, plan, say)
        if fstests is not None and entry.fstests and not _has_verdicts(row):
            row.update(fstests_verdicts(entry, fstests, kernel, fixed, results / "fstests", say))
        if after is not None:
            after(totals(report))
    return totals(report)


def _look_again(row: dict[str, Any], fixed_steps: dict[str, list[dict[str, Any]]],
                kernel: Kernel | None, fixed: Kernel, results: Path, plan: RecallPlan,
                say: Callable[[str], None]) -> None:
    """A row that is not a detection (no unexplained failing state, or one its confirmation
    did not confirm) but has known-explained failing states gets
    ``framework.zoo.masked``'s second look (``row["masked"]``, None when it has no
    candidate); a confirmed one sets the time to the first failure from its state."""
    if (counts_as_detected(row) or not any(s.get("known") for s in row["steps"])
            or kernel is None):
        return
    row["masked"] = masked.second_look(row, fixed_steps, kernel, fixed, results / "masked",
                                       plan.seed, say)
    hit = next((c for c in (row["masked"] or {}).get("candidates", []) if c["confirmed"]), None)
    if hit is not None:
        before = 0.0
        for s in row["steps"]:
            if s["run_dir"] == hit["run_dir"]:
                started = crash_steps.run_started(Path(s["run_dir"]))
                checked = crash_steps.first_check(Path(s["run_dir"]), {hit["state"]})
                seconds = crash_steps.seconds_between(started, checked)
                row["time_to_first_failure_s"] = None if seconds is None else before + seconds
                break
            before += s["wall_s"]


def counts_as_detected(row: dict[str, Any]) -> bool:
    """Whether an entry's row is a detection of its bug: a failing state whose sequence,
    run alone on both kernels, fails on the entry's kernel and passes on the fixed one (or
    whose own image does: framework.zoo.confirm). A detection that was not confirmed (its
    confirmation could not run, or was not asked for) is shown as unconfirmed and not
    counted: a sequence that fails on both found a bug both kernels have."""
    if (row.get("masked") or {}).get("confirmed"):
        return True  # framework.zoo.masked: a failure known behaviour explained, confirmed
    c = row.get("confirm") or {}
    return bool(row["detected"] and c.get("fixed") and c.get("confirmed"))


def unmeasured(report: dict[str, Any]) -> list[str]:
    """The fixed kernel's steps that measured no false alarm: a workload that errored,
    checked no state, or was never run on a target (its budget ended first)."""
    wanted = [w["case"] for w in report.get("workloads", [])]
    out = []
    for target, steps in report["fixed"].items():
        seen = {s["case"] if isinstance(s, dict) else s.case for s in steps}
        for s in steps:
            raw = s if isinstance(s, dict) else s.to_dict()
            if raw["error"]:
                out.append(f"{target} {raw['case']}: error ({raw['error'][:120]})")
            elif not raw["states"]:
                out.append(f"{target} {raw['case']}: checked no state")
        out += [f"{target} {case}: not run (the budget ended first)"
                for case in wanted if case not in seen]
    return out


def totals(report: dict[str, Any]) -> dict[str, Any]:
    """Recall and false alarms, made from the report's rows.

    False alarms are the fixed kernel's unexplained failing states in the recall's own
    steps. Sequences that a confirmation saw fail on the fixed kernel as well are counted
    apart (``fixed_failing_in_confirmations``): they are failures of a detection that
    was not the entry's bug, of the same kind the fixed kernel's steps count."""
    done = report["entries"]
    detected = sum(1 for r in done if counts_as_detected(r))
    report["recall"] = {"detected": detected, "entries": len(done),
                        "share": detected / len(done) if done else 0.0,
                        "unconfirmed": sum(1 for r in done if r["detected"]
                                           and not counts_as_detected(r)
                                           and not (r.get("confirm") or {}).get("fixed"))}
    steps = [s if isinstance(s, dict) else s.to_dict()
             for target_steps in report["fixed"].values() for s in target_steps]
    report["false_alarms"] = sum(s["failing"] for s in steps)
    report["false_alarm_states"] = sum(s["states"] for s in steps)
    report["false_alarms_not_measured"] = unmeasured(report)
    report["fixed_failing_in_confirmations"] = sum(
        r["confirm"]["fixed"]["failing"] for r in done if (r.get("confirm") or {}).get("fixed"))
    return report


def _fstests_cell(row: dict[str, Any]) -> str:
    """The entry's fstests test and, once run, its verdicts on the two kernels."""
    test, verdict = row.get("fstests") or "", row.get("fstests_verdict")
    if not verdict:
        return test or "-"
    return f"{test}: {verdict}" if test else verdict


def table(report: dict[str, Any]) -> str:
    """The per-entry table and the totals, in Markdown."""
    lines = ["| entry | fix | fs | detected | time to first failure | states checked | "
             "failing states | findings | alone on both kernels | fstests |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["entries"]:
        t = r["time_to_first_failure_s"]
        checked = r.get("states", sum(s["states"] for s in r["steps"]))
        lines.append(
            f"| {r['name']} | {r['fix'][:12]} | {r['filesystem']} | "
            f"{_detected(r)} | {'-' if t is None else f'{t:.0f} s'} | "
            f"{checked} | {r['failing_states']} | {r['findings']} | {_confirmed(r)} | "
            f"{_fstests_cell(r)} |")
    rec = report["recall"]
    plan = report.get("plan") or {}
    rule = ("" if not report.get("shares") else
            ", a share of what is left per workload" + (" by the plan's weights"
                                                         if plan.get("weights") else " (equal)"))
    lines.append("")
    unconfirmed = rec.get("unconfirmed", 0)
    lines.append(f"recall: {rec['detected']}/{rec['entries']} ({100 * rec['share']:.0f}%)"
                 + (f" (and {unconfirmed} detected but unconfirmed, not counted)"
                    if unconfirmed else "") + "; "
                 f"false alarms on the fixed kernel: {report['false_alarms']}"
                 + (f" in {report['false_alarm_states']} states"
                    if "false_alarm_states" in report else "")
                 + (f" (and {report['fixed_failing_in_confirmations']} failing states of "
                    "detections' sequences alone on it)"
                    if report.get("fixed_failing_in_confirmations") else "") + "; "
                 f"budget {report['budget_s'] / 60:.0f} min per kernel and target{rule}; "
                 f"{report.get('jobs', 1)} at a time; wall {report['wall_s'] / 60:.0f} min")
    lines.append(f"workload plan: {plan.get('version', 'not versioned (before plans were)')}"
                 + (f", tuned on {', '.join(plan['tuned_on'])}" if plan.get("tuned_on") else ""))
    for gap in report.get("false_alarms_not_measured") or ():
        lines.append(f"false alarms not measured: {gap}")
    if report.get("complete") is False:
        lines.append(f"unfinished: the run stopped with {len(report['entries'])} entries and "
                     f"{len(report['fixed'])} fixed-kernel targets done; the totals count "
                     "only those")
    return "\n".join(lines)


def _detected(row: dict[str, Any]) -> str:
    errors = row.get("errors") or []
    c = row.get("confirm") or {}
    if (row.get("masked") or {}).get("confirmed"):
        return "yes, under a known behaviour"
    if row["detected"] and not counts_as_detected(row):
        if not c.get("fixed"):
            return ("unconfirmed, not counted: "
                    + (f"its confirmation could not run ({c['error']})" if c.get("error")
                       else "its sequence was not run alone on both kernels"))
        return ("no: its failing sequence fails on the fixed kernel too, a bug both have"
                if c["fixed"]["failing"] else "no: its failing sequence passed alone")
    return ("yes" if row["detected"] else "no") + (
        f" ({len(errors)} step{'s' if len(errors) > 1 else ''} failed: {errors[0]})"
        if errors else "")


def _confirmed(row: dict[str, Any]) -> str:
    c = row.get("confirm")
    second = masked.describe(row.get("masked"))
    if not c:
        return second or "-"
    if c.get("error"):
        return f"not run: {c['error']}" + (f"; {second}" if second else "")
    zoo, fixed = c["zoo"], c["fixed"]
    words = (f"{c['ops']} ops: {zoo['failing']} failing on the zoo kernel, "
             f"{fixed['failing']} of {fixed['states']} on the fixed one")
    same = c.get("same_image")
    if same:
        words += (f"; state {c['state']} rebuilt from its log {_verdict(same['zoo'])} on the "
                  f"zoo kernel and {_verdict(same['fixed'])} on the fixed one")
    return ("confirmed, " if c["confirmed"] else "NOT confirmed, ") + words + (
        f"; {second}" if second else "")


def _verdict(recheck: dict[str, Any]) -> str:
    return "fails" if recheck["fails"] else "passes" if recheck["passes"] else "gives no answer"


def load_report(path: Path) -> dict[str, Any]:
    """A zoo.json; one that cannot be read or is not a recall report is a one-line error."""
    data = rundir.read_json_object(path, "zoo report")
    if not isinstance(data.get("entries"), list) or "recall" not in data:
        raise ConfigError(f"{path}: not a zoo report (no entries or recall)")
    return data
