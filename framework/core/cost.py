"""What work costs: host CPU seconds and guest seconds.

CPU seconds are this process's and its waited-for children's user and system
time (getrusage(2)); qemu is a child, so a guest's emulation counts once it
has exited. Guest seconds are the wall time guests were up, summed over
guests: under TCG each guest keeps a host core busy, so guest seconds are
what a run asks of a machine, and what N shards divide."""

from __future__ import annotations

import resource
import threading
from dataclasses import dataclass

from framework.core import clock

_lock = threading.Lock()
_guest_s = 0.0


def add_guest_seconds(seconds: float) -> None:
    """A guest that was up ``seconds`` has gone down."""
    global _guest_s
    with _lock:
        _guest_s += seconds


@dataclass(frozen=True, slots=True)
class Cost:
    cpu_s: float
    guest_s: float
    wall_s: float

    def __sub__(self, other: Cost) -> Cost:
        return Cost(self.cpu_s - other.cpu_s, self.guest_s - other.guest_s,
                    self.wall_s - other.wall_s)

    def to_dict(self) -> dict[str, float]:
        return {"cpu_s": round(self.cpu_s, 3), "guest_s": round(self.guest_s, 3),
                "wall_s": round(self.wall_s, 3)}


def now() -> Cost:
    """The counters now; a difference of two is what happened in between."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    with _lock:
        guest = _guest_s
    return Cost(own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, guest,
                clock.monotonic())
