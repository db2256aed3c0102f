"""One run's life: its directory, its row in the store, its environment, its end.

Every command that produces results (crash, cut, bench; later studies and
ci) runs inside ``run_lifecycle()``::

    with run_lifecycle(RunSpec("crash", "crash ext4/ordered gen:seq1", plan=...),
                       results_dir, store) as run:
        machine = run.started(factory(...))    # records kernel, accel, qemu
        ...
        run.save_results(data)                  # results.json, atomic, also after Ctrl-C

The run is marked ``finished`` when the block ends normally, ``interrupted``
on Ctrl-C or SIGTERM (the CLI turns SIGTERM into KeyboardInterrupt) and
``failed`` on any other exception. What the environment holds: host kernel
and Python, powercut version and git revision, the command line, the plan
and its seeds, tool versions, and once a guest has booted its kernel
release, kernel config hash, accelerator and qemu version.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from framework import __version__
from framework.core import clock, rundir
from framework.core.environment import command_line, git_revision, host_facts
from framework.core.errors import ConfigError
from framework.core.rundir import write_json_atomic
from framework.core.store import Run as StoredRun
from framework.core.store import RunStatus, Store

P = TypeVar("P")


@dataclass
class EngineRun(Generic[P]):
    """What every engine's run keeps besides its own results: where it ran, what it was
    asked, how many guests it gave up (after a hang or a harness error), how long it took
    and its row in the store."""

    run_dir: Path
    plan: P
    replacements: int = field(default=0, kw_only=True)
    wall_s: float = field(default=0.0, kw_only=True)
    run_id: int | None = field(default=None, kw_only=True)


class Describable(Protocol):
    def describe(self) -> dict[str, str]: ...


M = TypeVar("M", bound=Describable)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What a run is, as the store and its run directory record it."""

    kind: str  # crash, cut, bench, study: the run directory's prefix
    title: str  # one line a person reads in listings
    plan: Mapping[str, Any] = field(default_factory=dict)  # JSON-ready
    seeds: Mapping[str, int] = field(default_factory=dict)
    #: target name -> its configuration (``Target.to_dict()``), stored per target
    targets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    #: The run's uuid (None: a new one); CI shards of one study run share it.
    uuid: str | None = None


def new_run_dir(results_dir: Path, kind: str) -> Path:
    """A fresh, absolute run directory (guests and printed reproducers need full paths)."""
    stamp = clock.timestamp().replace(":", "").replace("-", "").replace("+0000", "")
    path = results_dir.resolve() / f"{kind}-{stamp}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True)
    return path


def read_plan(run_dir: Path, kind: str) -> dict[str, Any]:
    """The plan.json a ``kind`` run (crash, cut, bench, study) wrote in ``run_dir``; a
    one-line ConfigError when there is none or it is not a JSON object."""
    if not (run_dir / rundir.PLAN).exists():
        raise ConfigError(f"{run_dir}: not a powercut {kind} run directory (no {rundir.PLAN})")
    return rundir.read_json_object(run_dir / rundir.PLAN, f"{kind} plan")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Run:
    """A run in progress: where its files go and how its store row grows."""

    def __init__(self, spec: RunSpec, run_dir: Path, store: Store | None) -> None:
        self.spec, self.run_dir, self.store = spec, run_dir, store
        self.run_id: int | None = None
        self.environment: dict[str, Any] = {
            **host_facts(), "powercut": __version__, "git_revision": git_revision(),
            "command_line": command_line(), "run_dir": os.fspath(run_dir),
            "plan": dict(spec.plan), "seeds": dict(spec.seeds),
            "tools": dict(spec.tool_versions),
        }
        self._guest_seen = False

    def open(self) -> None:
        write_json_atomic(self.run_dir / rundir.PLAN, dict(self.spec.plan))
        if self.store is None:
            return
        parent = _STUDY.get()
        parent_id = (parent[1] if parent is not None
                     and parent[0] == self.store.path.resolve() else None)
        if parent_id is not None and _STEP.get() is not None:
            self.environment["study_step"] = _STEP.get()
        self.run_id = self.store.start_run(
            command_line=self.environment["command_line"], study=self.spec.title,
            environment=self.environment, git_revision=self.environment["git_revision"],
            kind=self.spec.kind, parent_id=parent_id, uuid=self.spec.uuid)
        for name, config in self.spec.targets.items():
            self.store.add_target(self.run_id, name, config)

    def started(self, machine: M) -> M:
        """Record the first booted guest's facts (kernel release and config, accelerator)."""
        if not self._guest_seen:
            self._guest_seen = True
            self.environment["guest"] = machine.describe()
            if self.store is not None and self.run_id is not None:
                self.store.update_environment(self.run_id, {"guest": self.environment["guest"]})
        return machine

    def save_json(self, name: str, data: Any) -> Path:
        path = self.run_dir / name
        write_json_atomic(path, data)
        return path

    def save_results(self, data: Mapping[str, Any]) -> Path:
        """The run's results.json, with its format number (rundir.write_results)."""
        return rundir.write_results(self.run_dir, data)

    def add_artifact(self, path: Path, kind: str) -> None:
        """Keep a file of the run (log, image) with its checksum in the store."""
        if self.store is None or self.run_id is None or not path.exists():
            return
        rel = os.path.relpath(path, self.run_dir)
        self.store.add_artifact(self.run_id, rel, sha256=sha256_file(path), kind=kind,
                                size_bytes=path.stat().st_size)

    def finish(self, status: RunStatus) -> None:
        if self.store is not None and self.run_id is not None:
            self.store.finish_run(self.run_id, status)


