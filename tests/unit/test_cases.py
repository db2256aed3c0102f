"""Case generation: determinism, counts, packing."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from crashcases.oracle.verify import verify
from crashcases.workload import packing, sequences
from crashcases.workload.bursts import burst
from crashcases.workload.cases import list_cases, load_case
from crashcases.workload.cover import COVER_ONLY_FALLOC_MODES, COVER_ONLY_KINDS
from crashcases.workload.kinds import CAPABILITIES
from crashcases.workload.model import FsModel
from crashcases.workload.ops import (
    DURABILITY_OPS,
    FallocMode,
    Op,
    OpKind,
    Workload,
    WorkloadError,
)
from crashcases.workload.packing import pack
from crashcases.workload.selection import OpSelection
from crashcases.workload.sequences import durables
from crashcases.workload.streams import random_ops
from framework.core.errors import ConfigError
from recovery.filesystems import persistence_rules
from recovery.persistence import posix_strict
from recovery.targets import get_target
from tests.unit.test_oracle import assert_clean_everywhere, record

K = OpKind
#: What the generators used before the newer ops, and still use without capabilities.
CLASSIC_KINDS = {
    K.CREAT, K.MKDIR, K.WRITE, K.PWRITE, K.APPEND, K.TRUNCATE, K.FALLOCATE, K.RENAME, K.LINK,
    K.UNLINK, K.RMDIR, K.SYMLINK, K.SETXATTR, K.REMOVEXATTR, K.FSYNC, K.FDATASYNC, K.SYNC,
    K.FSYNC_DIR,
}


def namespace_of(op: Op) -> str | None:
    return op.path.split("/")[0] if op.path else None


def test_every_listed_case_loads_and_executes(tmp_path: Path) -> None:
    for i, spec in enumerate(list_cases()):
        if spec == "file:PATH":
            continue  # a placeholder for a saved workload, not a case to load
        w = load_case(spec, seed=1, max_sequences=3)
        assert w.ops and w.durability_count >= 1, spec
        oracle, marks = record(w, tmp_path / str(i))
        assert len(marks) == w.durability_count == len(oracle.marks)


@pytest.mark.parametrize(
    "spec", ["gen:seq1", "gen:seq2", "gen:seq3", "gen:burst", "gen:chain", "random:80",
             "hand:link-unlink"]
)
def test_cases_are_deterministic_for_a_seed(spec: str) -> None:
    a = load_case(spec, seed=7, max_sequences=20)
    assert a == load_case(spec, seed=7, max_sequences=20)
    assert Workload.from_json(a.to_json()) == a


def test_seeds_change_samples_and_random_runs() -> None:
    assert load_case("random:50", seed=1) != load_case("random:50", seed=2)
    assert load_case("gen:seq3", seed=1, max_sequences=5) != load_case(
        "gen:seq3", seed=2, max_sequences=5
    )


def test_seq1_is_every_variant_with_every_applicable_durability_op() -> None:
    variants = sequences._variants()
    expected = 0
    for _, op in variants:
        model = FsModel()
        for setup_op in [*sequences.setup_ops(), op]:
            assert model.check(setup_op) is None
            model.apply(setup_op, bytes(setup_op.length))
        expected += len(durables(op, model))
    kinds_covered = {op.kind for _, op in variants}
    assert kinds_covered == set(CLASSIC_KINDS) - DURABILITY_OPS  # every classic op has variants
    seqs = sequences.seq1()
    assert len(seqs) == expected
    w = load_case("gen:seq1", seed=0)
    assert len({namespace_of(op) for op in w.ops if op.kind is not K.SYNC}) == expected
    # Each sequence: setup (ending in sync), one op, one durability op.
    assert all(ops[-1].kind in DURABILITY_OPS and ops[-3].kind is K.SYNC for _, ops in seqs)


def test_seq2_is_every_valid_ordered_pair() -> None:
    variants = sequences._variants()
    valid = 0
    for (_, a), (_, b) in itertools.product(variants, repeat=2):
        model = FsModel()
        ok = True
        for op in [*sequences.setup_ops(), a, b]:
            if model.check(op) is not None:
                ok = False
                break
            model.apply(op, bytes(op.length))
        valid += ok
    assert len(variants) ** 2 > valid > len(variants) ** 2 // 2
    assert len(sequences.seq2()) == valid
    w = load_case("gen:seq2", seed=0, max_sequences=40)
    assert len({namespace_of(op) for op in w.ops if op.kind is not K.SYNC}) == 40


def test_seq3_count_is_capped() -> None:
    w = load_case("gen:seq3", seed=4, max_sequences=12)
    spaces = {namespace_of(op) for op in w.ops if op.kind is not K.SYNC}
    assert 1 <= len(spaces) <= 12
    assert len(spaces) >= 10  # duplicates of one triple are rare


def test_bursts_have_no_durability_between_most_ops_and_end_in_one_of_what_they_named() -> None:
    bursts = burst(3, 300)
    assert len(bursts) == 300
    setup = len(sequences.setup_ops())
    quiet = new_dir = 0
    for _, label, ops in bursts:
        body = ops[setup:]
        assert ops[:setup] == sequences.setup_ops() and label.count(";") == len(body) - 1
        core = [op for op in body[:-1] if op.kind not in DURABILITY_OPS]
        assert len(core) >= 2 and body[-1].kind in (K.FSYNC, K.FDATASYNC, K.FSYNC_DIR)
        named = {""}
        for op in core:
            for path in (op.path, op.dst):
                while path:
                    named.add(path)
                    path = path.rpartition("/")[0]
        assert body[-1].path in named  # the durability op is of a name the burst used
        quiet += not any(op.kind in DURABILITY_OPS for op in body[:-1])
        new_dir += any(op.kind is K.MKDIR and op.path.startswith("n") for op in core) and any(
            op.path.startswith("n/") for op in core)
    # Most bursts have no durability op before their last; many act in a directory they made.
    assert quiet > 150 and new_dir > 50
    w = load_case("gen:burst", seed=3, max_sequences=40)
    assert len({namespace_of(op) for op in w.ops if op.kind is not K.SYNC}) == 40
    assert load_case("gen:burst", seed=4, max_sequences=5) != load_case("gen:burst", seed=3, max_sequences=5)


def test_chains_persist_the_file_then_move_it_and_persist_what_holds_it() -> None:
    from crashcases.oracle.log import NodeKind
    from crashcases.workload.chains import chain, chains

    everything = OpSelection(frozenset({"fallocate", "punch-hole", "zero-range"}))
    found = chains(everything)
    assert len(found) > 900 and len({label for label, _ in found}) == len(found)
    setup = len(sequences.setup_ops())
    moved = 0
    for _label, ops in found:
        body = ops[setup:]
        assert ops[:setup] == sequences.setup_ops()
        fsyncs = [i for i, op in enumerate(body) if op.kind in DURABILITY_OPS]
        assert len(fsyncs) == 2 and fsyncs[1] == len(body) - 1  # one in the middle, one last
        subject = body[fsyncs[0]].path
        assert body[fsyncs[0]].kind is K.FSYNC  # of the file, under the name it has then
        model = FsModel()
        for op in ops:
            model.apply(op, bytes(op.length))
        last = body[-1]
        # The last durability op is of the file (under its name now) or of a directory that
        # holds one of its names, old or new.
        node = model.lookup(last.path)
        names = [subject, *(op.dst for op in body if op.dst),
                 *(op.path for op in body if op.kind is K.CREAT)]
        holds = {p.rpartition("/")[0] for p in names}
        assert (last.kind is K.FSYNC_DIR and last.path in holds) or (
            node is not None and model.kind_of(last.path) is not NodeKind.DIR)
        moved += any(op.kind in (K.RENAME, K.LINK) for op in body[fsyncs[0]:])
    assert moved > len(found) // 3
    # Seeded order: a sample's first part is a sample of the whole, not its first moves.
    first = [label for _, label, _ in chain(0, 50, everything)]
    assert len({label.split(";")[0] for label in first}) > 5
    assert first == [label for _, label, _ in chain(0, 50, everything)]
    assert first != [label for _, label, _ in chain(1, 50, everything)]
    # A filesystem without fallocate's modes gets no chain that punches or zeroes.
    assert not any(op.kind is K.FALLOCATE
                   for _, ops in chains(OpSelection(frozenset({"reflink"}))) for op in ops)
    # --ops naming only durability ops leaves no chain: a one-line error.
    with pytest.raises(ConfigError, match="no generated operation|no chain"):
        load_case("gen:chain", seed=0, ops=["fsync"])
    w = load_case("gen:chain", seed=0, max_sequences=30)
    assert len({namespace_of(op) for op in w.ops if op.kind is not K.SYNC}) == 30


def test_pack_keeps_namespaces_disjoint() -> None:
    seqs = [
        Workload(
            name=f"w{i}",
            seed=i,
            ops=(Op(K.CREAT, "f"), Op(K.RENAME, "f", dst="g"), Op(K.FSYNC_DIR, ""), Op(K.SYNC)),
        )
        for i in range(3)
    ]
    packed = pack(seqs, name="p")
    per_space: dict[str, list[Op]] = {}
    for op in packed.ops:
        if op.kind is K.SYNC:
            continue
        ns = op.path.split("/")[0]
        assert not op.dst or op.dst.split("/")[0] == ns
        per_space.setdefault(ns, []).append(op)
    assert sorted(per_space) == ["s0000", "s0001", "s0002"]
    assert per_space["s0001"] == [
        Op(K.MKDIR, "s0001"),
        Op(K.CREAT, "s0001/f"),
        Op(K.RENAME, "s0001/f", dst="s0001/g"),
        Op(K.FSYNC_DIR, "s0001"),
    ]
    with pytest.raises(WorkloadError, match="distinct namespaces"):
        pack(seqs, namespaces=["a", "a", "b"])


def test_gen_namespaces_keep_enumeration_numbers() -> None:
    full = load_case("gen:seq1", seed=0)
    capped = load_case("gen:seq1", seed=9, max_sequences=5)
    full_spaces = {namespace_of(op) for op in full.ops if op.kind is not K.SYNC}
    capped_spaces = {namespace_of(op) for op in capped.ops if op.kind is not K.SYNC}
    assert len(capped_spaces) == 5 and capped_spaces <= full_spaces
    by_space = lambda w, ns: [op for op in w.ops if namespace_of(op) == ns]  # noqa: E731
    for ns in capped_spaces:
        assert by_space(capped, ns) == by_space(full, ns)


def test_random_ops_are_valid_and_mix_everything() -> None:
    ops = random_ops(400, seed=11)
    assert len(ops) == 400
    model = FsModel()
    for op in ops:
        assert model.check(op) is None, op
        model.apply(op, bytes(op.length))
    seen = {op.kind for op in ops}
    assert seen == CLASSIC_KINDS
    share = sum(op.kind in DURABILITY_OPS for op in ops) / len(ops)
    assert 0.1 < share < 0.4


def test_packed_seq1_sample_is_clean_at_every_prefix(tmp_path: Path) -> None:
    assert_clean_everywhere(load_case("gen:seq1", seed=3, max_sequences=8), tmp_path)


@pytest.mark.parametrize("spec", ["hand:nope", "gen:seq9", "random:x", "random:0", "bogus"])
def test_bad_specs_are_config_errors(spec: str) -> None:
    with pytest.raises(ConfigError, match="case"):
        load_case(spec, seed=0)


def test_max_sequences_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_sequences"):
        load_case("gen:seq1", seed=0, max_sequences=0)


def test_pack_retires_finished_namespaces_in_groups(tmp_path: Path) -> None:
    seqs = [Workload(name=label, seed=0, ops=tuple(ops)) for label, ops in sequences.seq1()[:5]]
    packed = pack(seqs, name="p", retire_every=2)
    # Every namespace is created once and removed once; removals come in
    # groups of two, each group ending in a sync, removed after its group
    # has run and before the next group starts.
    removed = [op.path for op in packed.ops if op.kind is K.RMDIR and "/" not in op.path]
    assert removed == ["s0000", "s0001", "s0002", "s0003", "s0004"]
    order = [(i, op) for i, op in enumerate(packed.ops) if op.kind is K.MKDIR and "/" not in op.path]
    rmdir_at = {op.path: i for i, op in enumerate(packed.ops) if op.kind is K.RMDIR and "/" not in op.path}
    assert order[1][0] < rmdir_at["s0000"] < rmdir_at["s0001"] < order[2][0]
    assert packed.ops[rmdir_at["s0001"] + 1].kind is K.SYNC
    assert packed.ops[-1].kind is K.SYNC
    oracle, _ = record(packed, tmp_path / "run")
    assert list((tmp_path / "run").iterdir()) == []
    assert oracle.marks
    assert_clean_everywhere(packed, tmp_path / "states")
    with pytest.raises(WorkloadError, match="retire_every"):
        pack(seqs, retire_every=0)


def test_retired_files_must_stay_gone(tmp_path: Path) -> None:
    """After the sync that ends a retirement, a removed file that is back is a finding."""
    seqs = [Workload(name=label, seed=0, ops=tuple(ops)) for label, ops in sequences.seq1()[:2]]
    packed = pack(seqs, name="p", retire_every=2)
    root = tmp_path / "run"
    oracle, marks = record(packed, root)
    rules = persistence_rules(get_target("ext4/ordered"))
    assert verify(oracle, root, last_mark=marks[-1], rules=rules) == []
    (root / "s0001").mkdir()
    (root / "s0001" / "f0").write_bytes(b"back from the dead")
    found = verify(oracle, root, last_mark=marks[-1], rules=rules)
    assert any(f.path.startswith("s0001") for f in found), found


def test_gen_cases_retire_and_stay_small() -> None:
    w = load_case("gen:seq2", seed=0)
    model = FsModel()
    biggest = 0
    for op in w.ops:
        model.apply(op, bytes(op.length))
        if op.kind is K.SYNC:
            biggest = max(biggest, len(model.bindings("")))
    assert len(model.bindings("")) == 1  # only the root is left
    assert biggest < 20 * (packing.RETIRE_EVERY + 1)


# -- capabilities and --ops ----------------------------------------------------

EVERYTHING = frozenset(CAPABILITIES)
EXT4_CAPS = frozenset({"direct-io", "rename-exchange", "fallocate", "punch-hole", "zero-range",
                       "collapse-range", "insert-range"})
NEWER_KINDS = set(OpKind) - CLASSIC_KINDS - COVER_ONLY_KINDS


def kinds_in(w: Workload) -> set[OpKind]:
    return {op.kind for op in w.ops}


def test_without_capabilities_generators_keep_the_classic_workloads() -> None:
    for spec in ("gen:seq1", "gen:seq2", "random:300", "stress:50", "ranges:300"):
        w = load_case(spec, seed=2, max_sequences=400)
        assert kinds_in(w) <= CLASSIC_KINDS, spec
        assert not any(op.falloc in (FallocMode.COLLAPSE_RANGE, FallocMode.INSERT_RANGE)
                       for op in w.ops)


def test_capabilities_bring_every_newer_op_the_filesystem_has() -> None:
    seqs = sequences.seq1(OpSelection(EVERYTHING))
    kinds = {op.kind for _, ops in seqs for op in ops}
    assert kinds == set(OpKind) - COVER_ONLY_KINDS
    modes = {op.falloc for _, ops in seqs for op in ops if op.kind is K.FALLOCATE}
    assert modes == set(FallocMode) - COVER_ONLY_FALLOC_MODES
    # Without reflink (ext4): no clone ops; without collapse/insert (btrfs): no shifts.
    ext4 = load_case("gen:seq1", seed=0, capabilities=EXT4_CAPS)
    assert K.CLONE not in kinds_in(ext4) and K.CLONE_RANGE not in kinds_in(ext4)
    assert K.DIRECT_WRITE in kinds_in(ext4) and K.MSYNC in kinds_in(ext4)
    btrfs = load_case("gen:seq2", seed=0, capabilities={"reflink", "direct-io"})
    assert not any(op.falloc in (FallocMode.COLLAPSE_RANGE, FallocMode.INSERT_RANGE)
                   for op in btrfs.ops)
    assert K.RENAME_EXCHANGE not in kinds_in(btrfs) and K.CLONE in kinds_in(btrfs)


def test_capable_random_ops_are_valid_and_use_the_newer_ops() -> None:
    ops = random_ops(600, seed=5, selection=OpSelection(EVERYTHING))
    model = FsModel()
    for op in ops:
        assert model.check(op) is None, op
        model.apply(op, bytes(op.length))
    assert NEWER_KINDS - {op.kind for op in ops} <= {K.CLONE}  # clones rarely find a valid pair
    ext4 = random_ops(400, seed=5, selection=OpSelection(EXT4_CAPS))
    assert not {op.kind for op in ext4} & {K.CLONE, K.CLONE_RANGE}


def _ranges_sizes(w: Workload) -> list[tuple[Op, int, int]]:
    """(op, size of its file before it, size after) for each op of a ranges:N workload."""
    model, out = FsModel(), []
    for op in w.ops:
        assert model.check(op) is None, op
        node = model.lookup(op.path) if op.path else None
        before = len(model.nodes[node].data) if node is not None else 0
        model.apply(op, bytes(op.length))
        node = model.lookup(op.path) if op.path else None
        out.append((op, before, len(model.nodes[node].data) if node is not None else 0))
    return out


def test_ranges_places_data_ops_relative_to_each_files_end() -> None:
    w = load_case("ranges:600", seed=0, capabilities=EXT4_CAPS)
    assert w == load_case("ranges:600", seed=0, capabilities=EXT4_CAPS)  # the seed decides
    shorter = load_case("ranges:200", seed=0, capabilities=EXT4_CAPS).ops
    assert w.ops[:len(shorter)] == shorter  # a longer run extends a shorter one
    sized = _ranges_sizes(w)  # every op valid in the model
    assert {op.path for op, _, _ in sized if op.path} == {"q", "q/a", "q/b"}
    assert w.ops[2] == Op(K.FALLOCATE, "q/a", length=15 * 4096, falloc=FallocMode.ALLOCATE)
    kinds = kinds_in(w)
    assert {K.PWRITE, K.APPEND, K.TRUNCATE, K.FALLOCATE, K.DIRECT_WRITE, K.MMAP_WRITE,
            K.FSYNC, K.FDATASYNC, K.SYNC} <= kinds
    assert not kinds & {K.RENAME, K.LINK, K.UNLINK, K.CLONE, K.SETXATTR}
    # The partitions that fixed offsets seldom give: a write at the end of file, a punch
    # over the block that holds the end (not past it), a truncation onto a block boundary.
    assert any(op.kind is K.PWRITE and op.offset == before > 0 for op, before, _ in sized)
    assert any(op.kind is K.FALLOCATE and op.falloc is FallocMode.PUNCH_HOLE
               and op.offset < before <= op.offset + op.length and before % 4096
               for op, before, _ in sized)
    assert any(op.kind is K.TRUNCATE and 0 < after < before and after % 4096 == 0
               for op, before, after in sized)
    durable = sum(op.kind in DURABILITY_OPS for op in w.ops)
    assert 0.15 < durable / len(w.ops) < 0.35


def test_ranges_keeps_to_the_classic_ops_or_those_named() -> None:
    classic = load_case("ranges:300", seed=1)
    assert kinds_in(classic) <= CLASSIC_KINDS
    _ranges_sizes(classic)
    only = load_case("ranges:200", seed=1, capabilities=EXT4_CAPS, ops=["fallocate", "fdatasync"])
    assert kinds_in(only) - {K.MKDIR, K.CREAT, K.PWRITE, K.SYNC} == {K.FALLOCATE, K.FDATASYNC}
    with pytest.raises(ConfigError, match="ranges:N uses data and durability operations"):
        load_case("ranges:50", seed=0, capabilities=EXT4_CAPS, ops=["rename"])
    with pytest.raises(ConfigError, match="expected ranges:N"):
        load_case("ranges:x", seed=0)


def test_generated_sequences_include_argument_partitions() -> None:
    labels = {label.split("+")[0] for label, _ in sequences.seq1(OpSelection(EXT4_CAPS))}
    assert {"pwrite-below-page", "pwrite-across-page", "pwrite-hole", "pwrite-zero",
            "write-zero", "truncate-block", "direct-write-zero"} <= labels
    pairs = {label for label, _ in sequences.seq2(OpSelection(EXT4_CAPS))}
    assert "truncate-grow,pwrite-hole" in pairs  # a write into the hole a truncate made
    assert "punch-hole,pwrite-below-page" in pairs


def test_ops_restrict_generated_sequences_to_those_kinds() -> None:
    w = load_case("gen:seq2", seed=0, capabilities=EXT4_CAPS, ops=["rename_exchange"])
    setup = {K.MKDIR, K.CREAT, K.WRITE, K.SETXATTR, K.SYNC, K.RMDIR, K.UNLINK}
    assert kinds_in(w) - setup - DURABILITY_OPS == {K.RENAME_EXCHANGE}
    assert kinds_in(w) & DURABILITY_OPS - {K.SYNC}  # naming no durability op keeps them all
    # Naming durability ops makes them the only ones that follow each op.
    w = load_case("gen:seq1", seed=0, capabilities=EXT4_CAPS, ops=["mmap_write", "msync"])
    assert kinds_in(w) - setup == {K.MMAP_WRITE, K.MSYNC}
    w = load_case("random:200", seed=1, capabilities=EXT4_CAPS, ops=["write_odsync"])
    assert kinds_in(w) <= {K.MKDIR, K.CREAT, K.WRITE, K.WRITE_ODSYNC, K.SYNC}
    assert K.WRITE_ODSYNC in kinds_in(w)


@pytest.mark.parametrize(
    ("spec", "ops", "caps", "message"),
    [
        ("gen:seq2", ["fsnyc"], None, r"unknown operation 'fsnyc' \(known: append, chmod, chown, clone, "),
        ("hand:new-ops", ["fsync"], None, "generated cases"),
        ("gen:seq1", ["clone"], EXT4_CAPS, "no generated operation is of kinds clone"),
    ],
)
def test_bad_ops_are_one_line_config_errors(spec, ops, caps, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_case(spec, seed=0, ops=ops, capabilities=caps)
    assert "\n" not in str(info.value)


def test_capable_sequences_are_clean_at_every_prefix(tmp_path: Path) -> None:
    # The host's filesystem stands in: whatever it lacks is skipped, as in a guest.
    w = load_case("gen:seq2", seed=8, max_sequences=10, capabilities=EXT4_CAPS)
    assert kinds_in(w) & NEWER_KINDS
    assert_clean_everywhere(
        w, tmp_path, [posix_strict(), persistence_rules(get_target("ext4/ordered"))]
    )


def test_crash_plans_generate_for_the_target_and_keep_ops(tmp_path: Path) -> None:
    import json

    from crashcases.crash.plan import CrashPlan, load_plan, validate_plan

    xfs = validate_plan(CrashPlan(target="xfs", case="gen:seq1", ops=("clone", "fsync"))).workload
    assert kinds_in(xfs) - {K.MKDIR, K.CREAT, K.WRITE, K.SETXATTR, K.SYNC, K.RMDIR, K.UNLINK} == {
        K.CLONE, K.FSYNC}
    ext4 = validate_plan(CrashPlan(target="ext4/ordered", case="gen:seq2")).workload
    assert K.MSYNC in kinds_in(ext4) and K.CLONE not in kinds_in(ext4)
    ext3 = validate_plan(CrashPlan(target="ext3", case="gen:seq1")).workload
    assert not any(op.falloc is FallocMode.COLLAPSE_RANGE for op in ext3.ops)
    with pytest.raises(ConfigError, match="no generated operation is of kinds clone"):
        validate_plan(CrashPlan(target="ext4/ordered", case="gen:seq1", ops=("clone",)))
    # recheck rebuilds the workload from plan.json, --ops included.
    plan = CrashPlan(target="xfs", case="gen:seq2", max_sequences=5, ops=("rename_exchange",))
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_dict()))
    again = load_plan(tmp_path)
    assert again == plan and validate_plan(again).workload == validate_plan(plan).workload
