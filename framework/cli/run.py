"""``powercut run``: the main job, a study of several steps (default: quick)."""

from __future__ import annotations

import argparse
import json
import uuid as uuidlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from framework.cli import add_machine_options, doctor
from framework.core import cost, rundir
from framework.core.errors import (
    BootError,
    ConfigError,
    MissingPrerequisite,
    PowercutError,
    Unsupported,
)
from framework.core.lifecycle import (
    RunSpec,
    current_study_step,
    read_plan,
    resumable_run,
    resumed_lifecycle,
    run_lifecycle,
    steps_of,
)
from framework.core.machine.kernel import kernel_spec
from framework.core.store import RunStatus, Store
from framework.study.claims import NOT_COMPARABLE, Verdict, format_table, judge, verdicts_json
from framework.study.engine import (
    Step,
    StepResult,
    Study,
    builtin_studies,
    load_study,
    parse_shard,
    run_study,
    shard,
)


def kernel_argv(kernel: str | None, modules: str | None, release: str | None) -> list[str]:
    """The options that name a guest kernel, as a step's command line takes them."""
    argv: list[str] = []
    if kernel:
        argv += ["--kernel", kernel]
    if modules:
        argv += ["--modules", modules]
    if release:
        argv += ["--kernel-release", release]
    return argv


def machine_argv(args: argparse.Namespace) -> list[str]:
    # --memory-mib only when given: a step may ask for its own (a guest smaller than the
    # file a benchmark writes), and the command's default would override it.
    memory = ["--memory-mib", str(args.memory_mib)] if args.memory_mib is not None else []
    return ["--accel", args.accel, *memory,
            *kernel_argv(args.kernel, args.modules, args.kernel_release)]