#: The study run that runs opened now are steps of: (its database, its id).
_STUDY: contextvars.ContextVar[tuple[Path, int] | None] = contextvars.ContextVar(
    "powercut_study_run", default=None)
#: Which step of the study runs now (from 1); kept in each step run's environment.
_STEP: contextvars.ContextVar[int | None] = contextvars.ContextVar("powercut_study_step",
                                                                  default=None)


@contextlib.contextmanager
def steps_of(run: Run) -> Iterator[None]:
    """Inside this block, runs recorded in ``run``'s database are its steps (child runs)."""
    if run.store is None or run.run_id is None:
        yield
        return
    token = _STUDY.set((run.store.path.resolve(), run.run_id))
    try:
        yield
    finally:
        _STUDY.reset(token)


def current_study_step() -> int | None:
    """The study step running now (from 1), or None outside a study."""
    return _STEP.get()


@contextlib.contextmanager
def study_step(index: int) -> Iterator[None]:
    """Runs opened inside are step ``index`` of the study (``study_step`` in their environment)."""
    token = _STEP.set(index)
    try:
        yield
    finally:
        _STEP.reset(token)


@contextlib.contextmanager
def run_lifecycle(spec: RunSpec, results_dir: Path, store: Store | None) -> Iterator[Run]:
    """Open a run (directory, store row, environment); mark how it ended, whatever happens."""
    run = Run(spec, new_run_dir(results_dir, spec.kind), store)
    run.open()
    with _ended(run):
        yield run


def resumable_run(store: Store, run_dir: Path, kind: str, *,
                  left_undone: str | None = None) -> StoredRun:
    """The unfinished ``kind`` run whose files are in ``run_dir``; ConfigError when there is
    none in ``store`` or it finished (there is nothing to resume then), unless the run says
    what it ``left_undone`` (a study's steps that ended in an error). Commands ask this
    before they start anything."""
    run_dir = run_dir.resolve()
    row = store.run_by_dir(run_dir)
    if row is None:
        raise ConfigError(f"{run_dir}: no run in {store.path} has its files there "
                          "(give the run directory a run of this database printed)")
    if row.kind and row.kind != kind:
        raise ConfigError(f"{run_dir}: a {row.kind} run, not a {kind} run")
    if row.status is RunStatus.FINISHED and not left_undone:
        raise ConfigError(f"{run_dir}: run {row.id} finished; there is nothing to resume")
    return row


@contextlib.contextmanager
def resumed_lifecycle(spec: RunSpec, run_dir: Path, store: Store, *,
                      left_undone: str | None = None) -> Iterator[Run]:
    """Carry on an interrupted run in its own directory and store row (``--resume``).

    ConfigError as resumable_run() says."""
    run_dir = run_dir.resolve()
    row = resumable_run(store, run_dir, spec.kind, left_undone=left_undone)
    run = Run(spec, run_dir, store)
    run.run_id = row.id
    run.environment = {**row.environment, "resumed": [*row.environment.get("resumed", []),
                                                      clock.timestamp()]}
    run._guest_seen = "guest" in row.environment
    store.resume_run(row.id)
    store.update_environment(row.id, {"resumed": run.environment["resumed"]})
    with _ended(run):
        yield run


@contextlib.contextmanager
def _ended(run: Run) -> Iterator[None]:
    """Mark how the run ended: finished, interrupted (Ctrl-C, SIGTERM) or failed."""
    status = RunStatus.FAILED
    try:
        yield
        status = RunStatus.FINISHED
    except KeyboardInterrupt:
        status = RunStatus.INTERRUPTED
        raise
    finally:
        run.finish(status)
