"""The CI examples in .ci/examples are valid YAML whose powercut command lines parse, and run
the image .ci/container builds."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from framework.cli import build_parser

EXAMPLES = Path(__file__).resolve().parents[2] / ".ci" / "examples"
RECIPE = EXAMPLES.parent / "container"


def powercut_commands(text: str) -> list[list[str]]:
    """Every powercut command line in shell text, with shell variables made plain words."""
    out = []
    flat = text.replace("\\\n", " ")
    for part in re.split(r"&&|\|\||;|\n", flat):
        if ".venv/bin/powercut " not in part:
            continue
        words = shlex.split(part.split(".venv/bin/powercut ", 1)[1].split(">")[0])
        out.append([re.sub(r"\$\{\{[^}]*\}\}|\$\w+", "X", w) for w in words])
    return out


def shell_texts(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [t for v in node.values() for t in shell_texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in shell_texts(v)]
    return []


@pytest.mark.parametrize("name", ["kernel-ci.github.yml", "kernel-ci.k8s.yml"])
def test_example_commands_are_valid_powercut_command_lines(name: str) -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / name).read_text()))
    commands = [c for d in docs for t in shell_texts(d) for c in powercut_commands(t)]
    assert {c[0] for c in commands} >= {"run", "merge", "compare"}
    parser = build_parser()
    for argv in commands:
        argv = [w if not w.endswith("/X") else "0/3" for w in argv]  # --shard "$I/$N"
        parser.parse_args(argv)  # SystemExit (and the failing test) on an unknown option
    if name.endswith("github.yml"):
        shard = docs[0]["jobs"]["shard"]
        assert shard["strategy"]["matrix"]["shard"] == [0, 1, 2]
        assert docs[0]["jobs"]["compare"]["needs"] == "shard"
    else:
        assert docs[0]["spec"]["completionMode"] == "Indexed"
        assert docs[0]["spec"]["completions"] == 3


def _planted(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (EXAMPLES / name).read_text()
    assert old in text, old
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def test_the_kubernetes_manifests_validate_against_the_schema_offline(tmp_path: Path) -> None:
    """kubernetes-validate carries the Kubernetes schemas; --strict rejects unknown fields.
    Positive control: a misspelt field and a wrong type in the Indexed Job are caught."""
    tool = Path(sys.executable).with_name("kubernetes-validate")
    ok = subprocess.run([str(tool), "--strict", str(EXAMPLES / "kernel-ci.k8s.yml")],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    for old, new in (("completions: 3", "completionz: 3"), ("parallelism: 3", "parallelism: three")):
        bad = subprocess.run([str(tool), "--strict", str(_planted(tmp_path, "kernel-ci.k8s.yml",
                                                                   old, new))],
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0, (old, bad.stdout)


def test_the_github_workflow_passes_actionlint(tmp_path: Path) -> None:
    """actionlint (built by 'make setup' from the Go module proxy when Go is there).
    Positive control: an expression naming a matrix key the job does not have."""
    tool = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or \
        shutil.which("actionlint")
    if tool is None:
        pytest.skip("actionlint not installed ('make setup' builds it with Go: "
                    "go install github.com/rhysd/actionlint/cmd/actionlint)")
    ok = subprocess.run([tool, "-no-color", str(EXAMPLES / "kernel-ci.github.yml")],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run([tool, "-no-color", str(_planted(
        tmp_path, "kernel-ci.github.yml", '"${{ matrix.kernel }}"', '"${{ matrix.kernels }}"'))],
        capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "property \"kernels\" is not defined" in bad.stdout, bad.stdout


def recipe_image_and_kernels() -> tuple[str, set[str]]:
    """The image name .ci/container/build gives by default and the kernels the Containerfile
    installs by default."""
    build = (RECIPE / "build").read_text()
    image = re.search(r"^image=\$\{POWERCUT_IMAGE:-([^}]+)\}$", build, re.M)
    kernels = re.search(r'^ARG KERNELS="([^"]*)"$', (RECIPE / "Containerfile").read_text(), re.M)
    assert image and kernels
    return image.group(1), set(kernels.group(1).split())


def images_named(text: str) -> set[str]:
    """The container images a workflow's jobs or a manifest's containers run in."""
    return set(re.findall(r"^\s*(?:image|container): (\S+)$", text, re.M))


def test_the_examples_name_kernel_releases_debian_has_and_the_image_the_recipe_builds() -> None:
    apt = shutil.which("apt-cache")
    texts = [(EXAMPLES / n).read_text() for n in ("kernel-ci.github.yml", "kernel-ci.k8s.yml")]
    releases = set(re.findall(r"\b6\.1\.0-\d+-amd64|\b6\.12\.\d+\+deb12-amd64", "\n".join(texts)))
    assert releases
    image, kernels = recipe_image_and_kernels()
    assert image == "localhost/powercut:bookworm"
    assert releases <= kernels, releases - kernels  # the image has every kernel they boot
    for text in texts:
        assert images_named(text) == {image}
    # Positive control: a job that runs in another image is seen.
    planted = texts[0].replace("container: localhost/powercut:bookworm", "container: debian:bookworm")
    assert images_named(planted) == {image, "debian:bookworm"}
    if apt is not None:
        for release in sorted(releases):
            shown = subprocess.run([apt, "show", f"linux-image-{release}"], capture_output=True,
                                   text=True, timeout=120)
            assert shown.returncode == 0 and "Package:" in shown.stdout, release
