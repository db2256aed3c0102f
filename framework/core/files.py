"""Files written whole or not at all: the one place powercut replaces a file.

Everything powercut writes and may read back (a run's JSON files, the initramfs and kernel
caches, an exported reproducer) is written to a temporary name beside it and then renamed
over it: rename(2) within one directory is atomic, so a reader, a kill or a full disk
mid-write leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: Path, *, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write; it takes ``path``'s place
    (with ``mode``, if given) when the block ends, and is removed if the block fails."""
    # Process and thread in the name: two writers of one path never share a temporary.
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        yield tmp
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Write ``data`` (text in UTF-8) to ``path`` whole or not at all (see the module)."""
    with replacing(path, mode=mode) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
