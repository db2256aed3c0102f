"""The fstests test: the workload in fstests' words, replayed to the state's mark, then checked."""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2

from crashcases.check import fsck_first
from crashcases.crash.plan import disk_sizes
from crashcases.execute import mark_name
from crashcases.findings.checks import Check, check_functions, finding_lines
from crashcases.findings.export import (
    DEFAULT_TEST_NAME,
    FLAKEY_GROUPS,
    FSTESTS_GROUPS,
    ROOT_VAR,
    ExportError,
    ExportState,
    pattern_byte,
    pattern_data,
    skipped,
)
from crashcases.findings.script import build_checks
from crashcases.oracle.log import FLAG_LETTERS, OracleLog
from crashcases.vocabulary import CrashPointKind, VariantKind
from crashcases.workload.kinds import UTIME_NOW, UTIME_OMIT
from crashcases.workload.model import FsModel
from crashcases.workload.ops import (
    DURABILITY_OPS,
    FallocMode,
    Op,
    OpKind,
    Workload,
    needs_data,
)
from framework.core.files import write_atomic
from recovery.filesystems import adapter_for

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Step:
    """The shell lines of one op in the fstests test, and what the test must require for it."""

    lines: tuple[str, ...]
    requires: tuple[str, ...] = ()  # lines for the test's preamble (sources, _require_*)


@dataclass(frozen=True, slots=True)
class OpContext:
    index: int
    size_before: int  # the file's size before the op (APPEND writes there)

    @property
    def pattern(self) -> str:
        return f"0x{pattern_byte(self.index):02x}"


def fs_path(path: str) -> str:
    """``$SCRATCH_MNT/h/data``: a workload path on the recorded filesystem, quoted for sh."""
    return "$SCRATCH_MNT" + (f"/{shlex.quote(path)}" if path else "")


IO = "$XFS_IO_PROG"
FULL = ">> $seqres.full"


def _io(op: Op, commands: Sequence[str], flags: str = "", path: str | None = None) -> str:
    # Double quotes, as fstests writes them: a command may name a file ($SCRATCH_MNT/...).
    cs = " ".join(f'-c "{c}"' for c in commands)
    return f"{IO}{' ' + flags if flags else ''} {cs} {fs_path(op.path if path is None else path)} {FULL}"


def _io_file(path: str) -> str:
    """A file named inside an xfs_io command, which splits its command line at blanks."""
    if shlex.quote(path) != path:
        raise ExportError(f"path {path!r}: a $XFS_IO_PROG command cannot name it; "
                          "export this state with --script")
    return fs_path(path)


def _require_io(*commands: str) -> tuple[str, ...]:
    return tuple(f"_require_xfs_io_command {c}" for c in commands)


def _write(flags: str = "", require: tuple[str, ...] = ()) -> Callable[[Op, OpContext], Step]:
    def render(op: Op, ctx: OpContext) -> Step:
        return Step((_io(op, [f"pwrite -S {ctx.pattern} {op.offset} {op.length}"], flags),),
                    require)
    return render


def _whole_write(op: Op, ctx: OpContext) -> Step:
    # O_TRUNC, then the new bytes (a zero-length write is the truncation alone).
    if not op.length:
        return Step((f": > {fs_path(op.path)}",))
    return Step((_io(op, [f"pwrite -S {ctx.pattern} 0 {op.length}"], "-t"),))


def _append(op: Op, ctx: OpContext) -> Step:
    # O_APPEND: the kernel writes at the end whatever the offset; the model's size is it.
    return Step((_io(op, [f"pwrite -S {ctx.pattern} {ctx.size_before} {op.length}"], "-a"),))


def _odsync(op: Op, ctx: OpContext) -> Step:
    # xfs_io has no O_DSYNC open flag; dd's oflag=dsync opens with it, and one block
    # of op.length bytes is one write(2).
    fill = f"'\\{pattern_byte(ctx.index):03o}'"
    return Step((f"head -c {op.length} /dev/zero | tr '\\0' {fill} | dd of={fs_path(op.path)} "
                 f"bs={op.length} seek={op.offset} oflag=dsync,seek_bytes conv=notrunc "
                 f"iflag=fullblock status=none",))


