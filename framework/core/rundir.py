"""A run directory: the one place that names its files, writes them atomically and reads
them back with a one-line error.

Every run (crash, cut, sweep, bench, study, ci) gets a directory under
``--results``; the names below are the only spelling of its files anywhere
in powercut. A file is written whole or not at all
(``framework.core.files.write_atomic``), so a reader, a kill or a full disk
mid-write leaves the old file or the new one, never half of one. Reading a file that is missing,
truncated or not the JSON expected is a ``ConfigError`` that names the file
and what is wrong, and nothing is written in reply.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from framework.core.errors import ConfigError
from framework.core.files import write_atomic

# Every run
PLAN = "plan.json"  # what was asked: the run's options, written first
RESULTS = "results.json"  # what came of it, rewritten as results arrive
JUNIT = "junit.xml"
REPORT = "report.html"
CONSOLE = "console.log"  # a guest's serial console, in its own directory
# Studies and ci
STEPS = "steps.json"  # a study's steps and the runs they made
CLAIMS = "claims.json"  # a study's claims judged against its figures
COST = "cost.json"  # what each step and the whole study cost: CPU, guest and wall seconds
CI_SUMMARY = "ci.md"
CI_KCIDB = "ci-kcidb.json"  # the verdicts in KernelCI's words
CI_JUNIT = "ci.xml"
# Crash runs
RECORD = "record.json"  # what the recording did: entries, log bytes, marks, time
ORACLE = "oracle.json"  # what the workload promised (crashcases.oracle.log)
WORKLOAD = "workload.json"  # a workload in JSON (shrink, cut guests)
LOG = "log.img"  # the dm-log-writes log of the data disk
JOURNAL_LOG = "journal-log.img"  # ... and of an external journal's disk
GUEST_RESULTS = "results.jsonl"  # a checking guest's results, one line per state
GUEST_STARTED = "started.txt"  # ... and the states its lanes began, one line per state
HARVEST = "resumed-results.jsonl"  # results a resumed run took over from its guests
SHRINK = "shrink.json"
# Sweeps and benchmarks
RESULTS_CSV = "results.csv"
SAMPLES = "samples.jsonl"
# The zoo
ZOO_DB = "zoo.sqlite"
ZOO_REPORT = "zoo.json"
# Databases
DB = "powercut.sqlite"
CI_DB = "ci.sqlite"


def state_image(key: str, disk: str = "") -> str:
    """The file a crash state's image is kept in (``disk``: "journal" for a journal disk's)."""
    return ("state-" + key.replace("/", "-").replace(":", "-") + (f"-{disk}" if disk else "")
            + ".img.gz")


#: Where a crash run's recording guest keeps its disks (the logs among them) until the run
#: ends; a run that ends keeps its logs beside its results, an interrupted one leaves them
#: here for --resume.
RECORDING_DISKS = "vm-0/disks"


def crash_log(run_dir: Path, name: str = LOG) -> Path:
    """A crash run's log (``name``: LOG or JOURNAL_LOG): beside its results once the run
    ended, in its recording guest's disks while it was interrupted; the first if neither."""
    final = run_dir / name
    if final.is_file():
        return final
    held = run_dir / RECORDING_DISKS / name
    return held if held.is_file() else final


#: record.json's key for a log's digest (``content_digest``): "log.img_digest", ...
DIGEST_SUFFIX = "_digest"
_BLOCK = 4096
_digests: dict[tuple[str, int, int], str] = {}