def cmd_run(args: argparse.Namespace) -> int:
    if args.list:
        for name in sorted(builtin_studies()):
            study = load_study(name)
            scales = f"; scales {', '.join(study.scales)}" if study.scales else ""
            print(f"{name:<20} {study.description} ({len(study.steps)} steps{scales})")
        return 0
    resume_dir = Path(args.resume).resolve() if args.resume else None
    if resume_dir is not None and args.scale:
        raise ConfigError("--scale with --resume: a resumed study keeps the scale it started with")
    earlier = read_plan(resume_dir, "study") if resume_dir is not None else None
    study = (load_study(args.study, scale=args.scale) if resume_dir is None or earlier is None
             else study_of_plan(earlier, resume_dir))
    run_uuid = None
    shard_plan: dict[str, int] = {}
    if args.shard and resume_dir is None:
        index, count = parse_shard(args.shard)
        # What merge and ci check that every shard came and finished (framework.study.engine
        # missing_shards): how many there are, which this is, how many steps in all.
        shard_plan = {"shards": count, "shard_index": index, "study_steps": len(study.steps)}
        if not args.run_uuid:
            raise ConfigError("--shard: shards of one study share its run; give them all the "
                              "same --run-uuid (e.g. the CI job's id) and merge their databases")
        study = shard(study, index, count)
        run_uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"powercut:{args.run_uuid}"))
        if not study.steps:
            print(f"study {study.name}, shard {args.shard}: no step falls to this shard")
            return 0
    elif args.run_uuid and resume_dir is None:
        run_uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"powercut:{args.run_uuid}"))
    if args.targets_file and study.targets_file:
        raise ConfigError(f"{study.source} names a targets_file already ({study.targets_file}); "
                          "drop --targets-file or the study's targets_file")
    # Fail early, with the fixes, rather than in the middle of a long study.
    checks = doctor.diagnose(kernel_spec(args.kernel, args.modules, args.kernel_release))
    bad = doctor.failed(checks)
    if bad:
        doctor.render(bad)
        raise MissingPrerequisite(f"{len(bad)} required item(s) missing; see 'powercut doctor'")
    # A finished study whose steps ended in an error (a guest that would not boot, a kernel
    # that died under the recording) is carried on too: those steps run again.
    undone = errored_steps(resume_dir) if resume_dir is not None else []
    left_undone = (f"step(s) {', '.join(map(str, undone))} ended in an error" if undone
                   else None)
    if resume_dir is not None:
        with Store(args.db) as store:
            resumable_run(store, resume_dir, "study", left_undone=left_undone)
        if left_undone:
            print(f"resuming: {left_undone}; they run again")
    # A shard numbers its steps as in the whole study: "step 3/84", not "3/83".
    steps_in_all = int(shard_plan.get("study_steps") or (earlier or {}).get("study_steps", 0)) or None
    at_scale = f", scale {study.scale}" if study.scale else ""
    print(f"study {study.name}: {study.description} ({len(study.steps)} steps{at_scale})")
    from framework.cli import main as powercut

    spec = RunSpec("study", f"study {study.name}", uuid=run_uuid, plan={
        "study": study.name, "source": study.source, "description": study.description,
        "shard": args.shard, **shard_plan, "scale": study.scale,
        "steps": [{"argv": list(s.argv), "expect": s.expect,
                                        "title": s.title, "number": s.number}
                                       for s in study.steps]})
    with Store(args.db) as store, \
            (run_lifecycle(spec, Path(args.results), store) if resume_dir is None
             else resumed_lifecycle(spec, resume_dir, store, left_undone=left_undone)) as run:
        assert run.run_id is not None
        done = finished_steps(run.run_dir) if resume_dir is not None else {}
        study_id = run.run_id
        # The guest of a step did not boot: every later step would boot the same kernel.
        no_boot: list[int] = []  # the step whose guest did not boot

        skip_reasons: dict[int, str] = {}  # step number -> what its target lacks

        def stop_on_boot_error(exc: PowercutError) -> None:
            if isinstance(exc, BootError) and not no_boot:
                no_boot.append(current_study_step() or 0)
            if isinstance(exc, Unsupported):
                skip_reasons[current_study_step() or 0] = str(exc)

        def run_step(argv: Sequence[str]) -> int:
            index = current_study_step()
            assert index is not None
            if no_boot:
                print(f"   not run: the guest did not boot in step {no_boot[0]} (the same "
                      "kernel would not boot here either)")
                return 2
            if index in done:
                print(f"   done before (exit {done[index]}): not run again")
                return done[index]
            extra = [*machine_argv(args), "--results", args.results, "--db", args.db]
            if args.targets_file:
                extra += ["--targets-file", args.targets_file]
            if resume_dir is not None:
                earlier = [r for r in store.children(study_id)
                           if r.environment.get("study_step") == index]
                if any(r.status is RunStatus.FINISHED for r in earlier):
                    status = status_from_store(store, earlier[-1].id)
                    print(f"   finished before (exit {status} from its stored results)")
                    return status
                if earlier and earlier[-1].environment.get("run_dir"):
                    argv = resume_argv(argv, earlier[-1].environment["run_dir"])
                    print(f"   carrying on run {earlier[-1].id}: powercut {' '.join(argv)}")
            before = cost.now()
            try:
                return powercut([*argv, *extra], on_error=stop_on_boot_error, nested=True)
            except SystemExit as exc:  # argparse rejected a step's options
                return int(exc.code or 2)
            finally:
                costs[index] = cost.now() - before

        costs: dict[int, cost.Cost] = {}  # step number -> what it cost
        started = cost.now()

        def progress(results: list[StepResult]) -> None:
            run.save_json(rundir.STEPS, [
                {"step": r.step.number or i, "argv": list(r.step.argv), "status": r.status,
                 "as_expected": r.as_expected, **({"skipped": r.why} if r.skipped else {}),
                 "cost": costs[r.step.number or i].to_dict() if (r.step.number or i) in costs
                 else None} for i, r in enumerate(results, 1)])

        # Every step's run is a child of this study run in the store.
        with steps_of(run):
            results = run_study(study, run_step, after=progress, skip_reasons=skip_reasons,
                                steps_in_all=steps_in_all)
    total = cost.now() - started
    run.save_json(rundir.COST, {"steps": {str(k): c.to_dict() for k, c in costs.items()},
                                "total": total.to_dict()})
    print(f"\n== study {study.name}: summary (run {run.run_id} in {args.db})")
    ok = True
    for i, r in enumerate(results, 1):
        verdict = "skipped" if r.skipped else "as expected" if r.as_expected else "UNEXPECTED"
        want = "must find failures" if r.step.expect == "fail" else "must pass"
        c = costs.get(r.step.number or i)
        spent = (f"  [{c.wall_s:.0f} s wall, {c.cpu_s:.0f} CPU-s, {c.guest_s:.0f} guest-s]"
                 if c else "")
        print(f"  {r.step.number or i}. {verdict:<11} exit {r.status}  ({want})  "
              f"powercut {' '.join(r.step.argv)}{spent}")
        if r.skipped:
            print(f"     not run: {r.why or 'its target cannot run here'}")
        ok &= r.as_expected
    skipped = [r for r in results if r.skipped]
    if skipped:
        print(f"  skipped: {len(skipped)} of {len(results)} steps, whose targets cannot run on "
              "this kernel or machine (not counted as passed or failed)")
    print(f"  cost: {total.wall_s:.0f} s wall, {total.cpu_s:.0f} CPU-seconds, "
          f"{total.guest_s:.0f} guest-seconds (a guest under TCG keeps a core busy)")
    if study.claims:
        verdicts = judge_claims(store_path=Path(args.db), study_id=run.run_id, study=study)
        print(format_table(verdicts))
        run.save_json(rundir.CLAIMS, verdicts_json(verdicts))
    print(f"results: {args.db} (sqlite), run directories under {args.results}/")
    summarise_study(Path(args.db), run.run_id, None if args.no_report else run.run_dir / rundir.REPORT)
    return 0 if ok else 1


