"""``powercut run``: the main job, a study of several steps (default: quick)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from framework.cli import add_machine_options, doctor
from framework.cli.study import builtin_studies, load_study, run_study
from framework.core.errors import ConfigError, MissingPrerequisite
from framework.core.lifecycle import RunSpec, run_lifecycle, steps_of
from framework.core.machine.kernel import kernel_spec
from framework.core.store import Store


def machine_argv(args: argparse.Namespace) -> list[str]:
    argv = ["--accel", args.accel, "--memory-mib", str(args.memory_mib)]
    if args.kernel:
        argv += ["--kernel", args.kernel]
    if args.modules:
        argv += ["--modules", args.modules]
    if args.kernel_release:
        argv += ["--kernel-release", args.kernel_release]
    return argv


def cmd_run(args: argparse.Namespace) -> int:
    if args.list:
        for name in sorted(builtin_studies()):
            study = load_study(name)
            print(f"{name:<20} {study.description} ({len(study.steps)} steps)")
        return 0
    study = load_study(args.study)
    if args.targets_file and study.targets_file:
        raise ConfigError(f"{study.source} names a targets_file already ({study.targets_file}); "
                          "drop --targets-file or the study's targets_file")
    # Fail early, with the fixes, rather than in the middle of a long study.
    checks = doctor.diagnose(kernel_spec(args.kernel, args.modules, args.kernel_release))
    bad = doctor.failed(checks)
    if bad:
        doctor.render(bad)
        raise MissingPrerequisite(f"{len(bad)} required item(s) missing; see 'powercut doctor'")
    print(f"study {study.name}: {study.description} ({len(study.steps)} steps)")
    from framework.cli import main as powercut

    def run_step(argv: Sequence[str]) -> int:
        extra = [*machine_argv(args), "--results", args.results, "--db", args.db]
        if args.targets_file:
            extra += ["--targets-file", args.targets_file]
        try:
            return powercut([*argv, *extra])
        except SystemExit as exc:  # argparse rejected a step's options
            return int(exc.code or 2)

    spec = RunSpec("study", f"study {study.name}", plan={
        "study": study.name, "source": study.source, "description": study.description,
        "steps": [{"argv": list(s.argv), "expect": s.expect, "title": s.title}
                  for s in study.steps]})
    with Store(args.db) as store, run_lifecycle(spec, Path(args.results), store) as run:
        # Every step's run is a child of this study run in the store.
        with steps_of(run):
            results = run_study(study, run_step)
        run.save_json("steps.json", [{"argv": list(r.step.argv), "status": r.status,
                                      "as_expected": r.as_expected} for r in results])
    print(f"\n== study {study.name}: summary (run {run.run_id} in {args.db})")
    ok = True
    for i, r in enumerate(results, 1):
        verdict = "as expected" if r.as_expected else "UNEXPECTED"
        want = "must find failures" if r.step.expect == "fail" else "must pass"
        print(f"  {i}. {verdict:<11} exit {r.status}  ({want})  powercut {' '.join(r.step.argv)}")
        ok &= r.as_expected
    print(f"results: {args.db} (sqlite), run directories under {args.results}/")
    return 0 if ok else 1


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
    p.add_argument("--targets-file", metavar="FILE",
                   help="your own targets in TOML (format of recovery/builtin_targets.toml), "
                        "passed to every step; steps may name them")
    p.add_argument("--results", default="results", metavar="DIR", help="where run directories go (default: ./results)")
    p.add_argument("--db", default="results/powercut.sqlite", metavar="PATH",
                   help="sqlite results store shared by all steps (default: results/powercut.sqlite)")
    add_machine_options(p)
    p.set_defaults(func=cmd_run)


