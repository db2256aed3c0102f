"""Exporting a failing crash state: the checks fire on a broken tree and stay quiet on the
promised one, the fstests op translations do what the model says on this host, the script
and the fstests test are well-formed, and bad input is a one-line error that writes nothing."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from crashcases.check import CheckResult
from crashcases.crash.plan import CrashPlan
from crashcases.execute import execute
from crashcases.findings.checks import Check, check_functions
from crashcases.findings.export import ExportError, load_export_state, pattern_data, recorded_data
from crashcases.findings.fstests import FSTESTS_OPS, next_test_name, translate_ops, write_fstests
from crashcases.findings.script import build_checks, write_script
from crashcases.oracle.finding import Broken, Finding, FindingKind
from crashcases.oracle.log import NodeKind, OracleLog
from crashcases.oracle.verify import verify
from crashcases.vocabulary import Outcome
from crashcases.workload.model import FsModel
from crashcases.workload.ops import FallocMode, Op, OpKind, Workload, needs_data
from devicemapper.logformat import LogFlag, LogWriter
from framework.cli import main
from framework.core import rundir
from recovery.filesystems import persistence_rules
from recovery.targets import resolve

K = OpKind
B = 4096
TARGET = "ext4/ordered"
MARK = "pc-2"  # the state's last mark: after op 11, fsync of the root directory
MARK_OP = 11


def planted_workload() -> Workload:
    """A file, an xattr, a symlink, two links and a removed name, all promised by pc-2."""
    return Workload("export", 5, (
        Op(K.MKDIR, "d"),
        Op(K.CREAT, "d/f"),
        Op(K.WRITE, "d/f", length=3 * B + 100),
        Op(K.SETXATTR, "d/f", xattr="user.a", length=20),
        Op(K.SYMLINK, "d/l", target="f"),
        Op(K.CREAT, "d/g"),
        Op(K.LINK, "d/g", dst="d/h"),
        Op(K.CREAT, "d/x"),
        Op(K.UNLINK, "d/x"),
        Op(K.FSYNC, "d/f"),  # pc-0
        Op(K.FSYNC_DIR, "d"),  # pc-1
        Op(K.FSYNC_DIR, ""),  # pc-2: the state's mark
        Op(K.PWRITE, "d/f", offset=B + 50, length=100),  # in the window: may be there
        Op(K.CREAT, "d/late"),
        Op(K.FSYNC, "d/g"),  # pc-3: the window ends here
        Op(K.UNLINK, "d/h"),
        Op(K.SYNC),  # pc-4
    ))


def run_ops(workload: Workload, root: Path, upto: int | None = None) -> OracleLog:
    """Run ops 0..upto (all by default) under ``root``, a fresh directory."""
    root.mkdir(parents=True)
    ops = workload.ops if upto is None else workload.ops[: upto + 1]
    return execute(replace(workload, ops=ops), root, lambda name: None)


def make_run(tmp_path: Path, workload: Workload, findings: list[dict], *, key: str = "40/prefix",
             last_mark: str | None = MARK, point_kind: str = "mark",
             outcome: Outcome = Outcome.DATA_LOSS, target: str = TARGET,
             data_mib: int | None = 16, more_states: tuple[dict, ...] = ()) -> Path:
    """A crash run directory as `powercut crash` leaves it, without log or images."""
    run = tmp_path / "run"
    run.mkdir()
    case = run / "workload.json"
    case.write_text(workload.to_json())
    plan = CrashPlan(target=target, case=f"file:{case}", seed=workload.seed, data_mib=data_mib)
    (run / "plan.json").write_text(json.dumps(plan.to_dict()))
    oracle = run_ops(workload, tmp_path / "recorded")
    (run / "oracle.json").write_text(oracle.to_json())
    result = CheckResult(key=key, outcome=outcome, mount_ok=True, findings=findings)
    point, _, variant = key.partition("/")
    states = [{"key": key, "point": int(point), "point_kind": point_kind, "last_mark": last_mark,
               "variant": variant, "base": int(point), "extra": [], "torn": {},
               "result": result.to_dict()}, *more_states]
    (run / "results.json").write_text(json.dumps({"states": states}))
    return run


def copy_tree(src: Path, dst: Path) -> None:
    """A copy that keeps hard links, symlinks and xattrs (shutil.copytree splits links)."""
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


def findings_of(tree: Path, workload: Workload, oracle: OracleLog) -> list[dict]:
    found = verify(oracle, tree, last_mark=MARK, rules=persistence_rules(resolve(TARGET)))
    return [f.to_dict() for f in found]


def run_checks(checks: list[Check], root: Path, tmp_path: Path) -> tuple[int, list[str]]:
    """Run the checks' shell text against ``root``: (exit status, output lines)."""
    script = "\n".join([f"pc_root={root}", f"pc_scratch={tmp_path / 'scratch'}",
                        check_functions(checks, B), *(c.render() for c in checks),
                        'exit "$pc_failed"'])
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stderr == ""
    return out.returncode, out.stdout.splitlines()


