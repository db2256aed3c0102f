"""The compiled log walk and replay loop against the Python reference, on fuzzed logs.

Both paths must give the same index (records, marks), the same images after every
step of an incremental replay, with and without ``latest`` (each block written once
per replay call), and the same one-line errors on corrupt or truncated logs.
"""

from __future__ import annotations

import itertools
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from devicemapper import native
from devicemapper.logformat import LogFlag, LogReader, LogWriter
from devicemapper.logindex import LogIndex
from devicemapper.replay import Replayer, ReplayError
from framework.core.errors import LogFormatError, MissingPrerequisite
from tests.unit.test_logformat import MALFORMED

pytestmark = pytest.mark.skipif(
    not native.available(), reason="the compiled log walker is not built: run make setup"
)

DISK_SECTORS = 96

# One log operation: (kind, sector, sectors, flags or mark text seed).
op = st.one_of(
    st.tuples(st.just("write"), st.integers(0, DISK_SECTORS - 1), st.integers(1, 24),
              st.sampled_from([0, LogFlag.FUA, LogFlag.FLUSH, LogFlag.FLUSH | LogFlag.FUA,
                               LogFlag.METADATA])),
    st.tuples(st.just("discard"), st.integers(0, DISK_SECTORS + 8), st.integers(1, 40),
              st.just(0)),
    st.tuples(st.just("flush"), st.just(0), st.just(0), st.just(0)),
    st.tuples(st.just("mark"), st.just(0), st.just(0), st.integers(0, 5)),
)
MARK_TEXTS = ["a", "b", "pc-1", "pc-1", "ü-mark", "bytes-\udcff"]