#: The xfs_io command of each fallocate mode.
FALLOC_COMMANDS = {
    FallocMode.ALLOCATE: "falloc",
    FallocMode.KEEP_SIZE: "falloc -k",
    FallocMode.PUNCH_HOLE: "fpunch",
    FallocMode.ZERO_RANGE: "fzero",
    FallocMode.COLLAPSE_RANGE: "fcollapse",
    FallocMode.INSERT_RANGE: "finsert",
    FallocMode.ZERO_RANGE_KEEP_SIZE: "fzero -k",
    FallocMode.UNSHARE_RANGE: "funshare",
}


def _fallocate(op: Op, ctx: OpContext) -> Step:
    command = FALLOC_COMMANDS[op.falloc]
    return Step((_io(op, [f"{command} {op.offset} {op.length}"]),),
                _require_io(command.split()[0]))


def _mmap_range(op: Op) -> tuple[int, int]:
    """The page-aligned mapping that holds [offset, offset+length) (mmap(2) wants it aligned)."""
    start = op.offset // 4096 * 4096
    return start, op.offset + op.length - start


def _mmap_write(op: Op, ctx: OpContext) -> Step:
    start, length = _mmap_range(op)
    # munmap at exit leaves the pages dirty and unwritten, as the recording did.
    return Step((_io(op, [f"mmap -rw {start} {length}",
                          f"mwrite -S {ctx.pattern} {op.offset} {op.length}"]),))


def _msync(op: Op, ctx: OpContext) -> Step:
    start, length = _mmap_range(op)
    return Step((_io(op, [f"mmap -rw {start} {length}", f"msync -s {start} {length}"]),))


def _simple(template: str, requires: tuple[str, ...] = ()) -> Callable[[Op, OpContext], Step]:
    """A coreutils command: {p} is the path, {d} the destination, {t} the symlink text."""
    def render(op: Op, ctx: OpContext) -> Step:
        return Step((template.format(p=fs_path(op.path), d=fs_path(op.dst),
                                     t=shlex.quote(op.target)),), requires)
    return render


def _setxattr(op: Op, ctx: OpContext) -> Step:
    # setfattr takes a value as 0x and hex digits; no -v sets an empty value.
    value = f" -v 0x{f'{pattern_byte(ctx.index):02x}' * op.length}" if op.length else ""
    return Step((f"$SETFATTR_PROG -n {shlex.quote(op.xattr)}{value} {fs_path(op.path)}",),
                _ATTRS)


def _copy(op: Op, ctx: OpContext) -> Step:
    return Step((_io(op, [f"copy_range -s {op.offset} -d {op.dst_offset} -l {op.length} "
                          f"{_io_file(op.path)}"], path=op.dst),), _require_io("copy_range"))


def _reflink(args: Callable[[Op], str]) -> Callable[[Op, OpContext], Step]:
    def render(op: Op, ctx: OpContext) -> Step:
        return Step((_io(op, [f"reflink {_io_file(op.path)}{args(op)}"], path=op.dst),),
                    (". ./common/reflink", "_require_scratch_reflink"))
    return render


def _direct_sync(dd_flag: str) -> Callable[[Op, OpContext], Step]:
    # dd opens with O_DIRECT and O_SYNC or O_DSYNC (oflag), and one aligned block of
    # op.length bytes is one write(2).
    def render(op: Op, ctx: OpContext) -> Step:
        fill = f"'\\{pattern_byte(ctx.index):03o}'"
        return Step((f"head -c {op.length} /dev/zero | tr '\\0' {fill} | dd "
                     f"of={fs_path(op.path)} bs={op.length} seek={op.offset} "
                     f"oflag=direct,{dd_flag},seek_bytes conv=notrunc iflag=fullblock "
                     f"status=none",), ("_require_odirect",))
    return render


def _utimes(op: Op, ctx: OpContext) -> Step:
    # touch(1): -a and -m pick the time, -d @SECONDS.NANOSECONDS gives it (none: now).
    lines = []
    for flag, ns in (("-a", op.atime_ns), ("-m", op.mtime_ns)):
        if ns == UTIME_OMIT:
            continue
        when = "" if ns == UTIME_NOW else f" -d @{ns // 10**9}.{ns % 10**9:09d}"
        lines.append(f"touch {flag}{when} {fs_path(op.path)}")
    return Step(tuple(lines))


def _chown(op: Op, ctx: OpContext) -> Step:
    owner = ("" if op.uid == -1 else str(op.uid)) + ("" if op.gid == -1 else f":{op.gid}")
    return Step((f"chown {owner} {fs_path(op.path)}",))