# -- the checks against real trees ---------------------------------------------------


def _zero_block_0(t: Path) -> None:
    # Block 0 has one version; block 1 has two (op 12 writes into it in the window), and a
    # block that may be torn between two versions is not checked on ext4/ordered.
    data = bytearray((t / "d/f").read_bytes())
    data[:B] = bytes(B)
    (t / "d/f").write_bytes(data)


def _other_block_2(t: Path) -> None:
    data = bytearray((t / "d/f").read_bytes())
    data[2 * B:3 * B] = random.Random(1).randbytes(B)
    (t / "d/f").write_bytes(data)


def _other_files_block(t: Path) -> None:
    # d/g (and its link d/h) never had data: d/f's first block read through it is stale data.
    (t / "d/g").write_bytes((t / "d/f").read_bytes()[:B])


def _retarget(t: Path) -> None:
    (t / "d/l").unlink()
    (t / "d/l").symlink_to("g")


def _dir_for_file(t: Path) -> None:
    (t / "d/h").unlink()
    (t / "d/h").mkdir()


def _split_link(t: Path) -> None:
    (t / "d/h").unlink()
    (t / "d/h").write_bytes(b"")


DOCTORINGS: dict[str, tuple[Callable[[Path], None], set[FindingKind]]] = {
    "missing": (lambda t: (t / "d/g").unlink(), {FindingKind.DATA_LOSS}),
    "zeros": (_zero_block_0, {FindingKind.DATA_LOSS}),
    "other-data": (_other_block_2, {FindingKind.WRONG_CONTENT}),
    "other-file": (_other_files_block, {FindingKind.WRONG_CONTENT}),
    "short": (lambda t: os.truncate(t / "d/f", 100), {FindingKind.DATA_LOSS}),
    "long": (lambda t: os.truncate(t / "d/f", 5 * B), {FindingKind.WRONG_CONTENT}),
    "xattr": (lambda t: os.setxattr(t / "d/f", "user.a", b"x"), {FindingKind.WRONG_XATTR}),
    "no-xattr": (lambda t: os.removexattr(t / "d/f", "user.a"), {FindingKind.WRONG_XATTR}),
    "target": (_retarget, {FindingKind.WRONG_TARGET}),
    "type": (_dir_for_file, {FindingKind.WRONG_TYPE}),
    # A third link the tree does not show: st_nlink 3 for two names.
    "nlink": (lambda t: os.link(t / "d/g", t.parent / "elsewhere"), {FindingKind.LINK_COUNT}),
    "identity": (_split_link, {FindingKind.IDENTITY}),
    "stranger": (lambda t: (t / "d/zzz").write_bytes(b""), {FindingKind.UNEXPECTED_ENTRY}),
    "removed": (lambda t: (t / "d/x").write_bytes(b""), {FindingKind.UNEXPECTED_ENTRY}),
}


@pytest.mark.parametrize("name", sorted(DOCTORINGS))
def test_each_check_fires_on_the_broken_tree_and_passes_on_the_promised_one(tmp_path, name):
    """Positive control: every finding the oracle makes on a broken tree becomes a check that
    fails there; negative control: the tree as it was at the mark passes every one."""
    doctor, kinds = DOCTORINGS[name]
    workload = planted_workload()
    oracle = run_ops(workload, tmp_path / "o")
    promised = tmp_path / "promised"
    run_ops(workload, promised, MARK_OP)
    assert findings_of(promised, workload, oracle) == []
    broken = tmp_path / "broken"
    copy_tree(promised, broken)
    doctor(broken)
    findings = findings_of(broken, workload, oracle)
    assert kinds <= {FindingKind(f["kind"]) for f in findings}, findings

    state = load_export_state(make_run(tmp_path, workload, findings), "40/prefix")
    checks = build_checks(state, recorded_data(workload.seed), verify=True)
    assert len(checks) == len({(f["kind"], f["path"], f["detail"]) for f in findings})
    status, lines = run_checks(checks, broken, tmp_path)
    assert status == 1 and lines and all(ln.startswith("FAIL: ") for ln in lines), lines
    status, lines = run_checks(checks, promised, tmp_path)
    assert status == 0 and all(ln.startswith("ok: ") for ln in lines), lines
    assert [ln[4:] for ln in lines] == [c.what for c in checks]


def test_a_block_check_names_the_promise_and_the_allowed_versions(tmp_path):
    workload = planted_workload()
    finding = Finding.make(FindingKind.DATA_LOSS, "d/f", Broken.BLOCK, block=1, block_bytes=B,
                           size=3 * B + 100, found="zeros", mark="pc-0", op=9,
                           promise="promised at pc-0 as of op 9 (fsync d/f)").to_dict()
    assert finding["detail"] == ("block 1 (bytes 4096-8191) holds zeros; promised at pc-0 as of "
                                 "op 9 (fsync d/f)")
    state = load_export_state(make_run(tmp_path, workload, [finding]), "40/prefix")
    (check,) = build_checks(state, recorded_data(workload.seed), verify=True)
    # Versions of d/f from the promise (op 9) to the window's end (op 14): op 2's, op 12's.
    assert check.what == ("d/f block 1 (bytes 4096-8191) holds one of 2 allowed versions "
                          "(promised by fsync d/f at pc-0)")
    assert check.test.startswith('pc_one_of "$(pc_block "$pc_root"/d/f 1)" ')


