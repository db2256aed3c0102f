"""The one place that reads clocks, so tests can patch it.

``monotonic()`` is for durations, ``wall()`` only for timestamps.
"""

from __future__ import annotations

import datetime as _dt
import time as _time


def monotonic() -> float:
    return _time.perf_counter()


def wall() -> float:
    return _time.time()


def timestamp() -> str:
    """UTC wall-clock time as ISO 8601, for records."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class Deadline:
    """One deadline shared by every wait of an operation (labgrid's Timeout)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._end = monotonic() + timeout_s

    def remaining(self) -> float:
        return max(0.0, self._end - monotonic())

    @property
    def expired(self) -> bool:
        return monotonic() >= self._end


def sleep(seconds: float) -> None:
    _time.sleep(seconds)
