"""Studies: a TOML file of steps, each one powercut command over a matrix.

A step names a command (``crash``, ``cut``, ``bench``, ``sweep``) and its
options; a ``targets`` list expands a crash or cut step into one run per target
(a cut step with ``together = true`` runs them in one run, its trials in one
order; a bench step compares its targets in one run, as a sweep step measures
its targets in one run). ``expect = "fail"`` marks a
positive control: the study fails if that step *passes*, because a checker
that does not fire on a known-bad configuration is broken.

    [study]
    name = "quick"
    description = "..."
    targets_file = "my-targets.toml"   # optional: user targets, relative to this file
    known = ["my-known.toml"]          # optional: known-behaviour lists (crash and cut steps)
    scales = ["tiny", "full"]          # optional: named scales, the first the default

    [[step]]
    command = "bench"
    targets = ["ext2", "ext3"]
    options = { workload = "dbench", reps = 5 }
    scales.full = { scale = "full", reps = 10 }   # options that replace these at --scale full

    [[step]]
    command = "crash"
    targets = ["ext4/ordered", "ext4/journal"]
    options = { case = "gen:seq1", max-sequences = 20, variants = "prefix,subset" }

Every step is printed as the exact powercut command line it runs, so any
step can be rerun by hand.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from framework.core.errors import SKIPPED, ConfigError
from framework.core.lifecycle import study_step
from framework.core.store import Run, RunStatus
from framework.study.claims import Claim, load_claims

COMMANDS = ("crash", "cut", "bench", "sweep")
STEP_KEYS = {"command", "targets", "options", "expect", "title", "scales", "together"}
STUDY_KEYS = {"name", "description", "targets_file", "known", "claims", "scales"}
#: Commands that take --known (a known-behaviour list judges their failing results).
KNOWN_COMMANDS = ("crash", "cut")


@dataclass(frozen=True, slots=True)
class Step:
    command: str
    argv: tuple[str, ...]  # the whole powercut command line, without 'powercut'
    expect: str = "pass"
    title: str = ""
    number: int = 0  # its place in the whole study, from 1 (0: its place in this list)


@dataclass(frozen=True, slots=True)
class Study:
    name: str
    description: str
    steps: tuple[Step, ...] = field(default_factory=tuple)
    source: str = ""
    targets_file: str | None = None  # absolute, passed to every step as --targets-file
    known_files: tuple[str, ...] = ()  # absolute, passed to crash and cut steps as --known
    #: The paper's claims the study judges (framework.study.claims), from [study] claims.
    claims: tuple[Claim, ...] = ()
    #: The scales the study names ([study] scales, the first the default) and the one chosen.
    scales: tuple[str, ...] = ()
    scale: str = ""


#: Files next to the built-in studies that are not studies: claims and targets files.
_NOT_STUDIES = (".claims.toml", "-targets.toml")


def builtin_studies() -> dict[str, str]:
    """Built-in study names and their file contents."""
    out = {}
    for entry in resources.files("framework.study.studies").iterdir():
        if entry.name.endswith(".toml") and not entry.name.endswith(_NOT_STUDIES):
            out[entry.name.removesuffix(".toml")] = entry.read_text()
    return out


def load_study(name_or_path: str, *, scale: str | None = None) -> Study:
    builtins = builtin_studies()
    if name_or_path in builtins:
        # A built-in study's files (claims) are next to it in the package.
        here = Path(str(resources.files("framework.study.studies")))
        return parse_study(builtins[name_or_path], source=f"built-in study {name_or_path!r}",
                           base=here, scale=scale)
    path = Path(name_or_path)
    if not path.is_file():
        raise ConfigError(f"study {name_or_path!r}: no such file and no built-in study of that name "
                          f"(built-in: {', '.join(sorted(builtins))})")
    return parse_study(path.read_text(), source=str(path), base=path.parent, scale=scale)


def _option_argv(key: str, value: Any, where: str) -> list[str]:
    flag = "--" + key.replace("_", "-")
    if value is True:
        return [flag]
    if value is False:
        return []
    if isinstance(value, list):
        return [flag, ",".join(str(v) for v in value)]
    if isinstance(value, str | int | float):
        return [flag, str(value)]
    raise ConfigError(f"{where}: option {key!r} has a value of type {type(value).__name__}")


def parse_study(text: str, *, source: str, base: Path | None = None,
                scale: str | None = None) -> Study:
    """A study from TOML ``text``; ``base`` is where a relative targets_file is looked up;
    ``scale`` picks the steps' options for one of the study's scales (default: its first)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    unknown = set(raw) - {"study", "step"}
    if unknown:
        raise ConfigError(f"{source}: unknown table {sorted(unknown)[0]!r} (expected [study] and [[step]])")
    head = raw.get("study", {})
    if set(head) - STUDY_KEYS:
        raise ConfigError(f"{source}: unknown key {sorted(set(head) - STUDY_KEYS)[0]!r} in [study]")
    targets_file = head.get("targets_file")
    file_argv: tuple[str, ...] = ()
    if targets_file is not None:
        if not isinstance(targets_file, str):
            raise ConfigError(f"{source}: [study] targets_file must be a path string")
        path = Path(targets_file)
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        if not path.is_file():
            raise ConfigError(f"{source}: [study] targets_file {targets_file!r}: no such file ({path})")
        targets_file = str(path.resolve())
        file_argv = ("--targets-file", targets_file)
    scales = _scales(head.get("scales"), source)
    if scale is not None and scale not in scales:
        raise ConfigError(f"--scale {scale!r}: {source} has " + (
            f"the scales {', '.join(scales)}" if scales else "no scales ([study] scales)"))
    chosen = scale or (scales[0] if scales else "")
    known_files = _known_files(head.get("known"), source, base)
    known_argv = tuple(a for path in known_files for a in ("--known", path))
    steps: list[Step] = []
    for i, st in enumerate(raw.get("step", []), 1):
        where = f"{source}: step {i}"
        if set(st) - STEP_KEYS:
            raise ConfigError(f"{where}: unknown key {sorted(set(st) - STEP_KEYS)[0]!r}")
        command = st.get("command")
        if command not in COMMANDS:
            raise ConfigError(f"{where}: command must be one of {', '.join(COMMANDS)}, not {command!r}")
        expect = st.get("expect", "pass")
        if expect not in ("pass", "fail"):
            raise ConfigError(f"{where}: expect must be 'pass' or 'fail', not {expect!r}")
        options = st.get("options", {})
        if not isinstance(options, dict):
            raise ConfigError(f"{where}: options must be a table")
        per_scale = st.get("scales", {})
        if not isinstance(per_scale, dict) or not all(isinstance(v, dict) for v in per_scale.values()):
            raise ConfigError(f"{where}: scales must be a table of option tables, "
                              "e.g. scales.full = { reps = 10 }")
        if set(per_scale) - set(scales):
            raise ConfigError(f"{where}: scale {sorted(set(per_scale) - set(scales))[0]!r} is not "
                              "in [study] scales" + (f" ({', '.join(scales)})" if scales else ""))
        options = {**options, **per_scale.get(chosen, {})}
        case = options.get("case")
        if isinstance(case, str) and case.startswith("file:") and base is not None:
            # A workload file beside the study (or under its folder) is found from any
            # directory; a path that is not there stays as given, relative to where one runs.
            beside = base / case.removeprefix("file:")
            if beside.is_file():
                options = {**options, "case": f"file:{beside.resolve()}"}
        opt_argv: list[str] = []
        for key, value in options.items():
            opt_argv += _option_argv(key, value, where)
        targets = st.get("targets", [])
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
            raise ConfigError(f"{where}: targets must be a non-empty list of target names")
        title = st.get("title", "")
        together = st.get("together", False)
        if not isinstance(together, bool) or (together and command != "cut"):
            raise ConfigError(f"{where}: together = true is for cut steps only (a bench or "
                              "sweep step always takes its targets in one run)")
        if command in ("bench", "sweep") or together:
            known_opts = known_argv if command in KNOWN_COMMANDS else ()
            steps.append(Step(command, (command, "--target", ",".join(targets), *file_argv,
                                        *known_opts, *opt_argv), expect, title))
        else:
            known_opts = known_argv if command in KNOWN_COMMANDS else ()
            for t in targets:
                steps.append(Step(command, (command, "--target", t, *file_argv, *known_opts,
                                            *opt_argv), expect, title))
    if not steps:
        raise ConfigError(f"{source}: the study has no [[step]]")
    claims: tuple[Claim, ...] = ()
    if "claims" in head:
        if not isinstance(head["claims"], str) or not head["claims"]:
            raise ConfigError(f"{source}: [study] claims must be a path string")
        path = Path(head["claims"])
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        if not path.is_file():
            raise ConfigError(f"{source}: [study] claims {head['claims']!r}: no such file ({path})")
        claims = load_claims(path, steps=len(steps), scales=scales)  # fails before any step
    return Study(head.get("name", source), head.get("description", ""), tuple(steps), source,
                 targets_file, known_files, claims, scales, chosen)


