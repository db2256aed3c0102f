#!/usr/bin/env python3
"""The fault campaign: powercut under the faults a long run meets, each injected at
random points, and what survived.

Fault classes (``--only``, a comma list; default: all of them):

- ``sigkill``: powercut and its guests killed with SIGKILL (as a closed terminal or a
  CI job's timeout does) at a random moment of a study with crash, cut, bench and
  sweep steps, then ``powercut run --resume``, again and again until the study
  completes. Its results against an uninterrupted run of the same study: every crash
  state (by mark), cut trial, bench repetition and sweep point once, none lost or
  counted twice.
- ``qemu-kill``: a checking guest's qemu killed from outside at random moments of a
  crash run: the run goes on with a fresh guest; every state has the outcome the
  uninterrupted run gave it (the state in flight was checked again, not lost).
- ``panic``: the guest kernel panics (sysrq c, ``--inject-panic``) as the check of a
  random state starts, once: the state is checked again on a fresh guest and keeps the
  uninterrupted run's outcome. Two more states panic at every check: each is a
  finding (``hang``) whose notes carry the console's panic lines.
- ``full``: the results filesystem fills up (``--results`` and ``--db`` on a tmpfs of a
  random small size): powercut ends with a one-line error naming the path, the
  database passes ``PRAGMA integrity_check``, and once the tmpfs is made larger
  ``--resume`` completes the run with the uninterrupted run's outcomes.
- ``db``: two powercut crash runs writing one database at once: both complete, every
  state of each is in the database, no "database is locked" reaches the user.
- ``corrupt``: a file a command reads (plan.json, record.json, results.json, the log
  image) truncated or with bytes flipped, in a finished run given to ``recheck`` and
  ``export`` or an interrupted one given to ``crash --resume``, and a damaged database
  given to ``report``: exit status 2 and one error line naming the file, nothing in the
  run directory changed.

Prints one row per class: injections, survived, results lost (must be 0), and what
went wrong where something did.

Run: .venv/bin/python bench/faults.py [--only sigkill,qemu-kill,...] [--injections 20]
     [--seed 0] [--work DIR]

The crash runs are ``ext4/ordered`` with ``gen:burst`` (seeded), about 60 crash
states; under TCG the whole campaign takes about an hour and a half.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crashcases.crash.results import CrashResults  # noqa: E402
from crashcases.vocabulary import Outcome  # noqa: E402
from framework.core import rundir  # noqa: E402
from framework.core.store import Store  # noqa: E402

CRASH = ["crash", "--target", "ext4/ordered", "--case", "gen:burst", "--max-sequences", "24",
         "--seed", "3", "-q"]
#: What sqlite's PRAGMA integrity_check says of a sound database.
SQLITE_SOUND = "ok"
STUDY = """
[study]
name = "faults"
description = "a crash, a cut, a bench and a sweep step, killed and resumed"

[[step]]
command = "crash"
targets = ["ext4/ordered"]
options = { case = "gen:burst", max-sequences = 12, seed = 3, quiet = true }

[[step]]
command = "cut"
targets = ["ext4/ordered"]
options = { case = "random:60", trials = 3, quiet = true }

[[step]]
command = "bench"
targets = ["ext2", "ext4/ordered"]
options = { workload = "fsmark", reps = 2, seed = 7, quiet = true }

[[step]]
command = "sweep"
targets = ["ext4/ordered"]
options = { sizes = "64", files = "50,100", dirty = "0", journal-sizes = "4", design = "full", reps = 1, quiet = true }
"""


@dataclass
class Row:
    fault: str
    injections: int = 0
    survived: int = 0
    lost: int = 0
    problems: list[str] = field(default_factory=list)

    def failed(self, why: str) -> None:
        self.problems.append(why)


# ---------------------------------------------------------------------------
# Running powercut


def start(out: Path, *argv: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    """powercut ``argv`` in a session of its own (SIGKILL of the group takes its guests)."""
    with open(out, "a") as f:
        return subprocess.Popen([sys.executable, "-m", "framework.cli", *argv], cwd=cwd or ROOT,
                                stdout=f, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)


def run(out: Path, *argv: str, timeout_s: float = 3600) -> int:
    proc = start(out, *argv)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return -9


def run_captured(*argv: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s)


def copy_tree(src: Path, dst: Path) -> None:
    """A copy that keeps holes: a run's log is a sparse file of a gigabyte (shutil's copies
    write every zero, and twenty copies fill a disk)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)