@pytest.fixture()
def work(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def build(path: Path, ops: list[tuple[str, int, int, int]], sectorsize: int, seed: int) -> None:
    rng = random.Random(seed)
    with LogWriter(path, sectorsize=sectorsize, end_mark=seed % 2 == 0) as w:
        for kind, sector, nr, extra in ops:
            if kind == "write":
                w.write(sector, rng.randbytes(nr * sectorsize), LogFlag(extra))
            elif kind == "discard":
                w.discard(sector, nr)
            elif kind == "flush":
                w.flush()
            else:
                w.mark(MARK_TEXTS[extra])


def index_of(path: Path, native_walk: bool) -> LogIndex:
    with LogReader(path) as reader:
        index = LogIndex(reader, native_walk=native_walk)
        index.extend_to(reader.nr_entries)
        return index


def replay_steps(log: Path, target: Path, steps: list[int], *, native_loop: bool, latest: bool,
                 discard: bool) -> list[tuple[bytes, int, int]]:
    """The target's bytes, the position and the entries applied after each step."""
    out = []
    with Replayer(log, target, native=native_loop, latest=latest, discard=discard) as rp:
        for stop in steps:
            rp.replay_to(stop)
            out.append((target.read_bytes(), rp.position, rp.entries_applied))
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(op, min_size=1, max_size=60),
    sectorsize=st.sampled_from([512, 4096]),
    seed=st.integers(0, 1 << 16),
    cuts=st.lists(st.floats(0, 1), min_size=1, max_size=5),
    initial=st.sampled_from(["random", "empty", "short"]),
    discard=st.booleans(),
)
def test_both_paths_index_and_replay_alike(
    work: Path, ops: list[tuple[str, int, int, int]], sectorsize: int, seed: int,
    cuts: list[float], initial: str, discard: bool,
) -> None:
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        d = Path(tmp)
        log = d / "fuzz.log"
        build(log, ops, sectorsize, seed)
        py, c = index_of(log, False), index_of(log, True)
        assert c.native and not py.native
        assert c.records == py.records and c.marks == py.marks
        with LogReader(log) as reader:
            entries = list(reader)
            assert list(c) == entries
            n = reader.nr_entries
        changes = list(itertools.accumulate((e.is_write or e.is_discard for e in entries),
                                            initial=0))
        assert c.content_changes() == py.content_changes() == changes
        steps = sorted({min(n - 1, int(f * n)) for f in cuts})
        rng = random.Random(seed)
        size = {"random": DISK_SECTORS * sectorsize, "empty": 0,
                "short": DISK_SECTORS * sectorsize // 3}[initial]
        content = rng.randbytes(size)
        results = {}
        for native_loop in (False, True):
            for latest in (False, True):
                target = d / f"t-{native_loop}-{latest}.img"
                target.write_bytes(content)
                results[native_loop, latest] = replay_steps(
                    log, target, steps, native_loop=native_loop, latest=latest, discard=discard)
        reference = results[False, False]
        for key, got in results.items():
            assert got == reference, key
        event(f"{len(steps)} steps, {sectorsize}-byte sectors")


def test_latest_writes_each_block_once_per_call(tmp_path: Path) -> None:
    log = tmp_path / "over.log"
    with LogWriter(log) as w:
        for i in range(20):
            w.write(0, bytes([i]) * 4096)  # the same 8 sectors, twenty times
        w.write(4, bytes([99]) * 512)  # a partial overwrite of the last
        w.discard(6, 1)
    written = {}
    for native_loop in (False, True):
        for latest in (False, True):
            target = tmp_path / f"t-{native_loop}-{latest}.img"
            target.write_bytes(bytes(8192))
            with Replayer(log, target, native=native_loop, latest=latest) as rp:
                rp.replay_to(21)
                written[native_loop, latest] = rp.bytes_written
            expected = bytes([19]) * 2048 + bytes([99]) * 512 + bytes([19]) * 512 + bytes(512)
            assert target.read_bytes()[:4096] == expected + bytes([19]) * 512
    assert written[False, False] == written[True, False] == 20 * 4096 + 512
    # Sectors 0-3 and 5 and 7 of the 20th write, sector 4 of the last; 6 is discarded.
    assert written[False, True] == written[True, True] == 7 * 512


# -- corrupt and truncated logs ------------------------------------------------------------


def _error(fn: object) -> str:
    assert callable(fn)
    try:
        fn()
    except (LogFormatError, ReplayError) as exc:
        assert "\n" not in str(exc)
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def _outcomes(log: Path, target: Path, native_loop: bool) -> list[str]:
    def index() -> None:
        index_of(log, native_loop)

    def replay() -> None:
        target.write_bytes(bytes(8192))
        with Replayer(log, target, native=native_loop) as rp:
            rp.replay_to(rp.nr_entries - 1)

    def search() -> None:
        target.write_bytes(bytes(8192))
        with Replayer(log, target, native=native_loop) as rp:
            rp.replay_to_mark("m")
            rp.replay_next_fua(-1)

    def until() -> None:
        target.write_bytes(bytes(8192))
        with Replayer(log, target, native=native_loop) as rp:
            rp.replay_range(0, rp.nr_entries, until=lambda e: e.is_fua)

    return [_error(index), _error(replay), _error(search), _error(until)]


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_logs_fail_alike_on_both_paths(tmp_path: Path, name: str) -> None:
    raw, _, _ = MALFORMED[name]
    log = tmp_path / "bad.log"
    log.write_bytes(raw)
    target = tmp_path / "t.img"
    python, compiled = _outcomes(log, target, False), _outcomes(log, target, True)
    assert compiled == python
    assert python[0] != "no error"  # a positive control: each of these logs is bad


def _small_log(path: Path) -> bytes:
    with LogWriter(path) as w:
        w.write(4, bytes([1]) * 1024)
        w.flush()
        w.fua_write(0, bytes([2]) * 512)
        w.mark("m")
        w.discard(4, 1)
        w.write(6, bytes([3]) * 512)
        w.fua_write(9, bytes([4]) * 2048)
    return path.read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mutations=st.lists(st.tuples(st.integers(0, 14 * 512), st.binary(min_size=1, max_size=8)),
                       max_size=3),
    cut=st.one_of(st.none(), st.integers(0, 15 * 512)),
)
def test_fuzzed_logs_fail_alike_on_both_paths(
    work: Path, mutations: list[tuple[int, bytes]], cut: int | None
) -> None:
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        log = Path(tmp) / "fuzz.log"
        raw = _small_log(log)
        for offset, data in mutations:
            raw = (raw[:offset] + data + raw[offset + len(data) :])[: len(raw)]
        if cut is not None:
            raw = raw[:cut]
        log.write_bytes(raw)
        target = Path(tmp) / "t.img"
        python = _outcomes(log, target, False)
        assert _outcomes(log, target, True) == python
        event("valid" if python[0] == "no error" else "corrupt")