def judge_claims(*, store_path: Path, study_id: int | None, study: Study) -> list[Verdict]:
    """The study's claims against the results.json of the steps that ran (a step that did not
    leave one makes its claims not comparable, saying so)."""
    results: dict[int, dict[str, object]] = {}
    with Store(store_path) as store:
        for child in store.children(study_id) if study_id is not None else []:
            step, run_dir = child.environment.get("study_step"), child.environment.get("run_dir")
            if isinstance(step, int) and run_dir and (Path(run_dir) / rundir.RESULTS).is_file():
                results[step] = rundir.read_results(Path(run_dir), "step's results")
    out = []
    for claim in study.claims:
        if claim.step in results:
            out.append(judge(claim, results[claim.step], scale=study.scale))
        else:
            out.append(Verdict(claim, NOT_COMPARABLE, "-", f"step {claim.step} left no results"))
    return out


def summarise_study(db: Path, run_id: int | None, out: Path | None) -> None:
    """What the whole study found, as ``powercut report`` summarises it (per target and
    workload: states, ok, known and failing, the findings; the power cuts), then the HTML
    report at ``out`` (None: --no-report). A report that cannot be made is a warning: the
    study's results are in the store either way."""
    from rich.console import Console

    from framework.cli.report import summary
    from framework.report.html import build, render_html
    from framework.report.results import load

    try:
        with Store(db) as store:
            report = build(load(store, str(run_id)), draw=out is not None)
        print()
        summary(report.data, Console())
        if out is not None:
            out.write_text(render_html(report), encoding="utf-8")
    except (PowercutError, OSError, ValueError) as exc:
        print(f"report: not written ({exc}); try 'powercut report {run_id} --db {db}'")
        return
    if out is not None:
        print(f"report: {out}")


def study_of_plan(plan: dict[str, Any], run_dir: Path) -> Study:
    """The study an earlier study run in ``run_dir`` ran, from its plan.json (its steps'
    command lines)."""
    try:
        steps = tuple(Step(s["argv"][0], tuple(s["argv"]), s.get("expect", "pass"),
                           s.get("title", ""), int(s.get("number", 0))) for s in plan["steps"])
        return Study(plan["study"], plan.get("description", ""), steps, plan.get("source", ""))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise ConfigError(f"{run_dir / rundir.PLAN}: not a study run's plan ({exc})") from None


#: The exit statuses of a command that did not do its work (framework.cli.main): an error,
#: and a missing prerequisite (a tool installed since, a kernel fetched since).
ERROR_EXITS = (2, 3)


def _saved_steps(run_dir: Path) -> list[tuple[int, int, bool]]:
    """(step, exit status, skipped) for each step an earlier study run saved."""
    path = run_dir / rundir.STEPS
    if not path.exists():
        return []
    try:
        return [(int(s["step"]), int(s["status"]), "skipped" in s)
                for s in json.loads(path.read_text())]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a study's step list ({exc})") from None


