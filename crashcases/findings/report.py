"""A bug report: one failing crash state written up as a filesystem's mailing list takes it.

``powercut export RUN STATE --report DIR`` writes one folder per bug:

- ``report.md``: what fails, the sequence, mkfs and mount options, the kernels it fails
  and passes on (this run's, and the runs of the same workload given with ``--also``),
  the kernel's first error line, fsck's output, the cause (a file the reporter wrote, or
  the known-behaviour entry that explains the state, with its kernel functions), the
  fstests tests and, when they were run, their verdicts, and the candidate fix;
- ``workload.json``: the operations, as ``powercut crash --case file:workload.json`` runs
  them;
- ``tests/``: the fstests tests, in the dm-flakey form (the workload up to the state's
  durability call, then every later write dropped) where the state allows it, and in the
  dm-log-writes form (replayed to the state's mark);
- ``fix.patch`` and ``cause.md`` when given, copied as they are;
- ``report.json``: the target, the state and the tests, for ``powercut ci --report DIR``,
  and every fstests verdict kept so far, one per test, form and kernel: running the tests
  on another kernel (``--force --run-fstests``) adds that kernel's verdicts to the table
  instead of replacing the others.

Everything in the text comes from the run's files; nothing is guessed. A fact the run
does not have (a kernel it was not run on) is simply not said.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashcases.crash.plan import MiB, disk_sizes
from crashcases.crash.results import CrashResults
from crashcases.findings.export import ExportError, ExportState
from crashcases.findings.fstests import next_test_name, write_fstests
from crashcases.known import KnownEntry, load_known
from crashcases.vocabulary import fails
from framework.core.files import write_atomic
from recovery.filesystems import adapter_for

REPORT = "report.md"
META = "report.json"
WORKLOAD = "workload.json"
FORMS = ("flakey", "log-writes")  # the dm-flakey form first: fstests' own crash tests' form
DEV = "/dev/sdX"  # the device in the commands the report prints
#: Each failing outcome in the words of a report's title (crashcases/vocabulary.py).
OUTCOME_WORDS = {"unmountable": "does not mount", "data-loss": "loses what was made durable",
                 "corrupt": "is corrupt", "recovered": "needs fsck to repair it",
                 "hang": "hangs"}
JOURNAL_DEV = "/dev/sdY"


@dataclass(frozen=True, slots=True)
class KernelResult:
    """What one run of the workload showed on one kernel."""

    kernel: str
    run_dir: Path
    checked: int
    failing: int
    #: The outcomes of the states at the reported state's mark and variant, on this kernel.
    at_mark: tuple[str, ...]

    @property
    def verdict(self) -> str:
        return "fails" if self.failing else "passes"


@dataclass(frozen=True, slots=True)
class FstestsRun:
    """An fstests test's verdict on a kernel, with what ./check printed."""

    test: str
    form: str
    kernel: str
    verdict: str  # passed, failed, not run, error
    output: str = ""

    def key(self) -> tuple[str, str, str]:
        return (self.test, self.form, self.kernel)

    def to_dict(self) -> dict[str, str]:
        return {"test": self.test, "form": self.form, "kernel": self.kernel,
                "verdict": self.verdict}


def read_meta(folder: Path) -> dict[str, Any]:
    """report.json of a report folder; a folder without one is not a report folder."""
    path = folder / META
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportError(f"{folder}: not a report folder (no {META}; powercut export "
                          "--report writes one)") from None
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path}: unreadable: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list):
        raise ExportError(f"{path}: not a report's metadata (no list of tests)")
    return data


def kept_runs(folder: Path) -> list[FstestsRun]:
    """The fstests verdicts an earlier export kept in the folder."""
    if not (folder / META).is_file():
        return []
    return [FstestsRun(r["test"], r["form"], r["kernel"], r["verdict"])
            for r in read_meta(folder).get("fstests", ())]


