# Types of the compiled log walker (devicemapper/_lognative.c); see devicemapper/native.py.
from typing_extensions import Buffer

ABI_VERSION: int
FIELDS: int

Failure = tuple[int, int, int, int, int, int]

def walk(
    fd: int, size: int, sectorsize: int, nr_entries: int, index: int, offset: int, stop: int,
    window: int, /,
) -> tuple[bytes, list[tuple[int, bytes]], int, int, Failure | None]: ...
def apply(
    log_fd: int, target_fd: int, records: Buffer, sectorsize: int, start: int, stop: int,
    buffer: Buffer, iov_max: int, gap: int, discard: bool, final_flush: bool,
    pieces: Buffer | None, /,
) -> tuple[int, int, int, Failure | None]: ...
def walk_apply(
    log_fd: int, target_fd: int, size: int, sectorsize: int, nr_entries: int, index: int,
    offset: int, stop: int, window: int, buffer: Buffer, iov_max: int, gap: int,
    discard: bool, /,
) -> tuple[bytes, list[tuple[int, bytes]], int, int, int, int, int, Failure | None]: ...
def plan(
    records: Buffer, start: int, stop: int, discard: bool, /,
) -> tuple[bytes, list[tuple[int, int, int]], int]: ...
def find_flags(records: Buffer, start: int, stop: int, mask: int, /) -> int: ...