def by_mark(run_dir: Path) -> dict[tuple[str | None, str], str]:
    """Outcome per (last mark, variant): comparable across recordings."""
    return {(s.last_mark, s.variant): s.outcome.value if s.outcome is not None else "unchecked"
            for s in CrashResults.read(run_dir).states}


def one_run(results: Path, kind: str = "crash") -> Path:
    found = sorted(results.glob(f"{kind}-*"))
    if len(found) != 1:
        raise RuntimeError(f"{results}: expected one {kind} run, found {len(found)}")
    return found[0]


def compare(row: Row, got: dict[tuple[str | None, str], str], want: dict[tuple[str | None, str], str],
            *, expect: Callable[[tuple[str | None, str]], str | None] = lambda k: None) -> int:
    """States lost or changed against the uninterrupted run; each is noted."""
    bad = 0
    for key, outcome in want.items():
        wanted = expect(key) or outcome
        have = got.get(key, "missing")
        if have != wanted:
            bad += 1
            row.failed(f"{key[0]}/{key[1]}: {have}, uninterrupted {wanted}")
    extra = set(got) - set(want)
    for key in sorted(extra):
        bad += 1
        row.failed(f"{key[0]}/{key[1]}: not in the uninterrupted run")
    return bad


class Reference:
    """The uninterrupted crash run every crash-based class compares with (made once)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._marks: dict[tuple[str | None, str], str] | None = None
        self._run: Path | None = None

    def ensure(self) -> None:
        if self._run is not None:
            return
        results = self.work / "reference"
        if not results.exists() or not list(results.glob("crash-*/results.json")):
            shutil.rmtree(results, ignore_errors=True)
            results.mkdir(parents=True)
            status = run(self.work / "reference.out", *CRASH, "--results", str(results),
                         "--db", str(results / "db.sqlite"))
            if status not in (0, 1):
                raise RuntimeError(f"the uninterrupted crash run failed (exit {status}); "
                                   f"see {self.work / 'reference.out'}")
        self._run = one_run(results)
        self._marks = by_mark(self._run)

    @property
    def marks(self) -> dict[tuple[str | None, str], str]:
        self.ensure()
        assert self._marks is not None
        return self._marks

    @property
    def run_dir(self) -> Path:
        self.ensure()
        assert self._run is not None
        return self._run


# ---------------------------------------------------------------------------
# The fault classes


def qemu_pids(tree: Path) -> list[int]:
    """qemu processes whose command line names a directory under ``tree``."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"qemu-system-x86_64") and any(
                os.fsencode(tree) in a for a in argv):
            out.append(int(proc.name))
    return out


def checked_lines(results: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in results.glob("crash-*/vm-*/results.jsonl"))


def fault_qemu_kill(ref: Reference, work: Path, n: int, rng: random.Random) -> Row:
    row = Row("qemu killed from outside mid-check")
    attempt = 0
    while row.injections < n:
        attempt += 1
        results = work / f"qemu-kill-{attempt}"
        proc = start(work / f"qemu-kill-{attempt}.out", *CRASH, "--results", str(results),
                     "--db", str(results / "db.sqlite"))
        kills = 0
        last = -1
        while proc.poll() is None and row.injections + kills < n:
            time.sleep(rng.uniform(2.0, 8.0))
            done = checked_lines(results)
            recorded = list(results.glob("crash-*/record.json"))
            # A checking guest that has checked a state since the last kill (not one booting).
            if not recorded or done <= last:
                continue
            pids = qemu_pids(results)
            if pids and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rng.choice(pids), signal.SIGKILL)
                    kills += 1
                    last = done
        status = proc.wait()
        row.injections += kills
        if status not in (0, 1):
            row.failed(f"run {attempt} ended with exit {status}")
            row.lost += kills
            continue
        lost = compare(row, by_mark(one_run(results)), ref.marks)
        row.lost += lost
        row.survived += kills if not lost else 0
    return row


