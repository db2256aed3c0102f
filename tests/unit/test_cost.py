"""What work costs: CPU seconds of this process and its children, guest seconds."""

from __future__ import annotations

import subprocess
import sys

from framework.core import cost


def test_a_child_s_cpu_and_a_guest_s_uptime_are_counted() -> None:
    before = cost.now()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    cost.add_guest_seconds(2.5)
    spent = cost.now() - before
    assert spent.cpu_s > 0.05  # the child's, once it was waited for
    assert spent.guest_s == 2.5
    assert spent.wall_s > 0 and set(spent.to_dict()) == {"cpu_s", "guest_s", "wall_s"}