def _setflags(op: Op, ctx: OpContext) -> Step:
    # chattr(1) changes only the flags it names, as the workload's ioctl does.
    on = "".join(c for bit, c in FLAG_LETTERS.items() if op.flags & bit)
    off = "".join(c for bit, c in FLAG_LETTERS.items() if not op.flags & bit)
    return Step((f"$CHATTR_PROG -{off}{' +' + on if on else ''} {fs_path(op.path)}",),
                tuple(f"_require_chattr {c}" for c in on))


_RENAMEAT2 = (". ./common/renameat2",)
_ATTRS = (". ./common/attr", "_require_attrs user")
#: What the test must require for the programs some checks run (the rest are coreutils).
CHECK_TOOL_REQUIRES = {"getfattr": _ATTRS}

#: How each op kind is done in the fstests test (tests/unit/test_kinds.py holds every
#: kind to be here; translate_ops refuses one that is not in the table it is given).
FSTESTS_OPS: dict[OpKind, Callable[[Op, OpContext], Step]] = {
    OpKind.CREAT: _simple(": > {p}"),
    OpKind.MKDIR: _simple("mkdir {p}"),
    OpKind.WRITE: _whole_write,
    OpKind.PWRITE: _write(),
    OpKind.APPEND: _append,
    OpKind.TRUNCATE: lambda op, ctx: Step((_io(op, [f"truncate {op.size}"]),)),
    OpKind.FALLOCATE: _fallocate,
    OpKind.RENAME: _simple("mv -T {p} {d}"),
    OpKind.LINK: _simple("ln {p} {d}"),
    OpKind.UNLINK: _simple("unlink {p}"),
    OpKind.RMDIR: _simple("rmdir {p}"),
    OpKind.SYMLINK: _simple("ln -s {t} {p}"),
    OpKind.SETXATTR: _setxattr,
    OpKind.REMOVEXATTR: lambda op, ctx: Step(
        (f"$SETFATTR_PROG -x {shlex.quote(op.xattr)} {fs_path(op.path)}",),
        _ATTRS),
    OpKind.FSYNC: lambda op, ctx: Step((_io(op, ["fsync"]),)),
    OpKind.FDATASYNC: lambda op, ctx: Step((_io(op, ["fdatasync"]),)),
    OpKind.SYNC: lambda op, ctx: Step(("sync",)),
    OpKind.FSYNC_DIR: lambda op, ctx: Step((_io(op, ["fsync"], "-r"),)),
    OpKind.DIRECT_WRITE: _write("-d", ("_require_odirect",)),
    OpKind.MMAP_WRITE: _mmap_write,
    OpKind.MSYNC: _msync,
    OpKind.WRITE_OSYNC: _write("-s"),
    OpKind.WRITE_ODSYNC: _odsync,
    OpKind.SYNC_FILE_RANGE: lambda op, ctx: Step(
        (_io(op, [f"sync_range -b -w -a {op.offset} {op.length}"], "-r"),),
        _require_io("sync_range")),
    OpKind.SYNCFS: lambda op, ctx: Step((_io(op, ["syncfs"], "-r"),), _require_io("syncfs")),
    OpKind.RENAME_NOREPLACE: _simple("$here/src/renameat2 -n {p} {d}",
                                     (*_RENAMEAT2, "_require_renameat2 noreplace")),
    OpKind.RENAME_EXCHANGE: _simple("$here/src/renameat2 -x {p} {d}",
                                    (*_RENAMEAT2, "_require_renameat2 exchange")),
    OpKind.COPY_FILE_RANGE: _copy,
    OpKind.CLONE: _reflink(lambda op: ""),
    OpKind.CLONE_RANGE: _reflink(lambda op: f" {op.offset} {op.dst_offset} {op.length}"),
    OpKind.DEDUPE_RANGE: lambda op, ctx: Step(
        (_io(op, [f"dedupe {_io_file(op.path)} {op.offset} {op.dst_offset} {op.length}"],
             path=op.dst),),
        (". ./common/reflink", "_require_scratch_dedupe")),
    OpKind.RENAME_WHITEOUT: _simple("$here/src/renameat2 -w {p} {d}",
                                    (*_RENAMEAT2, "_require_renameat2 whiteout")),
    OpKind.MKNOD: _simple("mkfifo -m 0644 {p}"),
    OpKind.CHMOD: lambda op, ctx: Step((f"chmod {op.mode:04o} {fs_path(op.path)}",)),
    OpKind.CHOWN: _chown,
    OpKind.UTIMES: _utimes,
    OpKind.SETFLAGS: _setflags,
    OpKind.DIRECT_WRITE_OSYNC: _direct_sync("sync"),
    OpKind.DIRECT_WRITE_ODSYNC: _direct_sync("dsync"),
}