def fault_panic(ref: Reference, work: Path, n: int, rng: random.Random) -> Row:
    row = Row("guest kernel panic during a check")
    keys = list(ref.marks)
    order = [f"{k[0]}/{k[1]}" for k in keys]
    picks = rng.sample(range(1, len(keys) + 1), min(n + 2, len(keys)))
    once, always = picks[:-2], picks[-2:]
    spec = ",".join([f"#{i}@once" for i in once] + [f"#{i}" for i in always])
    results = work / "panic"
    status = run(work / "panic.out", *CRASH, "--results", str(results),
                 "--db", str(results / "db.sqlite"), "--inject-panic", spec)
    row.injections = len(once) + len(always)
    if status not in (0, 1):
        row.failed(f"the run ended with exit {status} (injected: {spec})")
        row.lost = row.injections
        return row
    run_dir = one_run(results)
    by_index = dict(enumerate(CrashResults.read(run_dir).states, 1))
    findings_ok = 0
    for i in always:
        state = by_index[i]
        notes = " ".join(state.result.notes if state.result is not None else [])
        if state.outcome is Outcome.HANG and "Kernel panic" in notes:
            findings_ok += 1
        else:
            row.failed(f"state #{i} ({order[i - 1]}) panicked at every check but is "
                       f"{state.outcome and state.outcome.value!r}: {notes[:200]}")
    always_marks = {(by_index[i].last_mark, by_index[i].variant) for i in always}
    lost = compare(row, by_mark(run_dir), ref.marks,
                   expect=lambda k: "hang" if k in always_marks else None)
    row.lost = lost
    row.survived = (len(once) if not lost else 0) + findings_ok
    return row


def fault_sigkill(work: Path, n: int, rng: random.Random) -> Row:
    row = Row("SIGKILL of powercut, then --resume")
    study = work / "study.toml"
    study.write_text(STUDY)
    whole = work / "sigkill-whole"
    if not (whole / "done").exists():
        shutil.rmtree(whole, ignore_errors=True)
        whole.mkdir(parents=True)
        status = run(work / "sigkill-whole.out", "run", str(study), "--results", str(whole),
                     "--db", str(whole / "db.sqlite"))
        if status != 0:
            # Every step must pass uninterrupted, or there is nothing to compare with.
            row.failed(f"the uninterrupted study failed (exit {status}): see {work / 'sigkill-whole.out'}")
            return row
        (whole / "done").write_text("")
    results = work / "sigkill"
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    where = ["--results", str(results), "--db", str(results / "db.sqlite")]
    proc = start(work / "sigkill.out", "run", str(study), *where)
    while True:
        deadline = time.monotonic() + rng.uniform(8.0, 45.0)
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
        if proc.poll() is not None:
            break
        if row.injections >= n:
            proc.wait()
            break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        row.injections += 1
        (study_dir,) = results.glob("study-*")
        proc = start(work / "sigkill.out", "run", "--resume", str(study_dir), *where)
    if proc.returncode != 0:
        row.failed(f"the last resume ended with exit {proc.returncode}")
        row.lost = row.injections
        return row
    lost = _compare_studies(row, whole, results)
    row.lost = lost
    row.survived = row.injections if not lost else 0
    return row


def _study_rows(results: Path) -> dict[str, list[tuple[object, ...]]]:
    """What each step of the study stored: bench repetitions, cut trials, sweep points."""
    with Store(results / "db.sqlite") as store:
        (top,) = [r for r in store.runs() if r.parent_id is None]
        kids = {k.kind: k.id for k in store.children(top.id)}
        # A step without a run stored nothing: an empty list, which the comparison counts.
        return {
            "bench": sorted((s.target, s.repetition) for s in
                            store.bench_samples(kids["bench"], metric="trial_wall_s"))
            if "bench" in kids else [],
            "cut": sorted((r.target, r.trial) for r in store.recoveries(kids["cut"]))
            if "cut" in kids else [],
            "sweep": sorted((p.target, p.point, p.rep) for p in store.sweep_points(kids["sweep"]))
            if "sweep" in kids else [],
        }