def _errored(status: int, skipped: bool) -> bool:
    return status in ERROR_EXITS and not skipped


def errored_steps(run_dir: Path) -> list[int]:
    """The steps an earlier study run saved as ended in an error (exit 2 or 3, not a skip):
    ``--resume`` runs them again."""
    return [step for step, status, skipped in _saved_steps(run_dir) if _errored(status, skipped)]


def finished_steps(run_dir: Path) -> dict[int, int]:
    """Step number -> exit status, for the steps an earlier study run saved as done (found
    failures or none, or skipped): not those that ended in an error."""
    return {step: status for step, status, skipped in _saved_steps(run_dir)
            if not _errored(status, skipped)}


#: Options of a step that a resumed step still needs (its plan has the others).
_KEPT_ON_RESUME = {"--known": True, "--ignore-known": False, "-q": False, "--quiet": False,
                   "--json": False}


def resume_argv(argv: Sequence[str], run_dir: str) -> list[str]:
    """The step's command carrying on its interrupted run: its plan comes from the run."""
    out = [argv[0], "--resume", run_dir]
    i = 1
    while i < len(argv):
        takes_value = _KEPT_ON_RESUME.get(argv[i])
        if takes_value is None:
            i += 1
            continue
        out += argv[i:i + 2] if takes_value else argv[i:i + 1]
        i += 2 if takes_value else 1
    return out


def status_from_store(store: Store, run_id: int) -> int:
    """A finished step's exit status when the study was killed before saving it: 1 when a
    crash state or power-cut trial failed and no known behaviour explains it, else 0."""
    from framework.report.results import load

    results = load(store, str(run_id))  # judged by target: fsck repairs fail a journal
    return 1 if len(results.failing_checks()) or len(results.failing_recoveries()) else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run a study (default: quick, a few minutes under TCG)",
        description="Run a study: a list of crash, power-cut and benchmark steps over targets, "
                    "checked first by doctor. Each step is printed as the powercut command it "
                    "runs. Steps marked as positive controls must find failures; the study "
                    "fails if a control stays quiet or a normal step fails. Built-in studies: "
                    + ", ".join(sorted(builtin_studies())) + "; or give a TOML file.",
    )
    p.add_argument("study", nargs="?", default="quick", help="built-in study name or TOML file (default: quick)")
    p.add_argument("--list", action="store_true", help="list the built-in studies")
    p.add_argument("--scale", metavar="NAME",
                   help="the study's scale, as its [study] scales name them (the seed studies: "
                        "tiny, minutes under TCG, the default; medium, files larger than the guest's "
                        "page cache and more repetitions; full, the "
                        "paper's sizes, hours)")
    p.add_argument("--no-report", action="store_true",
                   help="do not write the HTML report at the end (the summary of what the "
                        "study found is printed either way; powercut report makes the HTML later)")
    p.add_argument("--shard", metavar="I/N",
                   help="run only shard I of N (from 0): every N-th step, numbered as in the "
                        "whole study; give every shard the same --run-uuid and its own --db, "
                        "then 'powercut merge' the databases into the whole study")
    p.add_argument("--run-uuid", metavar="ID",
                   help="name the study run (any text, e.g. a CI run id; the run's uuid is "
                        "derived from it): shards of one study share it")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="carry on a study run that was interrupted (Ctrl-C, kill, a guest that "
                        "died): steps it finished are not run again, the step it was in carries "
                        "on its own run (crash, cut and bench --resume), the rest run as usual")
    p.add_argument("--targets-file", metavar="FILE",
                   help="your own targets in TOML (format of recovery/builtin_targets.toml), "
                        "passed to every step; steps may name them")
    p.add_argument("--results", default="results", metavar="DIR", help="where run directories go (default: ./results)")
    p.add_argument("--db", metavar="PATH",
                   help="sqlite results store shared by all steps (default: powercut.sqlite in "
                        "the --results directory)")
    # --memory-mib given applies to every step; not given, each step's own or its default.
    add_machine_options(p, memory_default=None)
    p.set_defaults(func=cmd_run)