def _scales(value: Any, source: str) -> tuple[str, ...]:
    """[study] scales: a list of distinct names, the first the default."""
    if value is None:
        return ()
    if (not isinstance(value, list) or not value or len(set(value)) != len(value)
            or not all(isinstance(v, str) and v for v in value)):
        raise ConfigError(f"{source}: [study] scales must be a list of distinct names, "
                          "e.g. [\"tiny\", \"full\"]")
    return tuple(value)


def _known_files(value: Any, source: str, base: Path | None) -> tuple[str, ...]:
    """[study] known: one path or a list, relative to the study file; each must exist."""
    if value is None:
        return ()
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise ConfigError(f"{source}: [study] known must be a path or a list of paths")
    out = []
    for text in paths:
        path = Path(text)
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        if not path.is_file():
            raise ConfigError(f"{source}: [study] known {text!r}: no such file ({path})")
        out.append(str(path.resolve()))
    from crashcases.known import load_known

    load_known(out)  # a bad entry fails the study before its first step runs
    return tuple(out)


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` (shard I of N, from 0) as (I, N); ConfigError names a bad one."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()) or not 0 <= int(index) < int(count):
        raise ConfigError(f"--shard {text!r}: expected I/N with 0 <= I < N, e.g. 0/3")
    return int(index), int(count)


def missing_shards(run: Run) -> list[str]:
    """What a sharded study run lacks: shards that never came (merge never saw them) and
    shards that did not finish, each named with its steps; empty when it is whole (or was
    not sharded)."""
    plan = run.environment.get("plan") or {}
    if not isinstance(plan, dict) or "shards" not in plan:
        return []
    count, total = int(plan["shards"]), int(plan.get("study_steps", 0))
    seen = dict(run.environment.get("shards_merged") or {})
    if not seen and "shard_index" in plan:
        seen = {str(plan["shard_index"]): run.status.value}
    out = []
    for index in range(count):
        steps = [n for n in range(1, total + 1) if (n - 1) % count == index]
        if not steps:
            continue
        status = seen.get(str(index))
        where = f"shard {index}/{count} (steps {', '.join(map(str, steps))})"
        if status is None:
            out.append(f"{where} is missing: its database was not merged")
        elif status != RunStatus.FINISHED.value:
            out.append(f"{where} did not finish: it is {status}")
    return out


def shard(study: Study, index: int, count: int) -> Study:
    """Shard ``index`` of ``count``: every count-th step (one target's crash or cut run, or a
    bench), numbered as in the whole study, so the shards' databases merge into the study.

    A step is the unit: a crash run's states all come from its one recording (a shard that
    recorded again would get other log entries), and a bench compares its targets in one
    guest, in one seeded order."""
    steps = tuple(dataclasses.replace(s, number=i)
                  for i, s in enumerate(study.steps, 1) if (i - 1) % count == index)
    return dataclasses.replace(study, steps=steps)


@dataclass(frozen=True, slots=True)
class StepResult:
    step: Step
    status: int
    why: str = ""  # a skipped step: what its target lacks

    @property
    def skipped(self) -> bool:
        return self.status == SKIPPED

    @property
    def as_expected(self) -> bool:
        # Exit 1 means the step ran and found failures; 2 and up are errors. A skip is
        # neither: it counts against nothing, and the summary names it.
        if self.skipped:
            return True
        if self.step.expect == "fail":
            return self.status == 1
        return self.status == 0


def run_study(study: Study, run_step: Callable[[Sequence[str]], int],
              echo: Callable[[str], None] = print, extra_argv: Sequence[str] = (),
              after: Callable[[list[StepResult]], None] | None = None,
              skip_reasons: dict[int, str] | None = None,
              steps_in_all: int | None = None) -> list[StepResult]:
    """Run the steps in order; runs a step opens record its number (``study_step``).

    ``after`` sees the results so far after each step (to save progress); ``skip_reasons``
    (step number -> why), filled by ``run_step``, says why a skipped step was skipped.
    ``steps_in_all`` is the whole study's step count when this is one shard of it."""
    results: list[StepResult] = []
    total = steps_in_all or max([len(study.steps), *(s.number for s in study.steps)])
    for i, step in enumerate(study.steps, 1):
        number = step.number or i
        argv = [*step.argv, *extra_argv]
        label = f" ({step.title})" if step.title else ""
        control = "  [positive control: must find failures]" if step.expect == "fail" else ""
        echo(f"\n== step {number}/{total}{label}: powercut {' '.join(argv)}{control}")
        with study_step(number):
            status = run_step(argv)
        results.append(StepResult(step, status, (skip_reasons or {}).get(number, "")))
        if after is not None:
            after(results)
    return results