def _compare_studies(row: Row, whole: Path, results: Path) -> int:
    lost = compare(row, by_mark(one_run(results)),
                   by_mark(one_run(whole)))
    got, want = _study_rows(results), _study_rows(whole)
    for kind in want:
        if got[kind] != want[kind]:
            lost += 1
            row.failed(f"{kind}: {got[kind]} against {want[kind]}")
    return lost


@contextlib.contextmanager
def tmpfs(path: Path, mib: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "powercut-faults", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fault_full(ref: Reference, work: Path, n: int, rng: random.Random) -> Row:
    row = Row("results filesystem full")
    tries = 0
    while row.injections < n and tries < 4 * n:
        tries += 1
        mib = rng.randint(1, 24)
        mnt = work / f"full-{tries}"
        out = work / f"full-{tries}.out"
        with tmpfs(mnt, mib):
            where = ["--results", str(mnt), "--db", str(mnt / "db.sqlite")]
            status = run(out, *CRASH, *where)
            if status in (0, 1):
                continue  # it fitted: no injection
            row.injections += 1
            text = out.read_text().strip().splitlines()
            last = text[-1] if text else ""
            if "Traceback" in out.read_text() or str(mnt) not in last:
                row.failed(f"{mib} MiB: no one-line error naming the path: {last[:200]!r}")
                continue
            if (mnt / "db.sqlite").exists():
                integrity = sqlite3.connect(mnt / "db.sqlite").execute(
                    "PRAGMA integrity_check").fetchone()[0]
                if integrity != SQLITE_SOUND:
                    row.failed(f"{mib} MiB: database integrity_check: {integrity}")
                    row.lost += 1
                    continue
            subprocess.run(["mount", "-o", "remount,size=1024m", str(mnt)], check=True)
            runs = sorted(mnt.glob("crash-*"))
            if runs and (runs[0] / "plan.json").exists():
                status = run(out, "crash", "--resume", str(runs[0]), *where, "-q")
                if status not in (0, 1):
                    row.failed(f"{mib} MiB: --resume ended with exit {status}")
                    row.lost += 1
                    continue
                lost = compare(row, by_mark(runs[0]), ref.marks)
            else:
                # Full before the run had a plan: nothing to resume; a new run must work.
                shutil.rmtree(mnt / "crash-partial", ignore_errors=True)
                status = run(out, *CRASH, *where)
                lost = 0 if status in (0, 1) else 1
                if lost:
                    row.failed(f"{mib} MiB: a new run after the space came back: exit {status}")
            row.lost += lost
            row.survived += not lost
    return row


def fault_db(ref: Reference, work: Path, n: int, rng: random.Random) -> Row:
    row = Row("two powercut processes writing one database")
    pairs = max(1, n // 2)
    for pair in range(pairs):
        results = work / f"db-{pair}"
        shutil.rmtree(results, ignore_errors=True)
        results.mkdir(parents=True)
        db = results / "db.sqlite"
        procs = []
        for side in (0, 1):
            procs.append(start(work / f"db-{pair}-{side}.out", *CRASH,
                               "--results", str(results / str(side)), "--db", str(db)))
            time.sleep(rng.uniform(0, 5))
        statuses = [p.wait() for p in procs]
        row.injections += 2
        texts = [(work / f"db-{pair}-{side}.out").read_text() for side in (0, 1)]
        bad = [f"exit {s}" for s in statuses if s not in (0, 1)] + [
            "database is locked" for t in texts if "database is locked" in t]
        with Store(db) as store:
            counts = []
            for side in (0, 1):
                try:
                    found = store.run_by_dir(one_run(results / str(side)))
                except RuntimeError:  # no run directory: it failed before it made one
                    found = None
                counts.append(len(store.checks(found.id)) if found is not None else 0)
        want = len(ref.marks)
        for side in (0, 1):
            if counts[side] != want:
                bad.append(f"process {side}: {counts[side]} checks stored of {want}")
        if bad:
            row.failed(f"pair {pair}: " + "; ".join(bad))
            row.lost += sum(abs(want - c) for c in counts)
        else:
            row.survived += 2
    return row


def _tree_digest(path: Path) -> dict[str, str]:
    return {os.fspath(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _damage(path: Path, rng: random.Random) -> str:
    data = path.read_bytes()
    if rng.random() < 0.5 or len(data) < 16:
        cut = rng.randrange(0, max(1, len(data)))
        path.write_bytes(data[:cut])
        return f"truncated to {cut} B"
    buf = bytearray(data)
    for _ in range(8):
        i = rng.randrange(len(buf))
        buf[i] ^= 0xFF
    path.write_bytes(bytes(buf))
    return "8 bytes flipped"


def _interrupted(work: Path) -> tuple[Path, Path]:
    """A crash run killed with SIGKILL after a few states, and its database, kept pristine."""
    pristine = work / "interrupted.pristine"
    if not pristine.exists():
        results = work / "interrupted"
        shutil.rmtree(results, ignore_errors=True)
        results.mkdir(parents=True)
        proc = start(work / "interrupted.out", *CRASH, "--results", str(results),
                     "--db", str(results / "db.sqlite"))
        while checked_lines(results) < 3:
            if proc.poll() is not None:
                raise RuntimeError(f"the run to interrupt ended first; see {work}/interrupted.out")
            time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        copy_tree(results, pristine)
    return pristine, work / "interrupted"


def _one_line_error(got: subprocess.CompletedProcess[str], name: str) -> list[str]:
    """What is wrong with how a command met a damaged ``name`` (nothing: exit 2 and one
    error line naming it; progress lines before it are fine)."""
    errors = [ln for ln in got.stderr.splitlines() if ln.startswith("powercut:")]
    if got.returncode == 0:
        return ["exit 0 on a damaged file"]
    if "Traceback" in got.stderr:
        return ["a traceback"]
    if got.returncode != 2 or len(errors) != 1 or name not in errors[0]:
        return [f"exit {got.returncode}, not a one-line error naming {name}: "
                f"{(errors or got.stderr.splitlines())[-3:]}"]
    return []


def _failing_run(work: Path) -> Path:
    """A finished crash run with failing states (a disk that ignores flushes), for recheck
    and export, which reproduce failing states."""
    results = work / "failing"
    if not list(results.glob("crash-*/results.json")):
        shutil.rmtree(results, ignore_errors=True)
        results.mkdir(parents=True)
        status = run(work / "failing.out", "crash", "--target", "ext4/ordered", "--case",
                     "hand:write-fsync-rename", "--variants", "prefix,lying", "--per-point", "2",
                     "-q", "--results", str(results), "--db", str(results / "db.sqlite"))
        if status != 1:
            raise RuntimeError(f"the lying-disk run did not fail (exit {status}); "
                               f"see {work / 'failing.out'}")
    return one_run(results)


def fault_corrupt(ref: Reference, work: Path, n: int, rng: random.Random) -> Row:
    row = Row("corrupt run files given to recheck, export, --resume, report")
    source = _failing_run(work)
    state = CrashResults.read(source).failing()[0].key
    pristine, live = _interrupted(work)
    for i in range(n):
        command_kind = ("recheck", "export", "resume")[i % 3]
        if command_kind == "resume":
            # An interrupted run, restored where it was made (its database names that path).
            shutil.rmtree(live, ignore_errors=True)
            copy_tree(pristine, live)
            run_dir = one_run(live)
            name = ("plan.json", "record.json", "log.img")[(i // 3) % 3]
            command = ["crash", "--resume", str(run_dir), "--db", str(live / "db.sqlite")]
        else:
            copy = work / f"corrupt-{i}" / source.name
            shutil.rmtree(copy.parent, ignore_errors=True)
            copy_tree(source, copy)
            run_dir = copy
            # Each command's damage is in a file it reads: recheck rebuilds the state from
            # the plan and the log (whose digest record.json holds); export also takes the
            # state's result from results.json.
            if command_kind == "recheck":
                name = ("plan.json", "record.json", "log.img")[(i // 3) % 3]
                command = ["recheck", str(copy), state]
            else:
                # The state's image, kept by the run, or the log it is rebuilt from.
                image = rundir.state_image(state)
                kept = image if any(copy.rglob(image)) else "log.img"
                name = ("plan.json", "results.json", kept)[(i // 3) % 3]
                command = ["export", str(copy), state, "--script", str(copy.parent / "out.sh")]
        victims = sorted(run_dir.rglob(name))
        if not victims:
            row.failed(f"{name}: not in {run_dir}")
            continue
        how = _damage(victims[0], rng)
        before = _tree_digest(run_dir)
        row.injections += 1
        try:
            got = run_captured(*command, timeout_s=900)
        except subprocess.TimeoutExpired:
            row.failed(f"{name} {how}, {command_kind}: did not end within 15 minutes")
            continue
        problems = _one_line_error(got, name)
        after = _tree_digest(run_dir)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            problems.append(f"changed {changed[:3]}")
        if problems:
            row.failed(f"{name} {how}, {command_kind}: " + "; ".join(problems))
        else:
            row.survived += 1
    # The database given to report, damaged.
    for i in range(max(1, n // 4)):
        db = work / f"corrupt-db-{i}.sqlite"
        shutil.copy(source.parent / "db.sqlite", db)
        how = _damage(db, rng)
        digest = hashlib.sha256(db.read_bytes()).hexdigest()
        got = run_captured("report", "--db", str(db), "--no-html")
        row.injections += 1
        problems = [] if got.returncode == 0 else _one_line_error(got, db.name)
        if hashlib.sha256(db.read_bytes()).hexdigest() != digest:
            problems.append("report changed it")
        if problems:
            row.failed(f"database {how}, report: " + "; ".join(problems))
        else:
            row.survived += 1
    return row


# ---------------------------------------------------------------------------


CLASSES = ("sigkill", "qemu-kill", "panic", "full", "db", "corrupt")


def table(rows: Sequence[Row]) -> str:
    out = ["| fault | injections | survived | results lost |", "|---|---|---|---|"]
    out += [f"| {r.fault} | {r.injections} | {r.survived} | {r.lost} |" for r in rows]
    for r in rows:
        for p in r.problems[:10]:
            out.append(f"- {r.fault}: {p}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(CLASSES),
                    help=f"fault classes, a comma list (default: all: {', '.join(CLASSES)})")
    ap.add_argument("--injections", type=int, default=20, help="per class (default: 20)")
    ap.add_argument("--seed", type=int, default=0, help="where the faults land (default: 0)")
    ap.add_argument("--work", help="a directory for the runs (default: a new temporary one)")
    args = ap.parse_args(argv)
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(only) - set(CLASSES))
    if unknown:
        ap.error(f"--only: unknown fault class {unknown[0]!r} (known: {', '.join(CLASSES)})")
    if ("full" in only) and os.geteuid() != 0:
        ap.error("--only full: mounting a tmpfs needs root")
    work = Path(args.work or tempfile.mkdtemp(prefix="powercut-faults-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"fault campaign in {work}: {', '.join(only)}; {args.injections} injections each, "
          f"seed {args.seed}", flush=True)
    ref = Reference(work)
    rows: list[Row] = []
    for name in only:
        rng = random.Random(f"powercut-faults:{args.seed}:{name}")
        t0 = time.monotonic()
        if name == "sigkill":
            row = fault_sigkill(work, args.injections, rng)
        elif name == "qemu-kill":
            row = fault_qemu_kill(ref, work, args.injections, rng)
        elif name == "panic":
            row = fault_panic(ref, work, args.injections, rng)
        elif name == "full":
            row = fault_full(ref, work, args.injections, rng)
        elif name == "db":
            row = fault_db(ref, work, args.injections, rng)
        else:
            row = fault_corrupt(ref, work, args.injections, rng)
        rows.append(row)
        print(f"{row.fault}: {row.injections} injections, {row.survived} survived, "
              f"{row.lost} results lost ({time.monotonic() - t0:.0f} s)", flush=True)
        for problem in row.problems[:10]:
            print(f"  {problem}", flush=True)
        # Kept as each class ends: a campaign stopped half way keeps what it measured.
        (work / "faults.json").write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    print()
    print(table(rows))
    return 0 if all(r.lost == 0 and r.survived == r.injections for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