def content_digest(path: Path) -> str:
    """sha256 over the file's size and each of its non-zero 4 KiB blocks with its offset.

    What the file holds, not how it is stored: a copy that filled its holes with zeros
    has the same digest. Only the allocated parts are read (SEEK_DATA), so a sparse
    log of a gigabyte with a few megabytes in it takes milliseconds."""
    st = path.stat()
    cache_key = (os.fspath(path), st.st_size, st.st_mtime_ns)
    if cache_key in _digests:
        return _digests[cache_key]
    import hashlib  # here, not at the top: OpenSSL's load costs every command milliseconds

    h = hashlib.sha256(str(st.st_size).encode())
    zero = bytes(_BLOCK)
    with open(path, "rb") as f:
        fd, pos = f.fileno(), 0
        while pos < st.st_size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
                end = os.lseek(fd, start, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # nothing but holes after pos
                start, end = pos, st.st_size  # no SEEK_DATA here: read the rest
            start -= start % _BLOCK
            f.seek(start)
            offset = start
            while offset < end:
                block = f.read(_BLOCK)
                if not block:
                    break
                if block != zero[:len(block)]:
                    h.update(offset.to_bytes(8, "little") + block)
                offset += len(block)
            pos = max(end, offset)
    _digests[cache_key] = h.hexdigest()
    return _digests[cache_key]


def verified_log(run_dir: Path, name: str = LOG) -> Path:
    """``crash_log``, after checking it still holds what was recorded (when the recording
    noted its digest in record.json): a damaged or replaced log is a one-line ConfigError."""
    path = crash_log(run_dir, name)
    record = run_dir / RECORD
    if not path.is_file() or not record.is_file():
        return path
    try:
        want = json.loads(record.read_bytes()).get(name + DIGEST_SUFFIX)
    except (ValueError, AttributeError):
        raise ConfigError(f"{record}: not valid JSON; it was cut short or changed by hand") from None
    if want and content_digest(path) != want:
        raise ConfigError(f"{path}: the log changed since it was recorded (its digest is not "
                          f"the one in {RECORD}): damaged or replaced; record the run again")
    return path


def report_for(run_id: int) -> str:
    """A report written beside the database, for a run without a directory of its own."""
    return f"report-{run_id}.html"


def cut_oracle(target_slug: str) -> str:
    """A power-cut run's oracle of one target, in its guest's directory."""
    return f"oracle-{target_slug}.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader (or a kill mid-write) sees the old file or the new one."""
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True, default=str))


#: Below this much free space the filesystem holding a run directory counts as full.
SPACE_FLOOR_BYTES = 1 << 20


def space_problem(path: Path) -> OSError | None:
    """ENOSPC naming ``path`` when the filesystem it is on is (nearly) full, else None."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_bavail * st.f_frsize >= SPACE_FLOOR_BYTES:
        return None
    return OSError(errno.ENOSPC, "No space left on device", os.fspath(path))


def read_json(path: Path, what: str) -> Any:
    """The JSON in ``path``; a one-line ConfigError naming it when it is missing or is not
    JSON (``what``: the file's role, for the message)."""
    try:
        text = path.read_bytes()  # decoded by json.loads: a bad byte is a ValueError there
    except FileNotFoundError:
        raise ConfigError(f"{path}: no {what} here") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: the {what} is not valid JSON ({exc}); "
                          "it was cut short or changed by hand") from None


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """``read_json`` for a file that must hold a JSON object."""
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the {what} is not a JSON object")
    return data


#: The layout of results.json that this powercut writes, under its "format" key (each kind
#: of run has its own layout; the number moves when any of them changes). A results.json
#: without the key is format 1: what powercut wrote before the key existed.
RESULTS_FORMAT = 1


def write_results(run_dir: Path, data: Mapping[str, Any]) -> Path:
    """A run's results.json, with the format number: the one writer of every kind's."""
    path = run_dir / RESULTS
    write_json_atomic(path, {**data, "format": RESULTS_FORMAT})
    return path


def read_results(run_dir: Path, what: str) -> dict[str, Any]:
    """A run's results.json (``what``: whose, for messages), after checking its format
    number: a file this powercut cannot read is a one-line ConfigError naming it."""
    path = run_dir / RESULTS
    data = read_json_object(path, what)
    found = data.get("format", 1)
    if not isinstance(found, int) or not 1 <= found <= RESULTS_FORMAT:
        raise ConfigError(f"{path}: results of format {found!r}; this powercut reads format "
                          f"{RESULTS_FORMAT} and before (a newer powercut wrote it?)")
    return data
