"""Facts about where a run happened, recorded with every run."""

from __future__ import annotations

import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from framework.core import command
from framework.core.errors import PowercutError
from framework.core.machine.base import project_root


def git_revision(root: Path | None = None) -> str | None:
    try:
        res = command.run(["git", "-C", root or project_root(), "describe", "--always", "--dirty"],
                          timeout_s=10, ok_status=None)
    except PowercutError:
        return None
    return res.stdout.strip() or None if res.status == 0 else None


def command_line() -> str:
    return shlex.join(["powercut", *sys.argv[1:]])


def host_facts() -> dict[str, Any]:
    return {"host_kernel": platform.release(), "python": platform.python_version(),
            "host": platform.node()}
