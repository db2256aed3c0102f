"""Facts about where a run happened, recorded with every run."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from framework.core import command
from framework.core.errors import PowercutError
from framework.core.machine.base import project_root

#: The revision of a copy without git's files (the container image sets it when it is built).
REVISION_ENV = "POWERCUT_REVISION"


def git_revision(root: Path | None = None) -> str | None:
    try:
        res = command.run(["git", "-C", root or project_root(), "describe", "--always", "--dirty"],
                          timeout_s=10, ok_status=None)
    except PowercutError:
        res = None
    if res is not None and res.status == 0 and res.stdout.strip():
        return res.stdout.strip()
    return os.environ.get(REVISION_ENV) or None


def command_line() -> str:
    return shlex.join(["powercut", *sys.argv[1:]])


def host_facts() -> dict[str, Any]:
    return {"host_kernel": platform.release(), "python": platform.python_version(),
            "host": platform.node()}
