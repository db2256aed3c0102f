"""A crash-check task's lanes past the first, each in a forked process of its own.

The lanes share what the first built before the fork (the oracle, the log's header
index) and run their Python work (the oracle check, the tree read) on every guest CPU at
once instead of in turns under one interpreter lock. They meet through a flag every
process sees (``Flag``: a lane hung or failed, all stop after their current state) and a
lock that holds across fork (``Baton``: one writer of the results file at a time); each
sends its report, or its error, back through a pipe.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from collections.abc import Callable, Sequence
from typing import Any

from framework.core import errors

log = logging.getLogger(__name__)


class Flag:
    """A flag every lane's process sees: one byte of memory shared across fork."""

    def __init__(self) -> None:
        self._byte = mmap.mmap(-1, 1)  # anonymous and shared (MAP_SHARED is mmap's default)

    def set(self) -> None:
        self._byte[0] = 1

    def is_set(self) -> bool:
        return self._byte[0] != 0


class Baton:
    """A lock that holds across fork: one byte in a pipe, taken by reading it. Each
    process has one lane, so one thread, taking it."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.write(self._w, b".")

    def __enter__(self) -> None:
        os.read(self._r, 1)

    def __exit__(self, *exc: object) -> None:
        os.write(self._w, b".")


class LaneProcess:
    """``work()``, a lane's checks, in a forked process; its report (JSON) or its error
    comes back through a pipe, and an error sets ``stop`` at once, so the other lanes end
    after their current state. The fork never returns into the caller's code: whatever
    ``work`` does, it ends in ``os._exit``, so the parent's open disks and devices are
    never released twice."""

    def __init__(self, n: int, work: Callable[[], dict[str, Any]], stop: Flag) -> None:
        self.n = n
        self.error: BaseException | None = None
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the lane's process
            status = 1
            try:
                os.close(r)
                try:
                    report: dict[str, Any] = {"report": work()}
                    status = 0
                except errors.PowercutError as exc:
                    stop.set()
                    report = errors.pack(exc)
                except BaseException as exc:  # reported to the parent, never raised here
                    stop.set()
                    log.exception("checking lane %d failed", n)
                    report = {"error": f"{type(exc).__name__}: {exc}"}
                raw = json.dumps(report).encode()
                while raw:
                    raw = raw[os.write(w, raw):]
            finally:
                os._exit(status)
        os.close(w)
        self._pid, self._r = pid, r

    def wait(self) -> dict[str, Any]:
        """The lane's report once its process has ended; an error it met is kept in
        ``error`` (raised by ``raise_first``), and the report is then empty."""
        chunks = []
        try:
            while chunk := os.read(self._r, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(self._r)
            _, status = os.waitpid(self._pid, 0)
        try:
            raw = json.loads(b"".join(chunks) or b"{}")
        except ValueError:  # cut short: the process died while it wrote
            raw = {}
        if "report" in raw:
            return dict(raw["report"])
        if "error" in raw:
            self.error = errors.revive(raw.get("type"), f"checking lane {self.n}: {raw['error']}",
                                       errors.PowercutError)
        else:
            self.error = errors.PowercutError(
                f"checking lane {self.n} ended without a report ({_how_it_ended(status)})")
        return {}


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def raise_first(lanes: Sequence[LaneProcess]) -> None:
    for lane in lanes:
        if lane.error is not None:
            raise lane.error
