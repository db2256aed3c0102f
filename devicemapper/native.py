"""The log walked natively: the header walk and the replay loop in C.

A replay spends its time per entry, not per byte: parsing a header, building a
``LogEntry`` and queueing its write cost about 9 us in Python on the host and tens of
times that in an emulated guest, while the writes themselves are a fraction of it.
devicemapper/_lognative*.c run those loops (the walk that indexes a log, the queue of
reads and ``pwritev`` runs, both in one pass over the log where the headers are not
indexed yet, and the plan of pieces that later entries overwrite) and nothing else: Python still decides what to replay, applies discards (rare, and each a
choice among BLKDISCARD, hole punching and zeros) and builds every error message.

Why a plain C extension. Debian can build compiled code for Python three ways: a C
extension (gcc and the interpreter's headers), cffi in API mode (the same compiler and
headers, and cffi in the venv) and Rust through maturin (cargo, and pyo3 and maturin
fetched from crates.io and PyPI at build time). The hot loops are plain C in the first
two and as fast in the third, and they are called once per replay step, not per
entry, so a binding's per-call cost does not matter; what differs is what surrounds
them. A C extension needs nothing beyond ``gcc`` and ``python3-dev``, builds offline,
and returns the index and the marks as Python objects directly; cffi would add a
dependency and glue for out-parameters; Rust needs network access at build time. On
a recorded 17,497-entry ext4 log the compiled walk indexes every header 12 to 24
times faster than the Python one (docs/measurements/2026-11-26-native-replay.md).

How it is found. ``make setup`` builds ``devicemapper/_lognative*.so`` into the source
tree (``python -m devicemapper.build_native``); the guest runs this tree and the same venv
read-only over 9p, so it imports the same file. Nothing is compiled at run time. A
module built from other sources (its ``ABI_VERSION`` differs) is ignored with a
warning, a missing one quietly: the Python path (logformat, apply) is the reference
and the fallback.

Choosing. ``native=None`` (the default everywhere) means: compiled when available,
unless the environment sets ``POWERCUT_NATIVE=0``; ``native=True`` demands it (tests
of the compiled path); ``native=False`` forces Python.

Errors. The C functions never raise for a bad log or a failed write; they return
(code, entry index, byte offset, errno, a, b), and the functions below build the same
one-line ``LogFormatError`` or ``ReplayError`` the Python path raises. A header the
walk rejects is parsed again by ``LogReader.read_entry``, which raises the reference
error itself.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

from devicemapper.apply import ReplayError, beyond_any_device, write_failed
from devicemapper.logformat import LogReader
from framework.core.errors import LogFormatError, MissingPrerequisite

log = logging.getLogger(__name__)

ABI_VERSION = 3
"""The version of devicemapper/_lognative.c this module speaks."""
FIELDS = 5
"""uint64 per entry in an index: sector, nr_sectors, flags, data_len, header offset."""
SECTOR, NR_SECTORS, FLAGS, DATA_LEN, HEADER_OFFSET = range(FIELDS)

# Failure codes of _lognative.c.
E_HEADER, E_READ, E_SHORT, E_WRITE, E_BEYOND = 1, 2, 3, 4, 5

Failure = tuple[int, int, int, int, int, int]
"""(code, entry index, byte offset, errno, a, b) as _lognative.c reports a failure."""

_checked = False
_lib: ModuleType | None = None


def _load() -> ModuleType | None:
    global _checked, _lib
    if not _checked:
        _checked = True
        try:
            from devicemapper import _lognative
        except ImportError:
            log.debug("devicemapper._lognative is not built (make setup); walking in Python")
        else:
            if getattr(_lognative, "ABI_VERSION", None) == ABI_VERSION:
                _lib = _lognative
            else:
                log.warning(
                    "%s is built from other sources (ABI %s, want %s); walking in Python "
                    "until make setup rebuilds it",
                    _lognative.__file__,
                    getattr(_lognative, "ABI_VERSION", None),
                    ABI_VERSION,
                )
    return _lib


def available() -> bool:
    """Whether the compiled module is built and speaks this version."""
    return _load() is not None


def library(native: bool | None = None) -> ModuleType | None:
    """The compiled module to use, or None for the Python path (see the module doc)."""
    if native is False:
        return None
    if native is None and os.environ.get("POWERCUT_NATIVE", "") == "0":
        return None
    lib = _load()
    if lib is None and native:
        raise MissingPrerequisite(
            "the compiled log walker (devicemapper._lognative) is not built: run make setup "
            "(it needs gcc and python3-dev)"
        )
    return lib


def walk_error(reader: LogReader, failure: Failure) -> LogFormatError:
    """The error the Python walk raises where the compiled walk stopped."""
    code, index, offset, err, _, _ = failure
    if code == E_READ:
        return reader.read_failed(index, offset, os.strerror(err))
    # A header the walk rejected: the reference parser says why, in its own words.
    try:
        reader.read_entry(index, offset)
    except LogFormatError as exc:
        return exc
    return LogFormatError(
        f"{reader.path}: entry {index} at byte {offset}: the compiled walk rejected a header "
        "the Python parser accepts (please report this log)"
    )


def apply_error(
    reader: LogReader, target_name: str, failure: Failure
) -> LogFormatError | ReplayError:
    """The error the Python path raises for what stopped the compiled replay."""
    code, index, offset, err, a, b = failure
    if code == E_HEADER:
        return walk_error(reader, failure)
    if code == E_READ:
        return reader.read_failed(index, offset, os.strerror(err))
    if code == E_SHORT:
        return reader.short_read(index, offset, a, b)
    if code == E_WRITE:
        return write_failed(target_name, index, a, offset, os.strerror(err))
    if code == E_BEYOND:
        return beyond_any_device(target_name, index, offset)
    return ReplayError(f"{target_name}: entry {index}: replay failed (code {code})")

