"""The CI examples in .ci/examples are valid YAML whose powercut command lines parse."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from framework.cli import build_parser

EXAMPLES = Path(__file__).resolve().parents[2] / ".ci" / "examples"


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