def translate_ops(workload: Workload, oracle: OracleLog, last: int,
                  table: dict[OpKind, Callable[[Op, OpContext], Step]] | None = None,
                  *, marks: bool = True, mark_command: str = "_log_writes_mark",
                  ) -> tuple[list[str], list[str]]:
    """The workload's ops 0..last as fstests shell lines, with (``marks``) a dm-log-writes
    mark after every durability op (``mark_command NAME``), and the preamble lines they
    require. An op kind without a translation: ExportError."""
    table = FSTESTS_OPS if table is None else table
    lines: list[str] = []
    requires: list[str] = []
    model = FsModel()
    placed = 0
    for index, op in enumerate(workload.ops[: last + 1]):
        if skipped(oracle, index):
            why = oracle.skipped[index]
            lines.append(f"# op {index} ({op.describe()}): skipped, as in the recording ({why})")
            continue
        render = table.get(op.kind)
        if render is None:
            raise ExportError(f"op {index} ({op.describe()}): no fstests translation for op kind "
                              f"{op.kind.value!r}; export this state with --script")
        node = model.lookup(op.path)
        size = len(model.nodes[node].data) if node is not None else 0
        step = render(op, OpContext(index, size))
        lines.append(f"# op {index}: {op.describe()}")
        lines += step.lines
        requires += [r for r in step.requires if r not in requires]
        model.apply(op, pattern_data(index, op) if needs_data(op) else b"")
        if op.kind in DURABILITY_OPS:
            if marks:
                lines.append(f"{mark_command} {mark_name(placed)}")
            placed += 1
    return lines, requires


TEST_NAME = re.compile(r"^(?P<dir>[a-z][a-z0-9_-]*)/(?P<num>[0-9]{3,})$")


def next_test_name(name: str) -> str:
    """The test after ``name`` in its directory (generic/998 -> generic/999)."""
    sub, seq = parse_test_name(name)
    return f"{sub}/{int(seq) + 1:0{len(seq)}d}"


def parse_test_name(name: str) -> tuple[str, str]:
    m = TEST_NAME.match(name)
    if not m:
        raise ExportError(f"--test-name {name!r}: expected DIR/NUMBER as fstests names tests, "
                          f"e.g. {DEFAULT_TEST_NAME}")
    return m["dir"], m["num"]


def check_fstests_state(state: ExportState, form: str = "log-writes") -> None:
    """Refuse what fstests' dm-log-writes tests (or, ``form`` "flakey", its dm-flakey
    tests) cannot express, with a one-line error."""

    if state.variant.kind is not VariantKind.PREFIX:
        raise ExportError(
            f"state {state.key!r}: a {state.variant.kind.value} state is not the log replayed in "
            "order to a mark, which is all fstests can replay; export it with --script")
    if state.point_kind != CrashPointKind.MARK.value:
        raise ExportError(
            f"state {state.key!r}: its crash point is a {state.point_kind or 'unknown'} point "
            "(a log entry, not a mark), and fstests replays to marks; export it with --script")
    if state.target.needs_journal_disk and form == "flakey":
        # fstests' dm-flakey can drop the writes of both disks (SCRATCH_LOGDEV too), but it
        # keeps every write a disk completed: what a missing flush loses, it never loses.
        raise ExportError(
            f"state {state.key!r}: {state.target.name} keeps its journal on a second disk, and "
            "a dm-flakey cut keeps writes completed without a flush; the dm-log-writes form "
            "records both disks")
    if state.target.journalled and fsck_first(state.target):
        # A journal only the checker replays (JFS): mounting the replayed log as fstests
        # does would meet a dirty volume. Without a journal the mount works as it is; the
        # read-only fsck powercut runs first changes nothing the promises are about.
        raise ExportError(
            f"state {state.key!r}: recovery of {state.target.name} is its checker's log "
            "replay before the mount, which fstests' dm-log-writes tests do not do; "
            "export it with --script")


