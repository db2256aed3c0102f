"""Input coverage: the cells an op produces, what the filesystem offers, the cells of a
workload before each durability op, cover:N, and ``powercut coverage``."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

from crashcases.execute import execute
from crashcases.workload.cases import load_case
from crashcases.workload.cells import ROWS, THEN, Cell, offered
from crashcases.workload.cover import COVER_ONLY_KINDS, cover_ops
from crashcases.workload.coverage import classify, workload_cells
from crashcases.workload.kinds import FallocMode
from crashcases.workload.model import FsModel
from crashcases.workload.ops import DURABILITY_OPS, Op, OpKind, Workload
from crashcases.workload.selection import OpSelection
from framework.cli import coverage as cli
from framework.cli import main
from recovery.filesystems import adapter_for
from tests.unit.test_operations import assert_tree_matches, model_after, skipped_ops

K = OpKind
B = 4096
CAPS = {fs: frozenset(adapter_for(fs).capabilities) for fs in ("ext4", "xfs", "btrfs", "f2fs")}


def model_of(*ops: Op) -> FsModel:
    model = FsModel()
    for op in ops:
        assert model.check(op) is None, op
        model.apply(op, bytes(op.length))
    return model


# -- one op's cells ------------------------------------------------------------


def test_offsets_and_lengths_are_told_against_the_file_and_a_block() -> None:
    model = model_of(Op(K.CREAT, "f"), Op(K.WRITE, "f", length=2 * B + 100))
    cells = classify(Op(K.PWRITE, "f", offset=2 * B + 100, length=B), model)
    assert cells == {"offset": "eof", "length": "block", "end": "extends",
                     "size-after": "blocks", "change": "same-class"}
    cells = classify(Op(K.PWRITE, "f", offset=B, length=3 * B + 5), model)
    assert (cells["offset"], cells["length"], cells["end"]) == ("boundary", "unaligned", "extends")
    cells = classify(Op(K.PWRITE, "f", offset=10, length=0), model)
    assert (cells["offset"], cells["length"]) == ("in-block", "zero") and "end" not in cells
    assert classify(Op(K.PWRITE, "f", offset=9 * B, length=16 * B), model)["change"] == \
        "grows-class"  # blocks to 64 KiB and more
    assert classify(Op(K.TRUNCATE, "f", size=2 * B), model)["to"] == "shrink-to-boundary"
    assert classify(Op(K.TRUNCATE, "f", size=2 * B + 200), model)["to"] == "grow-in-block"
    assert classify(Op(K.TRUNCATE, "f", size=4 * B + 1), model)["to"] == "grow-past-block"


def test_names_attributes_and_xattrs_have_their_cells() -> None:
    model = model_of(Op(K.MKDIR, "d"), Op(K.CREAT, "d/f"),
                     Op(K.SETXATTR, "d/f", xattr="user.a", length=30))
    assert classify(Op(K.CREAT, "d/" + "x" * 220), model)["name"] == "long"
    assert classify(Op(K.CREAT, "d/f"), model)["target"] == "existing-empty"
    assert classify(Op(K.SYMLINK, "d/l", target="f"), model)["resolves"] == "yes"
    assert classify(Op(K.SYMLINK, "d/l", target="y" * 80), model)["target"] == "block"
    assert classify(Op(K.RENAME_EXCHANGE, "d", dst="d/f"), model)["pair"] == "file-dir"
    assert classify(Op(K.SETXATTR, "d/f", xattr="user.a", length=700), model) == {
        "on": "file", "size": "large", "exists": "replace"}
    assert classify(Op(K.REMOVEXATTR, "d/f", xattr="user.a"), model)["left"] == "none"
    assert classify(Op(K.CHMOD, "d", mode=0o1777), model)["mode"] == "special"
    assert classify(Op(K.UTIMES, "d/f", atime_ns=5, mtime_ns=-1), model)["how"] == "atime-only"
    assert classify(Op(K.SETFLAGS, "d/f", flags=0x10), model)["flag"] == "immutable"


def test_a_filesystem_offers_the_cells_of_what_it_has() -> None:
    ext4, xfs = offered(CAPS["ext4"]), offered(CAPS["xfs"])
    assert not {c for c in ext4 if c.row in ("clone", "dedupe_range", "fallocate:unshare-range")}
    assert {"clone", "dedupe_range", "fallocate:unshare-range"} <= {c.row for c in xfs}
    assert ext4 < offered(None)
    # Every cell of a row a filesystem offers, and every row has some.
    assert all(list(row.cells()) for row in ROWS.values())


# -- a workload's cells ------------------------------------------------------


def cells_of(*ops: Op) -> set[Cell]:
    return {cell for _, cell in workload_cells(ops)}


def test_an_op_counts_once_a_durability_op_follows_and_says_what_covers_it() -> None:
    setup = (Op(K.CREAT, "f"), Op(K.CREAT, "g"), Op(K.SYNC))
    write = Op(K.PWRITE, "f", offset=0, length=100)
    assert not {c for c in cells_of(*setup, write) if c.row == "pwrite"}  # nothing after it
    for durable, then in ((Op(K.FSYNC, "f"), "fsync"), (Op(K.FDATASYNC, "f"), "fdatasync"),
                          (Op(K.WRITE_ODSYNC, "f", offset=0, length=1), "range-sync"),
                          (Op(K.FSYNC_DIR, ""), "fsync_dir(parent)"), (Op(K.SYNCFS, ""), "sync")):
        got = {c.value for c in cells_of(*setup, write, durable) if c.row == "pwrite"
               and c.axis == THEN}
        assert got == {then}, durable
    # The control: an fsync of another file covers the write's inputs, not their durability.
    found = cells_of(*setup, write, Op(K.FSYNC, "g"))
    assert Cell("pwrite", "offset", "zero") in found
    assert not {c for c in found if c.row == "pwrite" and c.axis == THEN}
    # A directory's own fsync, after an op on it.
    found = cells_of(Op(K.MKDIR, "d"), Op(K.CHMOD, "d", mode=0o700), Op(K.FSYNC_DIR, "d"))
    assert Cell("chmod", THEN, "fsync_dir(self)") in found
    # An fsync's own cells: what changed since the file was last made durable.
    found = cells_of(*setup, Op(K.FSYNC, "g"), Op(K.CHMOD, "f", mode=0o600), Op(K.FSYNC, "f"))
    assert {Cell("fsync", "dirty", "clean"), Cell("fsync", "dirty", "metadata")} <= found


# -- cover:N -----------------------------------------------------------------------


@pytest.mark.parametrize("fs", list(CAPS))
def test_cover_produces_nearly_every_offered_cell(fs: str) -> None:
    ops = cover_ops(600, 0, OpSelection(CAPS[fs]))
    model = FsModel()
    for op in ops:
        assert model.check(op) is None, op
        model.apply(op, bytes(op.length))
    assert ops[-1].kind in DURABILITY_OPS
    want = offered(CAPS[fs])
    got = cells_of(*ops) & want
    # Over seeds 0 to 3 every filesystem reached 96.8% or more at 600 ops.
    assert len(got) >= 0.95 * len(want), sorted(want - got)[:20]
    assert {op.kind for op in ops} >= COVER_ONLY_KINDS - {
        k for k in COVER_ONLY_KINDS if not OpSelection(CAPS[fs]).capable(Op(k))}


def marks_to(ops: list[Op], share: float, want: frozenset[Cell]) -> int | None:
    """How many durability ops pass before ``share`` of ``want`` is covered."""
    by = collections.defaultdict(set)
    for index, cell in workload_cells(ops):
        by[index].add(cell)
    seen: set[Cell] = set()
    for n, index in enumerate(sorted(by), 1):
        seen |= by[index] & want
        if len(seen) >= share * len(want):
            return n
    return None


def test_cover_touches_the_cells_early_where_a_list_walked_in_order_does_not() -> None:
    want = offered(CAPS["ext4"])
    cover = marks_to(cover_ops(600, 0, OpSelection(CAPS["ext4"])), 0.5, want)
    assert cover is not None and cover <= 30
    # The controls: a random stream and the enumerated sequences, with as many marks.
    for case in ("random:600", "gen:seq1"):
        w = load_case(case, seed=0, capabilities=CAPS["ext4"])
        reached = marks_to(list(w.ops), 0.5, want)
        assert reached is None or reached > 2 * cover, case


def test_cover_runs_as_its_model_says(tmp_path: Path) -> None:
    w = Workload("cover", 3, tuple(cover_ops(250, 3, OpSelection(CAPS["ext4"]))))
    oracle = execute(w, tmp_path, lambda name: None)
    assert_tree_matches(model_after(w, skipped_ops(oracle)), tmp_path)


def test_cover_is_seeded() -> None:
    a = cover_ops(120, 1, OpSelection(CAPS["btrfs"]))
    assert a == cover_ops(120, 1, OpSelection(CAPS["btrfs"]))
    assert a != cover_ops(120, 2, OpSelection(CAPS["btrfs"]))


# -- the command -----------------------------------------------------------------


def test_the_budget_is_spent_as_the_zoo_spends_it() -> None:
    def step(states: int) -> cli.Step:
        ops = tuple(op for _ in range(states) for op in (Op(K.CREAT, "f"), Op(K.SYNC)))
        return cli.Step("c", (), Workload("c", 0, ops), [2 * i + 1 for i in range(states)])

    timings = cli.Timings([cli._Run("t", "c", 10, 50.0, 20.0, 2.0)])
    steps = [step(100), step(5)]
    cli.spend(steps, "t", timings, 300.0)
    # First: a share of max(300/2, 60) = 150 s from its recording's end: (150 - 20) / 2 states.
    assert steps[0].reached == 65 and steps[0].until == 129
    # Second: what is left, 300 - (50 + 150) = 100 s; its 5 states take 30 s after 50.
    assert steps[1].reached == 5
    assert steps[1].seconds == pytest.approx(50 + 20 + 10)
    more = [step(100), step(5)]
    cli.spend(more, "t", timings, 600.0)  # the control: a larger budget reaches further
    assert more[0].reached > steps[0].reached
    weighted = [step(200), step(5)]
    cli.spend(weighted, "t", timings, 300.0, weights=(3.0, 1.0))  # a plan's weights
    # A share of 300 * 3/4 = 225 s from its recording's end: (225 - 20) / 2 states.
    assert weighted[0].reached == 102


def test_timings_are_read_from_crash_runs(tmp_path: Path) -> None:
    run = tmp_path / "crash-1"
    run.mkdir()
    (run / "plan.json").write_text(json.dumps({"target": "ext4/ordered", "case": "c"}))
    (run / "record.json").write_text(json.dumps({"marks": 40, "ops": 100}))
    states = [{"result": {"duration_s": 3.0}} for _ in range(10)]
    (run / "results.json").write_text(json.dumps({"states": states}))
    for name, when in (("plan.json", 1000), ("record.json", 1090), ("results.json", 1130)):
        os.utime(run / name, (when, when))
    t = cli.read_timings(tmp_path)
    assert t.record_s("ext4/ordered", "c", 40) == 90
    # Two lanes (ext4 mounts two copies at once): 30 s of checks in 15 s, after 25 s.
    assert t.checking("ext4/ordered", "c") == (25.0, 1.5)
    assert t.checking("xfs", "c") == (cli.DEFAULT_TIMING.first_state_s,
                                      cli.DEFAULT_TIMING.state_s)


def test_the_command_prints_a_table_json_and_a_figure(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    figure = tmp_path / "c.png"
    assert main(["coverage", "hand:xattr-fsync", "hand:truncate-fallocate", "--target",
                 "ext4/ordered", "--rows", "--missing", "--figure", str(figure)]) == 0
    out = capsys.readouterr().out
    assert "setxattr" in out and "hand:xattr-fsync" in out and "cells not covered" in out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["coverage", "hand:xattr-fsync", "--target", "ext4/ordered", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (target,) = doc["targets"]
    assert target["offered"] == len(offered(CAPS["ext4"]))
    counted = {(c["row"], c["axis"], c["value"]) for c in target["cells"] if c["count"]}
    assert ("setxattr", "exists", "replace") in counted
    assert ("clone", "source", "aligned") not in counted
    assert 0 < target["covered"] == len(counted) < target["offered"]


def test_every_fallocate_mode_has_a_row() -> None:
    assert {f"fallocate:{m}" for m in FallocMode} <= set(ROWS)