def merged_runs(old: Sequence[FstestsRun], new: Sequence[FstestsRun]) -> list[FstestsRun]:
    """Earlier verdicts, each replaced by a new one of the same test, form and kernel."""
    fresh = {r.key() for r in new}
    return [*(r for r in old if r.key() not in fresh), *new]


def kernel_results(state: ExportState, runs: Sequence[Path]) -> list[KernelResult]:
    """The state's run and each other run of the same workload, one row per run."""
    out = []
    mark, variant = state.last_mark, state.variant.kind.value
    for run_dir in (state.run_dir, *runs):
        results = CrashResults.read(run_dir)
        if results.case != state.plan.case:
            raise ExportError(f"--also {run_dir}: a run of {results.case!r}, not of this "
                              f"state's workload {state.plan.case!r}")
        if results.target is not None and results.target.name != state.target.name:
            raise ExportError(f"--also {run_dir}: a run on {results.target.name}, not on "
                              f"{state.target.name}")
        failing = {s.key for s in results.failing()}
        at = tuple(s.outcome.value for s in results.checked()
                   if s.last_mark == mark and s.variant.split(":")[0] == variant
                   and s.outcome is not None)
        out.append(KernelResult(results.kernel or "unknown", run_dir, len(results.checked()),
                                len(failing), at))
    return out


def explaining_entry(state: ExportState) -> KnownEntry | None:
    """The shipped known-behaviour entry that explained this state in its run, if one did."""
    row = CrashResults.read(state.run_dir).state(state.key)
    shipped = {e.id: e for e in load_known(()).entries}
    return next((shipped[i] for i in (row.known_ids if row else ()) if i in shipped), None)


def default_test_name(state: ExportState) -> str:
    """FS/998 (the second form takes 999): numbers fstests leaves to new tests."""
    fstype = state.target.fstype
    own = fstype in adapter_for(fstype).fstests_dirs
    return f"{fstype if own else 'generic'}/998"


def sequence_lines(state: ExportState) -> list[str]:
    """The workload's operations up to the state's durability call, one per line, with
    a mark after each durability call."""
    lines = []
    last = state.mark_op if state.mark_op >= 0 else len(state.workload.ops) - 1
    for i, op in enumerate(state.workload.ops[:last + 1]):
        lines.append(f"{i:>4}  {op.describe()}")
    return lines


def what_fails(result: Mapping[str, Any]) -> list[str]:
    """The broken promises and the recovery's errors, a line each."""
    lines = [f"- {f['kind']}: `{f['path']}`: {f['detail']}" for f in result.get("findings") or ()]
    if result.get("mount_error"):
        first = str(result["mount_error"]).split(" | ")[0]
        lines.append(f"- the mount fails: {first.split(' -- ', 1)[-1]}")
    if result.get("fsck_check") not in (None, "", "clean"):
        lines.append(f"- the read-only fsck finds the filesystem {result['fsck_check']}"
                     + (f"; the repair: {result['fsck_repair']}"
                        if result.get("fsck_repair") else ""))
    return lines or [f"- {result.get('explanation') or result['outcome']}"]


def case_words(case: str) -> str:
    """A workload file's case as the report folder holds it (its own workload.json)."""
    return f"file:{WORKLOAD}" if case.startswith("file:") else case