def test_an_io_error_becomes_a_read_and_a_finding_without_fields_an_error(tmp_path):
    io = Finding.make(FindingKind.IO_ERROR, "d/f", Broken.IO,
                      found="reading: [Errno 5] Input/output error").to_dict()
    odd = {"kind": "data-loss", "path": "d/f", "detail": "something the oracle never says"}
    state = load_export_state(make_run(tmp_path, planted_workload(), [io, odd]), "40/prefix")
    with pytest.raises(ExportError, match=r"finding data-loss at d/f has no fields .*recheck"):
        build_checks(state, recorded_data(5), verify=True)
    (check,) = build_checks(replace(state, result={**state.result, "findings": [io]}),
                            recorded_data(5), verify=True)
    assert check.test == 'pc_readable "$pc_root"/d/f'


def test_a_changed_case_is_caught_against_the_oracle(tmp_path):
    workload = planted_workload()
    finding = Finding.make(FindingKind.DATA_LOSS, "d/f", Broken.SIZE_BELOW, size=0, bound=12388,
                           mark="pc-0", op=9,
                           promise="promised at pc-0 as of op 9 (fsync d/f)").to_dict()
    state = load_export_state(make_run(tmp_path, workload, [finding]), "40/prefix")
    build_checks(state, recorded_data(workload.seed), verify=True)
    with pytest.raises(ExportError, match="does not match oracle.json"):  # other bytes
        build_checks(state, recorded_data(workload.seed + 1), verify=True)


# -- the fstests translation --------------------------------------------------------


def every_kind_workload(renameat2: bool) -> Workload:
    """One op of (nearly) every kind this host's filesystem can do without reflinks."""
    F = FallocMode
    ops = [
        Op(K.MKDIR, "a"), Op(K.CREAT, "a/f"), Op(K.WRITE, "a/f", length=3 * B + 100),
        Op(K.PWRITE, "a/f", offset=B + 7, length=300), Op(K.APPEND, "a/f", length=500),
        Op(K.TRUNCATE, "a/f", size=6 * B),
        Op(K.FALLOCATE, "a/f", offset=6 * B, length=B, falloc=F.ALLOCATE),
        Op(K.FALLOCATE, "a/f", offset=7 * B, length=B, falloc=F.KEEP_SIZE),
        Op(K.FALLOCATE, "a/f", offset=B, length=B, falloc=F.PUNCH_HOLE),
        Op(K.FALLOCATE, "a/f", offset=2 * B + 100, length=200, falloc=F.ZERO_RANGE),
        Op(K.FALLOCATE, "a/f", offset=0, length=B, falloc=F.COLLAPSE_RANGE),
        Op(K.FALLOCATE, "a/f", offset=B, length=B, falloc=F.INSERT_RANGE),
        Op(K.FSYNC, "a/f"), Op(K.FDATASYNC, "a/f"),
        Op(K.CREAT, "a/g"), Op(K.DIRECT_WRITE, "a/g", offset=0, length=2 * B),
        Op(K.WRITE_OSYNC, "a/g", offset=B + 5, length=100),
        Op(K.WRITE_ODSYNC, "a/g", offset=100, length=50),
        Op(K.MMAP_WRITE, "a/g", offset=B + 10, length=100),
        Op(K.MSYNC, "a/g", offset=B, length=B),
        Op(K.SYNC_FILE_RANGE, "a/g"), Op(K.SYNCFS, "a"), Op(K.SYNC),
        Op(K.CREAT, "a/c"), Op(K.COPY_FILE_RANGE, "a/f", dst="a/c", offset=10, length=B),
        Op(K.SETXATTR, "a/f", xattr="user.x", length=30),
        Op(K.SETXATTR, "a", xattr="user.d", length=0),
        Op(K.REMOVEXATTR, "a/f", xattr="user.x"), Op(K.SETXATTR, "a/f", xattr="user.y", length=5),
        Op(K.SYMLINK, "a/l", target="f"), Op(K.LINK, "a/f", dst="a/h"),
        Op(K.RENAME, "a/h", dst="a/i"), Op(K.UNLINK, "a/i"), Op(K.MKDIR, "a/sub"),
        Op(K.RMDIR, "a/sub"), Op(K.FSYNC_DIR, "a"), Op(K.RENAME, "a/g", dst="a/f2"),
        Op(K.CREAT, "a/z"), Op(K.WRITE, "a/z", length=0),
    ]
    if renameat2:
        ops += [Op(K.CREAT, "a/n"), Op(K.RENAME_NOREPLACE, "a/n", dst="a/m"),
                Op(K.RENAME_EXCHANGE, "a/m", dst="a/c")]
    return Workload("kinds", 3, tuple(ops))


