"""Handles: objects that hold something until ``close()`` (a file descriptor, a device, a
database, a machine), each a context manager that closes it when the block ends, also on
error."""

from __future__ import annotations

import abc
import os
from typing import Self


class Handle(abc.ABC):
    """Something to close; ``with`` closes it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the handle holds."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FdHandle(Handle):
    """A handle on one open file descriptor, ``_fd`` (-1 once closed: closing again is a
    no-op)."""

    _fd: int = -1

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def fileno(self) -> int:
        return self._fd