#: The two forms of an exported test: replaying a dm-log-writes recording to the state's
#: mark, or running the workload on dm-flakey and dropping every write after the mark's
#: durability op (the form fstests' own crash tests are written in).
FORMS = ("log-writes", "flakey")


def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: resources.files("crashcases.findings")
                                     .joinpath("templates", name).read_text()),
        undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True,
        autoescape=False)  # shell text, not HTML
    return env.get_template("fstests.j2")


def fstests_text(state: ExportState, checks: Sequence[Check], seq: str,
                 form: str = "log-writes") -> tuple[str, str]:
    """The fstests test (in ``form``, see FORMS) and its golden output for ``state``."""
    target = state.target
    adapter = adapter_for(target.fstype)
    flakey = form == "flakey"
    replay_to = state.last_mark or "mkfs"
    # dm-flakey runs the workload only up to the durability op of the state's mark.
    end = state.mark_op if flakey else state.window_end
    two_disks = target.needs_journal_disk
    ops, requires = translate_ops(state.workload, state.oracle, end, marks=not flakey,
                                  mark_command="pc_mark" if two_disks else "_log_writes_mark")
    mount_opts = ",".join(adapter.mount_options(target))
    for tool in sorted({t for c in checks for t in c.tools}):
        requires += [r for r in CHECK_TOOL_REQUIRES.get(tool, ()) if r not in requires]
    what = (f"run a workload on dm-flakey, lose every write after the durability operation "
            f"of mark {replay_to} (a power cut as it returned), mount again"
            if flakey else
            f"replay a dm-log-writes recording of a workload to the mark {replay_to}")
    header = textwrap.fill(
        f"Crash consistency: {what} and check what was promised durable by then. Exported by "
        f"powercut from crash state {state.key} of run {state.run_dir.name} (target "
        f"{target.name}: {target.fstype}, mkfs options "
        f"{' '.join(target.mkfs_options) or '(none)'}, mount options {mount_opts or '(none)'}; "
        f"workload {case_name(state.plan.case)}, seed "
        f"{state.plan.seed}), which was {state.outcome.value}.", width=76)
    text = _template().render(
        seq=seq, header=header.splitlines(), found=finding_lines(state),
        groups=" ".join(FSTESTS_GROUPS if not flakey else FLAKEY_GROUPS), flakey=flakey,
        sources=[r for r in requires if r.startswith(". ")],
        needs=[r for r in requires if not r.startswith(". ")],
        fstype=target.fstype, fstype_quoted=shlex.quote(target.fstype), target=target.name,
        journalled=target.journalled, mount_opts=mount_opts,
        mount_args=f" -o {shlex.quote(mount_opts)}" if mount_opts else "",
        mkfs_args="".join(f" {shlex.quote(o)}" for o in target.mkfs_options),
        end=end, ops=ops, last_mark=state.last_mark, replay_to=replay_to,
        promise=state.durability_words(replay_to) if state.last_mark else "mkfs",
        root_var=ROOT_VAR, functions=check_functions(checks, state.oracle.block_bytes),
        checks=[c.render() for c in checks], two_disks=two_disks,
        **(two_disk_commands(state) if two_disks else {}))
    golden = "\n".join([f"QA output created by {seq}", *(f"ok: {c.what}" for c in checks), ""])
    return text, golden


#: Shell variables of the two-disk form: the devices mkfs and mount are given while the
#: workload is recorded, and those the replayed state is checked on.
_RECORDING = {"@DATA@": "LOGWRITES_DMDEV", "@JOURNAL@": "pc_jdev"}
_REPLAYED = {"@DATA@": "DMTHIN_VOL_DEV", "@JOURNAL@": "SCRATCH_LOGDEV"}


def _shell(argv: Sequence[str], devices: dict[str, str]) -> str:
    """``argv`` as one shell line: a word naming a device in double quotes, the device as
    its variable; every other word quoted as shlex quotes it."""
    words = []
    for arg in argv:
        if not any(p in arg for p in devices):
            words.append(shlex.quote(arg))
            continue
        text = re.sub(r'(["\\$`])', r"\\\1", arg)
        for placeholder, var in devices.items():
            text = text.replace(placeholder, "${" + var + "}")
        words.append(f'"{text}"')
    return " ".join(words)