def test_a_write_beyond_any_device_fails_alike_and_poisons(tmp_path: Path) -> None:
    log = tmp_path / "far.log"
    with LogWriter(log) as w:
        w.write(0, bytes([1]) * 512)
        w.write(1 << 60, bytes([2]) * 512)  # 2**69 bytes in: past any off_t
    messages = []
    for native_loop in (False, True):
        target = tmp_path / "t.img"
        target.write_bytes(bytes(4096))
        with Replayer(log, target, native=native_loop) as rp:
            with pytest.raises(ReplayError, match="is beyond any device") as info:
                rp.replay_to(1)
            messages.append(str(info.value))
            with pytest.raises(ReplayError, match="an earlier replay step failed"):
                rp.replay_to(2)
    assert messages[0] == messages[1]
    assert f"byte {(1 << 60) * 512}" in messages[0]


# -- choosing the path ---------------------------------------------------------------------


def test_powercut_native_0_chooses_python_and_native_true_insists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "x.log"
    _small_log(log)
    monkeypatch.delenv("POWERCUT_NATIVE", raising=False)
    with LogReader(log) as reader:
        assert LogIndex(reader).native
        monkeypatch.setenv("POWERCUT_NATIVE", "0")
        assert not LogIndex(reader).native
        assert LogIndex(reader, native_walk=True).native
        monkeypatch.delenv("POWERCUT_NATIVE")
        monkeypatch.setattr(native, "_lib", None)  # as if it were not built
        assert not LogIndex(reader).native
        with pytest.raises(MissingPrerequisite, match="make setup"):
            LogIndex(reader, native_walk=True)


def test_a_module_built_from_other_sources_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(native, "ABI_VERSION", native.ABI_VERSION + 1)
    monkeypatch.setattr(native, "_checked", False)
    monkeypatch.setattr(native, "_lib", None)
    assert not native.available()
    assert "built from other sources" in caplog.text
    monkeypatch.undo()
    assert native.available()


def test_the_guest_finds_the_module_in_the_source_tree() -> None:
    # The guest imports this tree read-only over 9p: the module must live in it, next to
    # the Python that loads it, not in a build directory or a cache.
    lib = native.library(True)
    assert lib is not None
    assert Path(lib.__file__).parent == Path(native.__file__).parent
    assert os.path.basename(lib.__file__).startswith("_lognative.")


def test_doctor_says_whether_the_compiled_walker_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from framework.cli.doctor import check_python

    def walker() -> tuple[bool, str]:
        check = next(c for c in check_python() if c.name == "compiled log walker")
        return check.ok, check.fix

    assert walker() == (True, "")
    monkeypatch.setattr(native, "_lib", None)  # as if it were not built
    ok, fix = walker()
    assert not ok and "make setup" in fix and "gcc" in fix


def test_an_index_of_another_log_is_refused(tmp_path: Path) -> None:
    one, other = tmp_path / "one.log", tmp_path / "other.log"
    _small_log(one)
    with LogWriter(other, sectorsize=4096) as w:
        w.write(0, bytes(4096))
    target = tmp_path / "t.img"
    target.write_bytes(bytes(8192))
    with LogReader(other) as reader, pytest.raises(ReplayError, match="of another log"):
        Replayer(one, target, index=LogIndex(reader))