def demoted(text: str) -> str:
    """A cause written as a page of its own, its headings two levels down: inside the
    report's Cause section."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            line = re.sub(r"^(#{1,4}) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", line)
        out.append(line)
    return "\n".join(out)


def _fence(text: str) -> list[str]:
    return ["```", *(text.rstrip().splitlines() or ["(nothing)"]), "```"]


def report_text(state: ExportState, kernels: Sequence[KernelResult], *, cause: str,
                tests: Sequence[tuple[str, str]], runs: Sequence[FstestsRun],
                fix: str | None) -> str:
    """report.md (see the module's docstring)."""
    target, result = state.target, state.result
    adapter = adapter_for(target.fstype)
    journal = JOURNAL_DEV if target.needs_journal_disk else None
    mkfs = " ".join(adapter.mkfs_argv(target, DEV, journal_dev=journal))
    mount = ",".join(adapter.mount_options(target, journal_dev=journal)) or "defaults"
    durable = (f"`{state.durability_words(state.last_mark)}`" if state.last_mark
               else "the state after mkfs")
    failing_on = [k.kernel for k in kernels if k.failing]
    title = (f"{target.fstype}: {OUTCOME_WORDS.get(result['outcome'], result['outcome'])} after "
             f"a power cut following {durable} "
             f"({target.name}, Linux {', '.join(dict.fromkeys(failing_on)) or kernels[0].kernel})")
    lines = [f"# {title}", "",
             "## What fails", "",
             f"After {durable} returns and the power is cut, the filesystem "
             f"{OUTCOME_WORDS.get(result['outcome'], result['outcome'])} (powercut's outcome: "
             f"{result['outcome']}):", "", *what_fails(result), "",
             f"State `{state.key}` of a crash run of `{case_words(state.plan.case)}` on `{target.name}`: "
             "the disk as it was when the durability call had returned, rebuilt from a "
             "dm-log-writes recording of the workload and checked by mounting it (journal "
             "replay), comparing it with what the durability calls promised, reading the "
             "whole tree, and running fsck.", "",
             "## The sequence", "",
             f"On a freshly made filesystem (the operations as `{WORKLOAD}` holds them, each "
             "write with its own bytes); the power is cut right after the last line returns:",
             "", "```", *sequence_lines(state), "```", "",
             "## Configuration", "",
             f"- mkfs: `{mkfs}`",
             f"- mount options: `{mount}`",
             f"- device: {disk_sizes(target, state.plan.data_mib)['data'] // MiB} MiB",
             f"- powercut target `{target.name}`", "",
             "## Kernels", "",
             "| kernel | verdict | states checked | failing | outcomes at this state's mark |",
             "|---|---|---|---|---|"]
    for k in kernels:
        lines.append(f"| {k.kernel} | {k.verdict} | {k.checked} | {k.failing} | "
                     f"{', '.join(k.at_mark) or '-'} |")
    lines.append("")
    mount_error = result.get("mount_error") or ""
    if mount_error:
        lines += ["## What the kernel says", "",
                  "The mount after the power cut fails; the kernel's first error line, then "
                  "the rest as the check kept it:", "",
                  *_fence(mount_error.replace(" | ", "\n")), ""]
    fsck = [o for o in (result.get("fsck_check_output"), result.get("fsck_repair_output")) if o]
    if fsck:
        lines += ["## fsck", "", "The read-only check, then the repair:", "",
                  *_fence("\n\n".join(fsck)), ""]
    lines += ["## Cause", "", demoted(cause.strip()) or "Not analysed yet.", ""]
    if tests:
        lines += ["## fstests tests", ""]
        for name, form in tests:
            how = ("the dm-flakey form: the workload runs on dm-flakey up to the durability "
                   "call, every write after it is dropped and the filesystem remounted"
                   if form == "flakey" else
                   "the dm-log-writes form: the workload runs on dm-log-writes, the log is "
                   "replayed to the mark after the durability call, the filesystem mounted")
            lines.append(f"- `tests/{name}`: {how}.")
        lines += ["", "Copy `tests/` into an fstests checkout and run `./check "
                  + " ".join(n for n, _ in tests) + "` (SCRATCH_DEV, and LOGWRITES_DEV for the "
                  "dm-log-writes form, in local.config"
                  + (", and SCRATCH_LOGDEV with USE_EXTERNAL=yes for the journal's disk"
                     if target.needs_journal_disk else "") + ").", ""]
    if runs:
        lines += ["| test | form | kernel | verdict |", "|---|---|---|---|"]
        lines += [f"| {r.test} | {r.form} | {r.kernel} | {r.verdict} |" for r in runs]
        lines += ["", "What `./check` printed on each kernel is in `fstests-KERNEL.txt` "
                  "beside this report.", ""]
    if fix:
        lines += ["## Candidate fix", "", "`fix.patch`, against Debian's linux-source of the "
                  "newest kernel above. To check it as powercut does (both kernels built from "
                  "that source, this report's fstests tests and a study on each): `powercut ci "
                  "--kernel-source SERIES --patch fix.patch --report DIR --study STUDY`.", ""]
    lines += ["---", f"Found by powercut: `powercut crash --target {target.name} --case "
              f"{case_words(state.plan.case)} --seed {state.plan.seed}`; this state again: `powercut "
              f"recheck RUN_DIR {state.key}`."]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class ReportFiles:
    directory: Path
    report: Path
    tests: tuple[tuple[str, str], ...]  # (fstests name, form)


def write_report(state: ExportState, out: Path, *, also: Sequence[Path] = (),
                 cause_file: Path | None = None, fix_file: Path | None = None,
                 test_name: str | None = None, runs: Sequence[FstestsRun] = (),
                 force: bool = False, forms: Sequence[str] = FORMS) -> ReportFiles:
    """Write the report folder ``out`` (see the module's docstring); bad input is a
    one-line ExportError and writes nothing."""
    if out.exists() and any(out.iterdir()) and not force:
        raise ExportError(f"{out}: already exists and is not empty (--force replaces its files)")
    for given, what in ((cause_file, "--cause"), (fix_file, "--fix")):
        if given is not None and not given.is_file():
            raise ExportError(f"{what} {given}: no such file")
    kernels = kernel_results(state, also)
    if not fails_here(state):
        raise ExportError(f"state {state.key!r}: not failing in its run")
    if cause_file is not None:
        cause = cause_file.read_text()
    else:
        entry = explaining_entry(state)
        cause = (f"{entry.reason}\n\nWhere: {entry.source or entry.link}"
                 + (f"\n\nUpstream: {entry.upstream}" if entry.fix else "")
                 if entry is not None else "")
    runs = merged_runs(kept_runs(out), runs) if force else list(runs)
    out.mkdir(parents=True, exist_ok=True)
    tests: list[tuple[str, str]] = []
    name = test_name or default_test_name(state)
    for form in (f for f in FORMS if f in forms):
        try:
            write_fstests(state, out, name, force=True, form=form)
        except ExportError:
            continue  # this state has no such form (a subset state, two disks, ...)
        tests.append((name, form))
        name = next_test_name(name)
    write_atomic(out / WORKLOAD, state.workload.to_json() + "\n")
    if cause_file is not None:
        shutil.copyfile(cause_file, out / "cause.md")
    if fix_file is not None:
        shutil.copyfile(fix_file, out / "fix.patch")
    report = out / REPORT
    write_atomic(report, report_text(state, kernels, cause=cause, tests=tests, runs=runs,
                                     fix=fix_file.name if fix_file else None))
    write_atomic(out / META, json.dumps({
        "target": state.target.name, "state": state.key, "case": case_words(state.plan.case),
        "tests": [[n, f] for n, f in tests], "fstests": [r.to_dict() for r in runs]},
        indent=1) + "\n")
    by_kernel: dict[str, list[FstestsRun]] = {}
    for run in runs:
        if run.output:  # a verdict kept from an earlier export keeps its file as it was
            by_kernel.setdefault(run.kernel, []).append(run)
    for kernel, these in by_kernel.items():
        write_atomic(out / f"fstests-{kernel}.txt", "".join(
            f"== {r.test} ({r.form}) on {r.kernel}: {r.verdict}\n{r.output}\n" for r in these))
    return ReportFiles(out, report, tuple(tests))


def fails_here(state: ExportState) -> bool:
    return fails(state.outcome, state.target)
