"""The powercut commands a recall starts, and its stop.

Every step of a recall (a workload's ``powercut crash``, a confirmation's crash run, a
same-image ``powercut recheck``) is a process of its own session, so the recall decides
when it stops rather than the terminal: at the end of its share of time it gets SIGTERM
(it keeps what it checked and closes its guest), and if it has not ended five minutes
later its whole process group gets SIGKILL. When the recall itself is stopped (Ctrl-C,
or SIGTERM, which the CLI turns into the same exception) every command still running is
told to stop the same way, whichever thread waits for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence

from framework.core import clock

#: How long a command told to stop gets to close its guest before its group is killed.
GRACE_S = 300.0


class Stop:
    """The recall is stopping (Ctrl-C, SIGTERM): no new step starts, running ones are
    told to stop (each crash command keeps what it checked)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen[str]] = set()

    def add(self, proc: subprocess.Popen[str]) -> None:
        with self.lock:
            self.live.add(proc)
        if self.event.is_set():
            proc.send_signal(signal.SIGTERM)

    def discard(self, proc: subprocess.Popen[str]) -> None:
        with self.lock:
            self.live.discard(proc)

    def stop(self) -> None:
        self.event.set()
        with self.lock:
            for proc in self.live:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)


#: The recall's stop: one per process, cleared when a recall ends.
STOP = Stop()


def _wind_down(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM, then SIGKILL to the command's group if it has not ended in GRACE_S."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return out or "", err or ""


def run_command(argv: Sequence[str], ends: Callable[[float], float], *,
                keep_stdout: bool = False) -> tuple[int, str, str, bool]:
    """Run ``argv`` in its own session under the recall's stop until it exits or the time
    ``ends(now)`` gives (on the monotonic clock, asked again every two seconds) has passed.

    Returns its exit status, its standard output (when ``keep_stdout``) and error, and
    whether it was told to stop at its time's end. If the waiting thread is interrupted
    (the recall's Ctrl-C or SIGTERM arrives in it), the command is wound down before the
    exception goes on: no command outlives the recall."""
    with subprocess.Popen(list(argv), stdout=subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        STOP.add(proc)
        try:
            while True:
                now = clock.monotonic()
                end = ends(now)
                try:
                    out, err = proc.communicate(timeout=max(min(end - now, 2.0), 0.01))
                    return proc.returncode, out or "", err or "", False
                except subprocess.TimeoutExpired:
                    if clock.monotonic() < ends(clock.monotonic()):
                        continue
                out, err = _wind_down(proc)
                return proc.returncode, out, err, True
        except BaseException:
            _wind_down(proc)
            raise
        finally:
            STOP.discard(proc)