def two_disk_commands(state: ExportState) -> dict[str, object]:
    """What the two-disk form runs: both disks' mkfs, the mount options while recording and
    after the replay, the read-only fsck of the replayed state, the journal disk's size:
    the commands of powercut's own check (recovery.filesystems), with fstests' devices."""
    target = state.target
    adapter = adapter_for(target.fstype)
    journal_mkfs = adapter.journal_mkfs_argv(target, "@JOURNAL@")
    mount = [",".join(adapter.mount_options(target, journal_dev="@JOURNAL@"))]
    # The recording's own disk sizes: the same block groups, so the same allocator.
    sizes = disk_sizes(target, state.plan.data_mib)
    return {
        "journal_mkfs": _shell(journal_mkfs, _RECORDING) if journal_mkfs else None,
        "data_mkfs": _shell(adapter.mkfs_argv(target, "@DATA@", journal_dev="@JOURNAL@"),
                            _RECORDING),
        "recording_mount": _shell(mount, _RECORDING),
        "replayed_mount": _shell(mount, _REPLAYED),
        "fsck": _shell(adapter.fsck_argv("@DATA@", repair=False, journal_dev="@JOURNAL@"),
                       _REPLAYED),
        "journal_mib": sizes["journal"] // (1 << 20),
        "data_mib": sizes["data"] // (1 << 20),
    }


def case_name(case: str) -> str:
    """A case as a test that leaves this host names it: a workload file by its name alone."""
    return f"file:{Path(case[5:]).name}" if case.startswith("file:") else case


def write_fstests(state: ExportState, fstests_dir: Path, test_name: str = DEFAULT_TEST_NAME,
                  *, force: bool = False, form: str = "log-writes") -> tuple[Path, Path]:
    """Write the fstests test and its golden output into ``fstests_dir``; returns both paths.

    If the directory's group.list exists (a built checkout), the test's line
    is added to it so that ``./check`` finds the test without a rebuild.
    """
    if form not in FORMS:
        raise ExportError(f"form {form!r}: expected {' or '.join(FORMS)}")
    sub, seq = parse_test_name(test_name)
    fstests_dir = fstests_dir.resolve()
    if not fstests_dir.is_dir():
        raise ExportError(f"{fstests_dir}: no such directory (an fstests checkout)")
    check_fstests_state(state, form)
    test_dir = fstests_dir / "tests" / sub
    test, out = test_dir / seq, test_dir / f"{seq}.out"
    for path in (test, out):
        if path.exists() and not force:
            raise ExportError(f"{path}: already exists (--force replaces it)")
    checks = build_checks(state, pattern_data, verify=False)
    text, golden = fstests_text(state, checks, seq, form)
    try:
        test_dir.mkdir(parents=True, exist_ok=True)
        for path, body, mode in ((test, text, 0o755), (out, golden, 0o644)):
            write_atomic(path, body, mode=mode)
        register(fstests_dir, test_name, form)
    except OSError as exc:
        raise ExportError(f"{test}: cannot write the test: {exc}") from exc
    return test, out


def register(fstests_dir: Path, test_name: str, form: str) -> None:
    """Add the test's line to its directory's group.list, if there is one (a built
    checkout), so that ``./check`` finds the test without a rebuild."""
    sub, seq = parse_test_name(test_name)
    group_list = fstests_dir / "tests" / sub / "group.list"
    if group_list.is_file():
        kept = [ln for ln in group_list.read_text().splitlines() if ln.split()[:1] != [seq]]
        groups = FLAKEY_GROUPS if form == "flakey" else FSTESTS_GROUPS
        group_list.write_text("\n".join([*kept, f"{seq} {' '.join(groups)}"]) + "\n")


def copy_tests(source: Path, fstests_dir: Path, tests: Sequence[tuple[str, str]]) -> None:
    """Copy tests (name, form) and their golden outputs from ``source``/tests, a report
    folder's, into a checkout, and register them."""
    for name, form in tests:
        sub, seq = parse_test_name(name)
        for file in (seq, f"{seq}.out"):
            src = source / "tests" / sub / file
            if not src.is_file():
                raise ExportError(f"{src}: missing (the report's test {name})")
            dest = fstests_dir / "tests" / sub / file
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
        register(fstests_dir, name, form)