def fstests_here() -> Path | None:
    """A built fstests checkout (POWERCUT_XFSTESTS) for src/renameat2, if there is one."""
    here = os.environ.get("POWERCUT_XFSTESTS")
    return Path(here) if here and (Path(here) / "src/renameat2").is_file() else None


def run_translated(lines: list[str], root: Path, tmp_path: Path) -> list[str]:
    """Run translated op lines with the fstests variables they use; returns the marks."""
    here = fstests_here()
    marks = tmp_path / "marks"
    prologue = [
        "set -e", f"SCRATCH_MNT={root}", "XFS_IO_PROG=xfs_io", "SETFATTR_PROG=setfattr",
        f"seqres={tmp_path / 'seq'}", f"here={here or tmp_path}",
        f'_log_writes_mark() {{ echo "$1" >> {marks}; }}',
    ]
    out = subprocess.run(["bash", "-c", "\n".join([*prologue, *lines])], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return marks.read_text().split() if marks.exists() else []


def model_tree(workload: Workload, upto: int) -> FsModel:
    model = FsModel()
    for index, op in enumerate(workload.ops[: upto + 1]):
        assert model.check(op) is None, (index, op)
        model.apply(op, pattern_data(index, op) if needs_data(op) else b"")
    return model


def assert_tree_is(model: FsModel, root: Path) -> None:
    for path, node_id in model.bindings("").items():
        node = model.nodes[node_id]
        p = root / path if path else root
        if node.kind is NodeKind.FILE:
            assert p.is_file() and not p.is_symlink(), path
            assert p.read_bytes() == bytes(node.data), path
        elif node.kind is NodeKind.DIR:
            assert p.is_dir() and not p.is_symlink(), path
            assert sorted(os.listdir(p)) == sorted(node.entries), path
        else:
            assert os.readlink(p) == node.target, path
        if node.kind is not NodeKind.SYMLINK:
            names = {n for n in os.listxattr(p) if n.startswith("user.")}
            assert names == set(node.xattrs), path
            for name, value in node.xattrs.items():
                assert os.getxattr(p, name) == value, (path, name)


def test_the_fstests_translation_does_what_the_model_says_on_this_host(tmp_path):
    """The translated commands (xfs_io, coreutils, setfattr, dd) run here leave the tree the
    model computes from the same byte patterns, and mark after every durability op."""
    if shutil.which("xfs_io") is None or shutil.which("setfattr") is None:
        pytest.skip("needs xfs_io (xfsprogs) and setfattr (attr)")
    workload = every_kind_workload(renameat2=fstests_here() is not None)
    oracle = run_ops(workload, tmp_path / "recorded")
    kinds = {op.kind for op in workload.ops}
    assert kinds <= set(FSTESTS_OPS)
    last = len(workload.ops) - 1
    lines, requires = translate_ops(workload, oracle, last)
    root = tmp_path / "scratch"
    root.mkdir()
    marks = run_translated(lines, root, tmp_path)
    assert_tree_is(model_tree(workload, last), root)
    assert marks == [m.name for m in oracle.mark_records]
    assert "_require_xfs_io_command fcollapse" in requires and "_require_odirect" in requires
    assert ". ./common/attr" in requires


def test_every_kind_in_the_table_translates_and_a_missing_one_is_named(tmp_path):
    workload = every_kind_workload(renameat2=True)
    oracle = run_ops(replace(workload, ops=workload.ops[:1]), tmp_path / "r")
    oracle = replace(oracle, n_ops=len(workload.ops), ops=tuple(op.describe() for op in workload.ops))
    lines, _ = translate_ops(workload, oracle, len(workload.ops) - 1)
    assert "$here/src/renameat2 -x $SCRATCH_MNT/a/m $SCRATCH_MNT/a/c" in lines
    assert '$XFS_IO_PROG -d -c "pwrite -S 0x10 0 8192" $SCRATCH_MNT/a/g >> $seqres.full' in lines
    table = {k: v for k, v in FSTESTS_OPS.items() if k is not OpKind.MSYNC}
    with pytest.raises(ExportError, match=r"^op 19 \(msync a/g @4096\+4096\): no fstests "
                                          r"translation for op kind 'msync'; export this state "
                                          r"with --script$"):
        translate_ops(workload, oracle, len(workload.ops) - 1, table)


def test_ops_the_recording_skipped_are_skipped_in_the_test(tmp_path):
    workload = Workload("w", 1, (Op(K.CREAT, "f"), Op(K.CLONE, "f", dst="f"), Op(K.SYNC)))
    oracle = OracleLog("w", 1, 3, ("creat f", "clone f -> f", "sync"), (), {}, {},
                       skipped={1: "unsupported"})
    lines, requires = translate_ops(workload, oracle, 2)
    assert "# op 1 (clone f -> f): skipped, as in the recording (unsupported)" in lines
    assert not any("reflink" in r for r in requires)


def test_the_pattern_checks_pass_on_the_translated_workload_and_fail_on_a_broken_one(tmp_path):
    """The fstests form end to end on this host, without dm: the translated workload up to
    the mark passes the pattern-data checks; the same tree, broken, fails them."""
    if shutil.which("xfs_io") is None or shutil.which("getfattr") is None:
        pytest.skip("needs xfs_io (xfsprogs) and getfattr (attr)")
    workload = planted_workload()
    oracle = run_ops(workload, tmp_path / "o")
    promised = tmp_path / "promised"
    run_ops(workload, promised, MARK_OP)
    broken = tmp_path / "broken"
    copy_tree(promised, broken)
    for name in ("missing", "zeros", "xattr", "target", "stranger", "removed"):
        DOCTORINGS[name][0](broken)
    findings = findings_of(broken, workload, oracle)
    state = load_export_state(make_run(tmp_path, workload, findings), "40/prefix")
    checks = build_checks(state, pattern_data, verify=False)
    lines, _ = translate_ops(workload, oracle, MARK_OP)
    replayed = tmp_path / "replayed"
    replayed.mkdir()
    run_translated(lines, replayed, tmp_path)
    status, out = run_checks(checks, replayed, tmp_path)
    assert status == 0 and all(ln.startswith("ok: ") for ln in out), out
    _zero_block_0(replayed)
    os.setxattr(replayed / "d/f", "user.a", b"other")
    status, out = run_checks(checks, replayed, tmp_path)
    assert status == 1
    assert sum(ln.startswith("FAIL: ") for ln in out) == 2, out


# -- the two forms -------------------------------------------------------------------


def one_finding() -> list[dict]:
    return [Finding.make(FindingKind.DATA_LOSS, "d/g", Broken.MISSING, expected=("file #3",),
                         mark="pc-1", op=10,
                         promise="promised at pc-1 as of op 10 (fsync_dir d)").to_dict()]


def test_the_fstests_test_replays_to_the_mark_and_its_golden_output_is_the_ok_lines(tmp_path):
    run = make_run(tmp_path, planted_workload(), one_finding())
    fst = tmp_path / "fstests"
    (fst / "tests/generic").mkdir(parents=True)
    (fst / "tests/generic/group.list").write_text("001 auto quick\n998 auto\n")
    test, out = write_fstests(load_export_state(run, "40/prefix"), fst, "generic/998")
    text = test.read_text()
    assert os.access(test, os.X_OK)
    assert out.read_text() == ("QA output created by 998\n"
                               "ok: d/g exists (promised by fsync_dir d at pc-1)\n")
    assert (fst / "tests/generic/group.list").read_text() == (
        "001 auto quick\n998 auto quick log replay recoveryloop thin\n")
    for needed in ("_begin_fstest auto quick log replay recoveryloop thin", ". ./common/dmlogwrites",
                   "_require_log_writes", "_log_writes_init $DMTHIN_VOL_DEV",
                   "_log_writes_mkfs >> $seqres.full 2>&1", "_log_writes_mount -o data=ordered",
                   "_log_writes_unmount", "_log_writes_remove",
                   "_log_writes_replay_log pc-2 $DMTHIN_VOL_DEV", "_dmthin_check_fs",
                   "[ \"$FSTYP\" = ext4 ] || _notrun", ". ./common/attr", "status=0"):
        assert needed in text, needed
    # Marks after each durability op up to the window's end (op 14, pc-3), none after.
    assert [ln.split()[1] for ln in text.splitlines() if ln.startswith("_log_writes_mark ")] == [
        "pc-0", "pc-1", "pc-2", "pc-3"]
    assert "# op 15" not in text
    assert subprocess.run(["bash", "-n", str(test)], capture_output=True).returncode == 0


def test_the_script_unpacks_the_kept_image_under_a_snapshot_and_checks_the_findings(tmp_path):
    run = make_run(tmp_path, planted_workload(), one_finding())
    kept = run / rundir.state_image("40/prefix")
    with gzip.open(kept, "wb") as f:
        f.write(b"\1" * B)
    out = tmp_path / "out" / "repro.sh"
    out.parent.mkdir()
    script, image = write_script(load_export_state(run, "40/prefix"), out)
    assert (script, image) == (out, out.with_name("repro.img.gz"))
    assert image.read_bytes() == kept.read_bytes()
    text = script.read_text()
    assert os.access(script, os.X_OK)
    for needed in ('[ "$(id -u)" = 0 ] || die', "losetup --find --show --read-only",
                   'snapshot $origin $cow N 8"', "trap cleanup EXIT", 'dmsetup remove "$dm_name"',
                   "e2fsck:e2fsprogs", 'mount -t ext4 -o data=ordered "$dev" "$mnt"',
                   "e2fsck -f -n \"$dev\"", "if pc_exists \"$pc_root\"/d/g; then",
                   "pc_ok 'd/g exists (promised by fsync_dir d at pc-1)'",
                   f"image_sha256={__import__('hashlib').sha256(kept.read_bytes()).hexdigest()}",
                   "size_bytes=16777216"):
        assert needed in text, needed
    # Nothing in it writes the image: only the unpacked copy is attached, read-only.
    assert ' of="$image"' not in text and "> \"$image\"" not in text
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0


@pytest.mark.parametrize(("target", "before_mount", "after_mount"), [
    ("ext4/ordered", [], ["e2fsck -f -n"]),
    ("ext2", ["e2fsck -f -n", "e2fsck -f -y"], ["e2fsck -f -n"]),
    ("jfs", ["jfs_fsck -a", "jfs_fsck -n", "jfs_fsck -a -f"], ["jfs_fsck -n"]),
    ("xfs", [], ["xfs_repair -n"]),
    ("btrfs", [], ["btrfs check --readonly"]),
])
def test_the_script_recovers_each_target_as_the_crash_check_does(tmp_path, target, before_mount,
                                                                  after_mount):
    """The checker's commands come from the target's adapter, in crashcases.check's order:
    journal replay and fsck before the mount where the kernel does not replay, else after."""
    run = make_run(tmp_path, planted_workload(), one_finding(), target=target, data_mib=None)
    with gzip.open(run / rundir.state_image("40/prefix"), "wb") as f:
        f.write(bytes(B))
    script, _ = write_script(load_export_state(run, "40/prefix"), tmp_path / "r.sh")
    text = script.read_text()
    mount_at = text.index('timeout -k 10 "$mount_timeout_s" mount -t')
    for command in before_mount:
        assert -1 < text.find(f"{command} \"$dev\"") < mount_at, command
    for command in after_mount:
        assert text.rfind(f"{command} \"$dev\"") > mount_at, command
    journalled = target != "ext2"
    assert ("pc_fail 'read-only fsck before mount is clean'" in text) == (
        journalled and bool(before_mount))
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0


def test_fstests_refuses_a_target_whose_log_only_its_checker_replays(tmp_path):
    run = make_run(tmp_path, planted_workload(), one_finding(), target="jfs", data_mib=None)
    (tmp_path / "fst").mkdir()
    with pytest.raises(ExportError, match="recovery of jfs is its checker's log replay"):
        write_fstests(load_export_state(run, "40/prefix"), tmp_path / "fst")
    assert listing(tmp_path / "fst") == []


def test_fstests_takes_a_target_without_a_journal_as_fstests_mounts_it(tmp_path):
    run = make_run(tmp_path, planted_workload(), one_finding(), target="ext2", data_mib=None)
    (tmp_path / "fst").mkdir()
    write_fstests(load_export_state(run, "40/prefix"), tmp_path / "fst")
    test = (tmp_path / "fst/tests/generic/999").read_text()
    assert '[ "$FSTYP" = ext2 ]' in test and "_require_metadata_journaling" not in test


def test_without_a_kept_image_the_script_form_rebuilds_it_from_the_log(tmp_path):
    run = make_run(tmp_path, planted_workload(), [], key="7/prefix", outcome=Outcome.UNMOUNTABLE)
    rng = random.Random(4)
    blocks = {3: rng.randbytes(B), 10: rng.randbytes(B), 11: rng.randbytes(B)}
    with LogWriter(run / "log.img") as w:
        w.mark("mkfs")
        w.write(3 * 8, blocks[3])
        w.flush()
        w.mark("pc-0")
        w.write(10 * 8, blocks[10] + blocks[11])
        w.flush()
        w.mark("pc-1")  # entry 6
        w.write(3 * 8, bytes(B), LogFlag.FUA)  # after the state
        w.mark("pc-2")
    results = json.loads((run / "results.json").read_text())
    results["states"][0].update(key="6/prefix", point=6, last_mark="pc-1")
    results["states"][0]["result"]["key"] = "6/prefix"
    (run / "results.json").write_text(json.dumps(results))
    _, image = write_script(load_export_state(run, "6/prefix"), tmp_path / "r.sh")
    expected = bytearray(16 << 20)  # the plan's data disk, as replayed up to pc-1
    for block, data in blocks.items():
        expected[block * B:(block + 1) * B] = data
    assert gzip.decompress(image.read_bytes()) == expected


# -- bad input ------------------------------------------------------------------------


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["export", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(("setup", "argv", "message"), [
    ("passed", ["41/prefix", "--script", "{out}/r.sh"], "state '41/prefix' passed (ok): nothing to reproduce"),
    ("plain", ["99/prefix", "--script", "{out}/r.sh"], "state '99/prefix': not a state of {run} (failing states: 40/prefix)"),
    ("plain", ["40/prefix", "--script", "{out}/r.sh"], "{run}: log.img is gone, and the run kept no image of 40/prefix: nothing to rebuild it from"),
    ("image", ["40/prefix", "--script", "{out}/exists.sh"], "{out}/exists.sh: already exists (--force replaces it)"),
    ("image", ["40/prefix", "--script", "{out}/nodir/r.sh"], "{out}/nodir/r.sh: directory {out}/nodir does not exist"),
    ("subset", ["40/subset:77", "--fstests", "{out}"], "state '40/subset:77': a subset state is not the log replayed in order to a mark, which is all fstests can replay; export it with --script"),
    ("fua", ["40/prefix", "--fstests", "{out}"], "state '40/prefix': its crash point is a fua point (a log entry, not a mark), and fstests replays to marks; export it with --script"),
    ("plain", ["40/prefix", "--fstests", "{out}", "--test-name", "generic/x1"], "--test-name 'generic/x1': expected DIR/NUMBER as fstests names tests, e.g. generic/999"),
    ("plain", ["40/prefix", "--fstests", "{out}/absent"], "{out}/absent: no such directory (an fstests checkout)"),
    ("exists", ["40/prefix", "--fstests", "{out}"], "{out}/tests/generic/999: already exists (--force replaces it)"),
])
def test_bad_input_is_one_line_naming_it_and_writes_nothing(tmp_path, capsys, setup, argv, message):
    key = {"subset": "40/subset:77"}.get(setup, "40/prefix")
    passed = {"key": "41/prefix", "point": 41, "point_kind": "mark", "last_mark": MARK,
              "variant": "prefix", "base": 41, "extra": [], "torn": {},
              "result": CheckResult(key="41/prefix").to_dict()}
    run = make_run(tmp_path, planted_workload(), one_finding(), key=key,
                   point_kind="fua" if setup == "fua" else "mark", more_states=(passed,))
    out = tmp_path / "out"
    out.mkdir()
    if setup == "image":
        with gzip.open(run / rundir.state_image(key), "wb") as f:
            f.write(bytes(B))
        (out / "exists.sh").write_text("mine\n")
    if setup == "exists":
        (out / "tests/generic").mkdir(parents=True)
        (out / "tests/generic/999").write_text("mine\n")
    before, run_before = listing(out), listing(run)
    status, stdout, err = cli(capsys, str(run), *[a.format(out=out) for a in argv])
    assert status == 2 and stdout == ""
    assert err == f"powercut: {message.format(run=run, out=out)}\n"
    assert listing(out) == before and listing(run) == run_before
    if setup in ("image", "exists"):
        assert "mine" in "".join(p.read_text() for p in out.rglob("*") if p.is_file())


def test_force_replaces_and_the_cli_says_how_to_run_it(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path, planted_workload(), one_finding())
    with gzip.open(run / rundir.state_image("40/prefix"), "wb") as f:
        f.write(bytes(B))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.sh").write_text("old\n")
    status, out, err = cli(capsys, str(run), "40/prefix", "--script", "r.sh", "--force")
    assert (status, err) == (0, "")
    assert "run as root: sh r.sh" in out and (tmp_path / "r.img.gz").is_file()
    assert (tmp_path / "r.sh").read_text().startswith("#!/bin/sh\n")
    fst = tmp_path / "fst"
    fst.mkdir()
    status, out, err = cli(capsys, str(run), "40/prefix", "--fstests", "fst", "--test-name",
                           "ext4/900")
    assert (status, err) == (0, "")
    assert (fst / "tests/ext4/900").is_file() and "./check ext4/900" in out


def test_help_teaches_both_forms_with_examples(capsys):
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = capsys.readouterr().out
    for needed in ("--script OUT.sh", "--fstests DIR", "--test-name", "--force", "examples:",
                   "powercut export results/crash-.../ 41/prefix --script repro.sh",
                   "./check generic/999"):
        assert needed in text, needed


FIXTURE = Path(__file__).parent.parent / "fixtures" / "export"


@pytest.fixture
def short_tmp():
    """A directory whose path always has the same length: the fstests test wraps a comment
    that names the run directory."""
    path = Path(tempfile.mkdtemp(prefix="pcx", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_script_and_fstests_test_of_the_fixture_state_are_as_recorded(short_tmp):
    """Every finding kind the oracle makes on the planted tree, exported: the script, the
    fstests test and its golden output stay byte for byte what they were (fixtures in
    tests/fixtures/export, with the run directory written as RUN)."""
    tmp_path = short_tmp
    workload = planted_workload()
    oracle = run_ops(workload, tmp_path / "o")
    promised = tmp_path / "promised"
    run_ops(workload, promised, MARK_OP)
    findings: list[dict] = []
    for name in sorted(DOCTORINGS):
        broken = tmp_path / f"broken-{name}"
        copy_tree(promised, broken)
        DOCTORINGS[name][0](broken)
        findings += [f for f in findings_of(broken, workload, oracle) if f not in findings]
    run = make_run(tmp_path, workload, findings)
    with open(run / rundir.state_image("40/prefix"), "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(b"\1" * B)
    (tmp_path / "out").mkdir()
    script, _ = write_script(load_export_state(run, "40/prefix"), tmp_path / "out" / "repro.sh")
    fst = tmp_path / "fstests"
    (fst / "tests/generic").mkdir(parents=True)
    (fst / "tests/generic/group.list").write_text("998 auto\n")
    test, golden = write_fstests(load_export_state(run, "40/prefix"), fst, "generic/998")
    for made, name in ((script, "repro.sh"), (test, "998"), (golden, "998.out")):
        assert made.read_text().replace(str(run), "RUN") == (FIXTURE / name).read_text(), name


def test_the_flakey_form_runs_to_the_marks_durability_op_then_cuts_and_checks(tmp_path):
    run = make_run(tmp_path, planted_workload(), one_finding())
    fst = tmp_path / "fstests"
    (fst / "tests/generic").mkdir(parents=True)
    (fst / "tests/generic/group.list").write_text("998 auto\n")
    test, out = write_fstests(load_export_state(run, "40/prefix"), fst, next_test_name(
        "generic/998"), form="flakey")
    assert test == fst / "tests/generic/999"
    text = test.read_text()
    for needed in (". ./common/dmflakey", "_require_dm_target flakey", "_init_flakey",
                   "_require_metadata_journaling $SCRATCH_DEV", 'MOUNT_OPTIONS="$MOUNT_OPTIONS -o data=ordered"',
                   "_scratch_mount", "_flakey_drop_and_remount", "_scratch_unmount",
                   "_cleanup_flakey", "_begin_fstest auto quick log recoveryloop",
                   "if pc_exists \"$pc_root\"/d/g; then"):
        assert needed in text, needed
    # The workload stops at op 11, the durability op of the state's mark pc-2; no marks.
    assert "# op 11: fsync_dir ." in text and "# op 12" not in text
    assert "_log_writes" not in text and "dmthin" not in text
    assert out.read_text() == ("QA output created by 999\n"
                               "ok: d/g exists (promised by fsync_dir d at pc-1)\n")
    assert (fst / "tests/generic/group.list").read_text().splitlines()[-1] == (
        "999 auto quick log recoveryloop")
    assert subprocess.run(["bash", "-n", str(test)], capture_output=True).returncode == 0


def test_a_two_disk_state_is_a_log_writes_test_of_both_disks_and_no_other_form(tmp_path):
    """ext4 with its journal on a disk of its own: the fstests test records both disks, a
    mark on both logs after each durability op, replays both to the state's mark and mounts
    the journal by path; the script (one image) and the dm-flakey form (which keeps writes
    completed without a flush) refuse it."""
    run = make_run(tmp_path, planted_workload(), one_finding(), target="ext4/logdev")
    state = load_export_state(run, "40/prefix")
    fst = tmp_path / "fst2"
    fst.mkdir()
    test, _ = write_fstests(state, fst, "generic/997")
    text = test.read_text()
    for needed in ("_require_logdev", "_require_log_writes", "_require_dm_target linear",
                   "LOGWRITES_DEV=/dev/mapper/pc-log-data",
                   'mke2fs -F -q -O journal_dev -b 4096 "${pc_jdev}"',
                   '-J "device=${pc_jdev}" "${LOGWRITES_DMDEV}"',
                   "sync $LOGWRITES_DMDEV $pc_jdev\npc_mark mkfs",
                   "-o \"data=ordered,journal_path=${pc_jdev}\" $LOGWRITES_DMDEV",
                   f"_log_writes_replay_log {MARK} $DMTHIN_VOL_DEV\npc_zero_journal",
                   f"--end-mark {MARK}",
                   "-o \"data=ordered,journal_path=${SCRATCH_LOGDEV}\" $DMTHIN_VOL_DEV",
                   'e2fsck -f -n -j "${SCRATCH_LOGDEV}" "${DMTHIN_VOL_DEV}"',
                   "count=128 oflag=direct", "\nsize=16\n"):
        assert needed in text, needed
    assert "pc_mark pc-0" in text and "_log_writes_mark pc-" not in text
    assert "_require_no_logdev" not in text and "_log_writes_mkfs" not in text
    assert subprocess.run(["bash", "-n", str(test)], capture_output=True).returncode == 0
    with pytest.raises(ExportError, match="keeps writes completed without a flush"):
        write_fstests(state, fst, "generic/996", form="flakey")
    with pytest.raises(ExportError, match="the script recovers one disk's image"):
        write_script(state, tmp_path / "r.sh")
    assert not (tmp_path / "r.sh").exists()


def test_the_flakey_form_takes_no_subset_state(tmp_path):
    (tmp_path / "subset").mkdir()
    run = make_run(tmp_path / "subset", planted_workload(), one_finding(), key="40/subset:7")
    (tmp_path / "fst").mkdir()
    with pytest.raises(ExportError, match="a subset state is not the log replayed in order"):
        write_fstests(load_export_state(run, "40/subset:7"), tmp_path / "fst", form="flakey")


@pytest.mark.parametrize("name", ["plan.json", "results.json", "oracle.json"])
def test_a_run_file_cut_short_is_one_line_naming_it_and_nothing_is_written(tmp_path, name,
                                                                         capsys):
    """Fault campaign, short form: a truncated run file given to export or recheck."""
    run = make_run(tmp_path, planted_workload(), one_finding())
    path = run / name
    path.write_text(path.read_text()[:100])
    before = sorted(p.name for p in run.iterdir())
    out = tmp_path / "out.sh"
    assert main(["export", str(run), "40/prefix", "--script", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and name in err, err
    assert not out.exists() and sorted(p.name for p in run.iterdir()) == before
