"""A small guest program that offers only the recovery sweep's point task.

``python -m framework.cli.sweepguest`` serves one ``sweep-point`` request as
``framework.cli.guest`` would. It exists for its start-up: the whole guest
program imports every task (the crash checker and its oracle among them),
which costs seconds per point over 9p under an emulated CPU, more than most
points' recovery; a sweep starts this one instead, once per point.
"""

from __future__ import annotations

import sys

from crashcases.sweep.guest import SWEEP_POINT
from framework.core import agent

TASKS = agent.table(agent.ECHO, SWEEP_POINT)


def main() -> int:
    return agent.main(TASKS)


if __name__ == "__main__":
    sys.exit(main())
