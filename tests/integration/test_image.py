"""The container image (.ci/container) builds, and a shard of the ci study runs in it as a CI
pod would run it: privileged, a guest under TCG inside the container, the database and run
directories on a volume.

Opt-in (POWERCUT_IMAGE_TEST=1): the build downloads Debian and Python packages and the shard
boots a guest under TCG inside the container, so it would take the normal suite well over
its budget."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from framework.core.environment import git_revision
from framework.core.machine.base import project_root
from framework.core.store import RunStatus, Store
from framework.study.engine import load_study, missing_shards

BUILD = project_root() / ".ci" / "container" / "build"
IMAGE = os.environ.get("POWERCUT_IMAGE", "localhost/powercut:bookworm")
#: The kernel the Kubernetes example's pods boot: one of the image's own, not its default.
KERNEL = "6.12.117+deb12-amd64"
#: One step per shard (the ci study has seven: its power cuts are a step per target), and
#: the shard that holds its positive control alone, step 4 (ext4 with barrier=0 must lose
#: fsynced data): the shortest shard, and one whose verdict depends on the guest losing
#: writes inside the container.
STEPS = SHARDS = len(load_study("ci").steps)
STEP = next(n for n, s in enumerate(load_study("ci").steps, 1) if s.expect == "fail")
SHARD = STEP - 1


def _why_not() -> str | None:
    if os.environ.get("POWERCUT_IMAGE_TEST") != "1":
        return ("opt-in: set POWERCUT_IMAGE_TEST=1 to build the container image and run shard "
                f"{SHARD}/{SHARDS} of the ci study in it (minutes, and downloads of Debian's "
                "and Python's packages for the first build; needs root, podman and debootstrap)")
    missing = [t for t in ("podman", "debootstrap") if shutil.which(t) is None]
    if missing:
        return f"{' and '.join(missing)} missing: apt-get install {' '.join(missing)}"
    if os.geteuid() != 0:
        return "the image build needs root (debootstrap; a privileged container)"
    return None


pytestmark = [pytest.mark.image, pytest.mark.skipif(_why_not() is not None,
                                                    reason=_why_not() or "")]


def test_the_image_builds_and_runs_a_shard_of_the_ci_study(tmp_path: Path) -> None:
    built = subprocess.run([str(BUILD)], env={**os.environ, "POWERCUT_IMAGE": IMAGE},
                           capture_output=True, text=True, timeout=3 * 3600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]

    out = tmp_path / "out"
    out.mkdir()
    argv = ["podman", "run", "--rm", "--privileged", "--network", "none",
            "--volume", f"{out}:/out", IMAGE,
            "powercut", "run", "ci", "--kernel-release", KERNEL, "--accel", "tcg",
            "--shard", f"{SHARD}/{SHARDS}", "--run-uuid", "image-test",
            "--db", f"/out/shard-{SHARD}.sqlite", "--results", "/out/results"]
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=3 * 3600)
    # Exit 0: the study's one step in this shard, a positive control, found failures.
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    check_shard(out)


def check_shard(out: Path) -> None:
    """What the shard left on the volume (mounted at /out in the container)."""

    def here(path: str) -> Path:
        return out / Path(path).relative_to("/out")

    with Store(out / f"shard-{SHARD}.sqlite") as store:
        (study,) = [r for r in store.runs() if r.kind == "study"]
        (step,) = store.children(study.id)
        data_loss = store.checks(step.id, outcome="data-loss")
    assert study.status is RunStatus.FINISHED and study.study == "study ci"
    plan = study.environment["plan"]
    assert (plan["shards"], plan["shard_index"], plan["study_steps"]) == (SHARDS, SHARD, STEPS)
    # The image records the revision it was built from, having no git files of its own.
    if git_revision() is not None:
        assert study.git_revision == git_revision()
    assert step.kind == "crash" and step.status is RunStatus.FINISHED
    assert step.environment["study_step"] == STEP
    guest = step.environment["guest"]
    assert (guest["kernel"], guest["accel"]) == (KERNEL, "tcg")
    assert data_loss, "the control found no data-loss state"

    results = json.loads((here(step.environment["run_dir"]) / "results.json").read_text())
    assert results["plan"]["target"] == "ext4/nobarrier"
    assert results["counts"]["data-loss"] == len(data_loss)
    assert results["findings"] and all(f["representative"] for f in results["findings"])

    study_dir = here(study.environment["run_dir"])
    (kept,) = json.loads((study_dir / "steps.json").read_text())
    assert (kept["step"], kept["status"], kept["as_expected"]) == (STEP, 1, True)
    cost = json.loads((study_dir / "cost.json").read_text())
    assert cost["total"]["guest_s"] > 0 and cost["steps"][str(STEP)]["guest_s"] > 0

    # Alone, the shard is not the study: the other six are named as missing.
    missing = missing_shards(study)
    assert [m.split(" (")[0] for m in missing] == [
        f"shard {i}/{SHARDS}" for i in range(SHARDS) if i != SHARD]
