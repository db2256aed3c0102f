"""Reproducers filesystem developers accept: a standalone shell script and an fstests test.

A failing crash state of a run (``POINT/VARIANT`` in results.json) is turned
into one of two self-contained forms, on the host, without a guest:

- ``write_script``: a POSIX shell script plus the state's image (gzip'ed)
  beside it. The script needs only dmsetup, losetup, the filesystem's
  checker and coreutils. It attaches the image read-only to a loop device,
  puts a non-persistent dm-snapshot over it (the COW on a loop-backed
  temporary file), so journal replay at mount and fsck never change the
  image, then recovers the state as ``crashcases.check`` does (checker
  first for filesystems whose kernel does not replay a journal, a timed
  mount, a read-only fsck), and checks each broken promise of the state's
  findings with plain shell: ``test -e``, ``stat -c %s``, sha256 of 4 KiB
  blocks. One line per check, ``ok: ...`` or ``FAIL: ...``; exit 1 if any
  check fails (the finding reproduces), 0 if none does, 2 if it cannot run.
- ``write_fstests``: an fstests test in the style of its dm-log-writes
  tests (generic/455, generic/482): the workload is run again through
  ``$XFS_IO_PROG`` and coreutils on a log-writes device over dm-thin, with
  ``_log_writes_mark pc-N`` after every durability operation (the mark
  names powercut's recording uses), the log is replayed to the state's
  mark, and the same checks run; its golden output is what a filesystem
  that keeps every promise prints. Only prefix states at a mark can be
  expressed so: the other variants need the script.

The checks are computed from the run's oracle and the workload re-created
from plan.json, not from the finding's text alone: a block must hold one of
the versions the oracle allows, hashed here from the re-created data. The
script uses the workload's own bytes (``op_data``) and verifies them
against the oracle's hashes; the fstests test writes one byte pattern per
operation (``pwrite -S``), so its expected hashes come from the same model
fed with those patterns.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import re
import shlex
import shutil
import textwrap
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashcases.check import fsck_first
from crashcases.engine import (
    CrashPlan,
    disk_sizes,
    image_name,
    load_checked,
    load_state,
    timeouts_for,
    validate_plan,
    write_image,
)
from crashcases.operations import (
    DURABILITY_OPS,
    FallocMode,
    FsModel,
    Op,
    OpKind,
    Workload,
    mark_name,
    needs_data,
    op_data,
)
from crashcases.oracle import (
    FindingKind,
    NodeKind,
    OracleError,
    OracleLog,
    data_digests,
    value_digest,
)
from crashcases.outcomes import Outcome, fails
from crashcases.points import CrashPointKind, Variant, VariantKind
from devicemapper.logformat import LogReader
from framework.core.errors import ConfigError
from recovery.filesystems import adapter_for
from recovery.mount import mount_argv
from recovery.targets import Target

log = logging.getLogger(__name__)

MiB = 1 << 20
#: The fstests test name used when none is given.
DEFAULT_TEST_NAME = "generic/999"
#: fstests groups of the exported test (all named in fstests' doc/group-names.txt).
FSTESTS_GROUPS = ("auto", "quick", "log", "replay", "recoveryloop", "thin")
#: Exit statuses of the script.
EXIT_PASSED, EXIT_REPRODUCED, EXIT_CANNOT_RUN = 0, 1, 2


class ExportError(ConfigError):
    """A state cannot be exported as asked (names the input and what is wrong)."""


# -- the state ------------------------------------------------------------------


@dataclass(frozen=True)
class ExportState:
    """A failing crash state of a finished run and everything needed to reproduce it."""

    run_dir: Path
    key: str
    plan: CrashPlan
    target: Target
    workload: Workload
    oracle: OracleLog
    variant: Variant
    point: int
    point_kind: str
    last_mark: str | None
    result: dict[str, Any]

    @property
    def outcome(self) -> Outcome:
        return Outcome(self.result["outcome"])

    @property
    def findings(self) -> list[dict[str, Any]]:
        return list(self.result.get("findings") or ())

    @property
    def mark_index(self) -> int:
        return self.oracle.mark_index(self.last_mark)

    @property
    def window_end(self) -> int:
        """The last op whose effects may be in the state: the next mark's durability op."""
        marks = self.oracle.mark_records
        k = self.mark_index
        return marks[k + 1].op if k + 1 < len(marks) else self.oracle.n_ops - 1

    def durability_words(self, mark: str) -> str:
        """``fsync h/data``: the durability op a mark follows."""
        try:
            rec = self.oracle.mark_records[self.oracle.mark_index(mark)]
        except OracleError:
            return "an unknown operation"
        return f"{rec.kind} {rec.path or '.'}"

    def promise_words(self, mark: str) -> str:
        """``fsync h/data at pc-1``: a mark and the durability op it follows."""
        return f"{self.durability_words(mark)} at {mark}"


RUN_FILES = ("plan.json", "results.json", "oracle.json")


def load_export_state(run_dir: Path, key: str) -> ExportState:
    """Read state ``key`` of ``run_dir``; bad input is a one-line ExportError."""
    run_dir = run_dir.resolve()
    try:
        plan, entry = load_checked(run_dir, key, RUN_FILES)
    except ConfigError as exc:
        raise ExportError(str(exc)) from None
    result = entry["result"]
    target, workload = validate_plan(plan)
    if target.needs_journal_disk:
        raise ExportError(f"state {key!r}: {target.name} keeps its journal on a second disk; "
                          "reproducers replay one disk (use powercut recheck, or the two images "
                          "the run kept)")
    try:
        outcome = Outcome(result["outcome"])
    except (KeyError, ValueError):
        raise ExportError(f"state {key!r}: unreadable result in results.json") from None
    if outcome is Outcome.OK:
        raise ExportError(f"state {key!r} passed (ok): nothing to reproduce")
    if not fails(outcome, target):
        raise ExportError(f"state {key!r} is {outcome.value}, which is no failure of "
                          f"{target.name}: nothing to reproduce")
    try:
        oracle = OracleLog.from_json((run_dir / "oracle.json").read_text())
    except OracleError as exc:
        raise ExportError(f"{run_dir / 'oracle.json'}: {exc}") from None
    if oracle.n_ops != len(workload.ops):
        raise ExportError(
            f"{run_dir}: the workload re-created from plan.json has {len(workload.ops)} ops, "
            f"oracle.json recorded {oracle.n_ops}: was the case changed since the run?")
    last_mark = entry.get("last_mark")
    if last_mark is not None and last_mark not in oracle.marks:
        raise ExportError(f"state {key!r}: its mark {last_mark!r} is not in oracle.json")
    point_text = key.partition("/")[0]
    return ExportState(
        run_dir=run_dir, key=key, plan=plan, target=target, workload=workload, oracle=oracle,
        variant=Variant.parse(key.partition("/")[2]),
        point=int(point_text) if point_text.isdigit() else -1,
        point_kind=str(entry.get("point_kind", "")), last_mark=last_mark, result=result)


# -- the data the workload wrote ------------------------------------------------

#: What op ``index`` writes: (index, op) -> bytes.
DataSource = Callable[[int, Op], bytes]


def recorded_data(seed: int) -> DataSource:
    """The bytes the recorded workload wrote (generated from its seed)."""
    return lambda index, op: op_data(seed, index, op.length)


def pattern_byte(index: int) -> int:
    """The byte op ``index`` writes in the fstests form: never 0, so data is not a hole."""
    return index % 255 + 1


def pattern_data(index: int, op: Op) -> bytes:
    return bytes([pattern_byte(index)]) * op.length


def skipped(oracle: OracleLog, index: int) -> bool:
    """Whether the recording skipped op ``index`` (unsupported there, or made invalid by that)."""
    return "[skipped:" in oracle.ops[index]


class Contents:
    """The data of chosen inodes after each op that changed it, by re-running the model."""

    def __init__(self, state: ExportState, data: DataSource, inodes: Iterable[int], *,
                 verify: bool) -> None:
        self.state, self.data = state, data
        oracle = state.oracle
        wanted = {ino: {v.op: v for v in oracle.inodes[ino].data}
                  for ino in inodes if ino in oracle.inodes}
        self._versions: dict[tuple[int, int], bytes] = {}
        model = FsModel()
        last = max((op for versions in wanted.values() for op in versions), default=-1)
        for index, op in enumerate(state.workload.ops[: last + 1]):
            if skipped(oracle, index):
                continue
            model.apply(op, data(index, op) if needs_data(op) else b"")
            for ino, versions in wanted.items():
                if index in versions and ino in model.nodes:
                    content = bytes(model.nodes[ino].data)
                    recorded = versions[index]
                    if verify and data_digests(content, oracle.block_bytes) != recorded.blocks:
                        raise ExportError(
                            f"{state.run_dir}: the workload re-created from plan.json does not "
                            f"match oracle.json (inode {ino} after {oracle.describe_op(index)}): "
                            "was the case changed since the run?")
                    self._versions[(ino, index)] = content

    def of(self, ino: int, op: int) -> bytes:
        return self._versions[(ino, op)]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- checks -------------------------------------------------------------------

#: Where the checked tree is mounted, in both forms.
ROOT_VAR = "pc_root"


def shell_path(path: str) -> str:
    """``"$pc_root"/h/data``: a workload path under the mounted state, quoted for sh."""
    return f'"${ROOT_VAR}"' + (f"/{shlex.quote(path)}" if path else "")


@dataclass(frozen=True, slots=True)
class Check:
    """One broken promise, checked with plain shell on the mounted state."""

    what: str  # stable words: printed after "ok:" or "FAIL:"
    test: str  # a shell condition, true when the promise is kept
    shows: str = ""  # shell words (inside double quotes) saying what is there instead
    tools: tuple[str, ...] = ()  # programs beyond those every script needs

    def render(self) -> str:
        shows = f' "{self.shows}"' if self.shows else ""
        what = shlex.quote(self.what)
        return f"if {self.test}; then\n\tpc_ok {what}\nelse\n\tpc_fail {what}{shows}\nfi"


_PROMISE = r"promised at (?P<mark>\S+) as of op (?P<op>\d+)"
_MISSING = re.compile(r"^missing; " + _PROMISE)
_AT_LEAST = re.compile(r"^size (?P<size>\d+) B; " + _PROMISE + r".*: at least (?P<bound>\d+) B")
_AT_MOST = re.compile(r"^size (?P<size>\d+) B; " + _PROMISE + r".*: at most (?P<bound>\d+) B")
_BLOCK = re.compile(r"^block (?P<block>\d+) \(bytes \d+-\d+\) holds (?:zeros|other data); "
                    + _PROMISE)
_WHOLE = re.compile(r"^(?P<size>\d+) B matching none of \d+ whole versions; " + _PROMISE)
_PRESENT = re.compile(r"^present \((?P<found>[^)]*)\); (?:" + _PROMISE + r"|first made by "
                      r"(?P<first>.*), after the window)")
_NEVER = re.compile(r"^the workload never created this name")
_WRONG_TYPE = re.compile(r"^found (?P<found>.+), expected (?P<kinds>[a-z/]+)")
_TARGET = re.compile(r"^target .*, made as ")
_XATTR = re.compile(r"^xattr (?P<name>\S+) is (?:absent|a value it never had since); " + _PROMISE)
_NLINK = re.compile(r"^st_nlink \d+ but \d+ names found: ")
_ONE_INODE = re.compile(r"^names of one inode are different inodes: (?P<names>.*)$")
_MANY_INODES = re.compile(r"^names of different inodes are one inode: (?P<names>.*)$")
_IO = re.compile(r"^(?:reading|listing the directory|readlink|getxattr)")


class CheckBuilder:
    """Turns the findings of a state into checks, with the data a ``DataSource`` gives."""

    def __init__(self, state: ExportState, data: DataSource, *, verify: bool) -> None:
        self.state = state
        self.oracle = state.oracle
        self.end = state.window_end
        self.block_bytes = self.oracle.block_bytes
        inodes = {ino for f in state.findings for ino in self._inodes(str(f.get("path", "")))}
        self.contents = Contents(state, data, inodes, verify=verify)
        self.data = data
        self.verify = verify

    def _inodes(self, path: str, kinds: Iterable[NodeKind] = tuple(NodeKind)) -> list[int]:
        """Every inode of ``kinds`` that ``path`` named up to the end of the window."""
        wanted = set(kinds)
        found = self.oracle.bindings_between(path, -1, self.end) - {None}
        return sorted(i for i in found if i is not None and self.oracle.inodes[i].kind in wanted)

    def _versions(self, path: str, since: int) -> list[bytes]:
        """The data ``path`` may hold: each file it named, from op ``since`` to the window's end."""
        out: list[bytes] = []
        for ino in self._inodes(path, (NodeKind.FILE,)):
            for v in self.oracle.versions_between(ino, since, self.end):
                content = self.contents.of(ino, v.op)
                if content not in out:
                    out.append(content)
        return out

    def checks(self) -> list[Check]:
        out: list[Check] = []
        for finding in self.state.findings:
            for check in self.of(finding):
                if check not in out:
                    out.append(check)
        return out

    def of(self, finding: dict[str, Any]) -> list[Check]:
        """The checks of one finding; a finding no check can express is an ExportError."""
        try:
            kind = FindingKind(finding["kind"])
            path, detail = str(finding["path"]), str(finding["detail"])
        except (KeyError, ValueError):
            raise ExportError(f"state {self.state.key!r}: unreadable finding {finding!r}") from None
        p = shell_path(path)
        name = path or "."
        if kind in (FindingKind.DATA_LOSS, FindingKind.WRONG_CONTENT):
            if m := _MISSING.match(detail):
                return [Check(f"{name} exists ({self._promised(m)})", f"pc_exists {p}",
                              "it is missing")]
            if m := _AT_LEAST.match(detail):
                bound = int(m["bound"])
                return [Check(f"{name} holds at least {bound} bytes ({self._promised(m)})",
                              f'[ "$(pc_size {p})" -ge {bound} ] 2>/dev/null',
                              f"size $(pc_size {p})")]
            if m := _AT_MOST.match(detail):
                bound = int(m["bound"])
                return [Check(f"{name} holds at most {bound} bytes ({self._promised(m)})",
                              f'[ "$(pc_size {p})" -le {bound} ] 2>/dev/null',
                              f"size $(pc_size {p})")]
            if m := _BLOCK.match(detail):
                return [self._block(name, p, path, int(m["block"]), int(m["op"]), m)]
            if m := _WHOLE.match(detail):
                hashes = sorted({_sha256(v) for v in self._versions(path, int(m["op"]))})
                return [Check(f"{name} holds one of {len(hashes)} allowed versions "
                              f"({self._promised(m)})",
                              f'pc_one_of "$(pc_sha256 {p})" {shlex.quote(" ".join(hashes))}',
                              f"sha256 $(pc_sha256 {p})")]
        elif kind is FindingKind.UNEXPECTED_ENTRY and _NEVER.match(detail):
            return [Check(f"{name} is absent (the workload never made it)", f"! pc_exists {p}",
                          f"it is there: $(pc_type {p})")]
        elif kind is FindingKind.UNEXPECTED_ENTRY and (m := _PRESENT.match(detail)):
            why = (self._promised(m) if m["mark"] else
                   f"only {m['first']} made it, after the window")
            return [Check(f"{name} is absent ({why})", f"! pc_exists {p}",
                          f"it is there: $(pc_type {p})")]
        elif kind is FindingKind.WRONG_TYPE and (m := _WRONG_TYPE.match(detail)):
            kinds = m["kinds"].split("/")
            test = " || ".join(f"pc_is {k} {p}" for k in kinds)
            return [Check(f"{name} is a {' or '.join(kinds)}", f"{{ {test}; }}",
                          f"it is $(pc_type {p})")]
        elif kind is FindingKind.WRONG_TARGET and _TARGET.match(detail):
            targets = sorted({self.oracle.inodes[i].target
                              for i in self._inodes(path, (NodeKind.SYMLINK,))})
            test = " || ".join(f'[ "$(readlink {p})" = {shlex.quote(t)} ]' for t in targets)
            return [Check(f"{name} points to {' or '.join(repr(t) for t in targets)}",
                          f"{{ {test or 'false'}; }}", f"it points to $(readlink {p})",
                          ("readlink",))]
        elif kind is FindingKind.WRONG_XATTR and (m := _XATTR.match(detail)):
            return [self._xattr(name, p, path, m["name"], int(m["op"]), m)]
        elif kind is FindingKind.LINK_COUNT and _NLINK.match(detail):
            return [Check(f"{name} has as many links as names", f'[ "$(pc_nlink {p})" = '
                          f'"$(pc_names {p})" ]',
                          f"st_nlink $(pc_nlink {p}), names $(pc_names {p})", ("find",))]
        elif kind is FindingKind.IDENTITY and (m := _ONE_INODE.match(detail) or
                                               _MANY_INODES.match(detail)):
            names = m["names"].split(", ")
            same = m.re is _ONE_INODE
            pairs = [f'[ "$(pc_inode {shell_path(names[0])})" {"=" if same else "!="} '
                     f'"$(pc_inode {shell_path(n)})" ]' for n in names[1:]]
            return [Check(f"{', '.join(names)} are {'one inode' if same else 'different inodes'}",
                          f"{{ {' && '.join(pairs)}; }}",
                          " ".join(f"{n}=$(pc_inode {shell_path(n)})" for n in names))]
        elif kind is FindingKind.IO_ERROR and _IO.match(detail):
            return [Check(f"{name} can be read", f"pc_readable {p}", "reading it failed")]
        raise ExportError(f"state {self.state.key!r}: finding {kind.value} at {name} "
                          f"({detail!r}): no shell check for it")

    def _promised(self, m: re.Match[str]) -> str:
        return f"promised by {self.state.promise_words(m['mark'])}"

    def _block(self, name: str, p: str, path: str, block: int, since: int,
               m: re.Match[str]) -> Check:
        B = self.block_bytes
        hashes = sorted({_sha256(v[block * B:(block + 1) * B].ljust(B, b"\0"))
                         for v in self._versions(path, since)})
        return Check(
            f"{name} block {block} (bytes {block * B}-{(block + 1) * B - 1}) holds one of "
            f"{len(hashes)} allowed versions ({self._promised(m)})",
            f'pc_one_of "$(pc_block {p} {block})" {shlex.quote(" ".join(hashes))}',
            f"it holds $(pc_block_words {p} {block})")

    def _xattr(self, name: str, p: str, path: str, attr: str, since: int,
               m: re.Match[str]) -> Check:
        allowed: set[str] = set()
        for ino in self._inodes(path, (NodeKind.FILE, NodeKind.DIR)):
            events = [e for e in self.oracle.inodes[ino].xattrs if e.name == attr]
            before = [e for e in events if e.op <= since]
            chosen = before[-1:] + [e for e in events if since < e.op <= self.end]
            if not before:
                allowed.add("absent")
            for e in chosen:
                if e.digest is None:
                    allowed.add("absent")
                    continue
                value = self.data(e.op, self.state.workload.ops[e.op])
                if self.verify and value_digest(value) != e.digest:
                    raise ExportError(
                        f"{self.state.run_dir}: the workload re-created from plan.json does not "
                        f"match oracle.json (xattr {attr} of {path} at "
                        f"{self.oracle.describe_op(e.op)})")
                allowed.add(_sha256(value))
        return Check(f"{name} xattr {attr} holds one of {len(allowed)} allowed values "
                     f"({self._promised(m)})",
                     f'pc_one_of "$(pc_xattr {p} {shlex.quote(attr)})" '
                     f'{shlex.quote(" ".join(sorted(allowed)))}',
                     f"it holds $(pc_xattr {p} {shlex.quote(attr)})", ("getfattr",))


#: Shell functions the checks use: (name, the functions it calls, its text). Only those
#: a reproducer's checks call are written into it. ``pc_scratch`` names a file they may
#: overwrite; @BLOCK@ and @ZERO@ are the oracle's block size and the hash of a zero block.
CHECK_FUNCTIONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("pc_ok", (), 'pc_ok() { echo "ok: $1"; }'),
    ("pc_fail", (), 'pc_fail() { echo "FAIL: $1${2:+ -- $2}"; pc_failed=1; }'),
    ("pc_exists", (), 'pc_exists() { [ -e "$1" ] || [ -L "$1" ]; }'),
    ("pc_is", (), """\
pc_is() {
	case $1 in
	file) [ -f "$2" ] && [ ! -L "$2" ] ;;
	dir) [ -d "$2" ] && [ ! -L "$2" ] ;;
	symlink) [ -L "$2" ] ;;
	*) false ;;
	esac
}"""),
    ("pc_type", (), """\
pc_type() {
	if [ -L "$1" ]; then echo symlink; elif [ -d "$1" ]; then echo dir
	elif [ -f "$1" ]; then echo file; elif [ -e "$1" ]; then echo special; else echo missing; fi
}"""),
    ("pc_size", (), 'pc_size() { stat -c %s -- "$1" 2> /dev/null || echo missing; }'),
    ("pc_nlink", (), 'pc_nlink() { stat -c %h -- "$1" 2> /dev/null || echo missing; }'),
    ("pc_inode", (), 'pc_inode() { stat -c %d:%i -- "$1" 2> /dev/null || echo missing; }'),
    ("pc_names", (), 'pc_names() { find "$pc_root" -xdev -samefile "$1" 2> /dev/null | wc -l; }'),
    ("pc_sha256", (), """\
pc_sha256() { if [ -f "$1" ]; then sha256sum < "$1" | cut -d' ' -f1; else echo missing; fi; }"""),
    ("pc_block", (), """\
# sha256 of block $2 of file $1, zero-padded to a whole block past the end of the file.
pc_block() {
	{ dd if="$1" bs=@BLOCK@ skip="$2" count=1 2> /dev/null; head -c @BLOCK@ /dev/zero; } |
		head -c @BLOCK@ | sha256sum | cut -d' ' -f1
}"""),
    ("pc_block_words", ("pc_block",), """\
pc_block_words() {
	pc_h=$(pc_block "$1" "$2")
	if [ "$pc_h" = @ZERO@ ]; then echo zeros; else echo "other data (sha256 $pc_h)"; fi
}"""),
    ("pc_xattr", (), """\
# sha256 of the value of xattr $2 of $1, or "absent".
pc_xattr() {
	if getfattr --absolute-names --only-values -n "$2" -- "$1" > "$pc_scratch" 2> /dev/null; then
		sha256sum < "$pc_scratch" | cut -d' ' -f1
	else
		echo absent
	fi
}"""),
    ("pc_one_of", (), 'pc_one_of() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }'),
    ("pc_readable", (), """\
pc_readable() {
	if [ -L "$1" ]; then readlink -- "$1" > /dev/null
	elif [ -d "$1" ]; then ls -A -- "$1" > /dev/null
	else cat -- "$1" > /dev/null; fi
}"""),
)


def check_functions(checks: Sequence[Check], block_bytes: int) -> str:
    """The shell functions ``checks`` call (and pc_ok, pc_fail), for a script's text."""
    used = " ".join(f"{c.test} {c.shows}" for c in checks)
    wanted = {"pc_ok", "pc_fail"} | {n for n, _, _ in CHECK_FUNCTIONS
                                     if re.search(rf"\b{n}\b", used)}
    for name, deps, _ in CHECK_FUNCTIONS:
        if name in wanted:
            wanted |= set(deps)
    zero = _sha256(bytes(block_bytes))
    text = "\n".join(["pc_failed=0", *(t for n, _, t in CHECK_FUNCTIONS if n in wanted)])
    return text.replace("@BLOCK@", str(block_bytes)).replace("@ZERO@", zero)


def finding_lines(state: ExportState, prefix: str = "#   ") -> list[str]:
    lines = []
    for f in state.findings:
        lines.append(f"{prefix}{f.get('kind')}: {f.get('path') or '.'}: {f.get('detail')}")
    if state.result.get("mount_error"):
        lines.append(f"{prefix}mount failed: {state.result['mount_error']}".splitlines()[0])
    for step in ("fsck_check", "fsck_repair"):
        verdict = state.result.get(step)
        if verdict and verdict != "clean":
            lines.append(f"{prefix}{step.replace('_', ' ')}: {verdict}")
    return lines or [f"{prefix}{state.outcome.value} (no finding recorded)"]


# -- the standalone script ------------------------------------------------------

DEV, MNT = "@DEV@", "@MNT@"


def _shell_argv(argv: Sequence[str]) -> str:
    """An argv with DEV and MNT placeholders as shell words."""
    out = []
    for arg in argv:
        if arg == DEV:
            out.append('"$dev"')
        elif arg == MNT:
            out.append('"$mnt"')
        else:
            out.append(shlex.quote(arg))
    return " ".join(out)


#: Programs every script runs, with the Debian package that ships each.
SCRIPT_TOOLS = {
    "dmsetup": "dmsetup", "losetup": "mount", "mount": "mount", "umount": "mount",
    "blockdev": "util-linux", "gzip": "gzip", "sha256sum": "coreutils", "timeout": "coreutils",
    "stat": "coreutils", "dd": "coreutils", "truncate": "coreutils", "mktemp": "coreutils",
    "head": "coreutils",
}
EXTRA_TOOL_PACKAGES = {"getfattr": "attr", "find": "findutils", "readlink": "coreutils"}


def image_file_for(script: Path) -> Path:
    """Where the state's image goes beside ``script``: repro.sh -> repro.img.gz."""
    stem = script.stem if script.suffix == ".sh" else script.name
    return script.with_name(stem + ".img.gz")


def script_text(state: ExportState, checks: Sequence[Check], *, image: str, image_sha256: str,
                size_bytes: int) -> str:
    """The standalone reproducer for ``state``, reading ``image`` from beside itself."""
    target = state.target
    adapter = adapter_for(target.fstype)
    timeouts = timeouts_for(state.plan.check_timeout_s)
    tools = dict(SCRIPT_TOOLS)
    packages = {t.binary: t.package for t in adapter.tools}
    fsck = adapter.fsck_argv(DEV, repair=False)
    repair = adapter.fsck_argv(DEV, repair=True)
    replay = adapter.journal_replay_argv(DEV)
    for argv in (fsck, repair, replay or []):
        if argv:
            tools.setdefault(argv[0], packages.get(argv[0], "the filesystem's tools"))
    for check in checks:
        for tool in check.tools:
            tools.setdefault(tool, EXTRA_TOOL_PACKAGES.get(tool, tool))
    tool_words = " ".join(f"{t}:{p}" for t, p in tools.items())
    early = fsck_first(target)
    mount = _shell_argv(mount_argv(target, DEV, MNT))
    lines = [
        "#!/bin/sh",
        f"# powercut crash reproducer: state {state.key} of {state.run_dir}",
        f"#   target {target.name}: {target.fstype}, mkfs options "
        f"{shlex.join(target.mkfs_options) or '(none)'}, mount options "
        f"{','.join(adapter.mount_options(target)) or '(none)'}",
        f"#   workload {state.plan.case} (seed {state.plan.seed}), "
        f"{state.outcome.value} after {state.last_mark or 'mkfs'}"
        + (f" ({state.durability_words(state.last_mark)})" if state.last_mark else ""),
        f"#   variant {state.variant.spec} at log entry {state.point}",
        "# What powercut found:",
        *finding_lines(state),
        "#",
        f"# Run as root beside {image} (the state's disk image, gzip'ed):",
        "#   sh THIS_SCRIPT",
        "# The image is never written: it is attached read-only to a loop device",
        "# under a non-persistent dm-snapshot whose COW is a temporary file, so",
        "# journal replay at mount and fsck write only there. Nothing but the loop",
        "# and dm devices it creates is touched; all of it goes away at exit.",
        "# Exit status: 1 the finding reproduces (a FAIL line), 0 it does not,",
        f"# {EXIT_CANNOT_RUN} the script cannot run here.",
        "set -u",
        "export LC_ALL=C",
        'here=$(cd "$(dirname "$0")" && pwd)',
        f'image="$here"/{shlex.quote(image)}',
        f"image_sha256={image_sha256}",
        f"size_bytes={size_bytes}",
        f"cow_bytes={size_bytes + 16 * MiB}",
        f"block_bytes={state.oracle.block_bytes}",
        f"mount_timeout_s={max(1, round(timeouts.mount_s))}",
        f"fsck_timeout_s={max(1, round(timeouts.fsck_s))}",
        f"umount_timeout_s={max(1, round(timeouts.umount_s))}",
        "",
        f"die() {{ echo \"$0: $*\" >&2; exit {EXIT_CANNOT_RUN}; }}",
        '[ "$(id -u)" = 0 ] || die "must run as root: it creates loop and device-mapper devices"',
        "missing=",
        f"for pair in {tool_words}; do",
        '\tcommand -v "${pair%%:*}" > /dev/null 2>&1 || missing="$missing ${pair%%:*} (package ${pair#*:})"',
        "done",
        '[ -z "$missing" ] || die "missing tools:$missing"',
        '[ -f "$image" ] || die "$image: the state image is not beside the script"',
        '[ "$(sha256sum < "$image" | cut -d" " -f1)" = "$image_sha256" ] ||',
        '\tdie "$image: not the image this script was exported with (sha256 differs)"',
        # No udev (a minimal guest or container): libdevmapper makes the nodes itself.
        "[ -S /run/udev/control ] || export DM_DISABLE_UDEV=1",
        "",
        'work=$(mktemp -d "${TMPDIR:-/tmp}/powercut-repro.XXXXXX") || die "mktemp failed"',
        # The shell's pid keeps two runs apart; the rest names the state, so that the
        # same state always exports the same script.
        f"dm_name=powercut-repro-$$-{hashlib.sha256(state.key.encode()).hexdigest()[:6]}",
        "dev=/dev/mapper/$dm_name",
        'mnt="$work/mnt"',
        f"{ROOT_VAR}=$mnt",
        'pc_scratch="$work/scratch"',
        "origin= cow= mounted=",
        "cleanup() {",
        '\t[ -z "$mounted" ] || umount "$mnt" 2> /dev/null || umount -l "$mnt" 2> /dev/null',
        '\t[ ! -b "$dev" ] || dmsetup remove "$dm_name" 2> /dev/null ||',
        '\t\t{ sleep 1; dmsetup remove "$dm_name"; }',
        '\t[ -z "$cow" ] || losetup -d "$cow"',
        '\t[ -z "$origin" ] || losetup -d "$origin"',
        '\trm -rf "$work"',
        "}",
        "trap cleanup EXIT",
        f"trap 'exit {EXIT_CANNOT_RUN}' HUP INT TERM",
        "",
        "# The state, as a sparse file; read-only under the snapshot.",
        'gzip -dc "$image" | dd of="$work/state.img" bs=1M conv=sparse iflag=fullblock '
        'status=none || die "cannot unpack $image"',
        'truncate -s ">$size_bytes" "$work/state.img"',
        'truncate -s "$cow_bytes" "$work/cow.img"',
        'origin=$(losetup --find --show --read-only "$work/state.img") || die "losetup of the image failed"',
        'cow=$(losetup --find --show "$work/cow.img") || die "losetup of the COW file failed"',
        'sectors=$(blockdev --getsz "$origin")',
        # N: not persistent (the COW vanishes with the device); 8-sector chunks.
        'dmsetup create "$dm_name" --table "0 $sectors snapshot $origin $cow N 8" ||',
        '\tdie "dmsetup create of the snapshot failed (is the dm-snapshot module available?)"',
        '[ -b "$dev" ] || die "$dev did not appear"',
        'mkdir "$mnt"',
        "",
        check_functions(checks, state.oracle.block_bytes),
        "",
        "# Run a checker on the snapshot; print its last lines when it is not clean.",
        "pc_fsck() {",
        '\tpc_what=$1; shift',
        '\ttimeout -k 10 "$fsck_timeout_s" "$@" > "$work/checker.out" 2>&1',
        "\tpc_status=$?",
        "\tif [ $pc_status = 124 ]; then",
        '\t\tpc_fail "$pc_what" "did not finish within $fsck_timeout_s s (hang)"',
        "\t\texit 1",
        "\tfi",
        '\t[ $pc_status = 0 ] || tail -n 5 "$work/checker.out" | sed "s/^/    /"',
        "\treturn $pc_status",
        "}",
        "",
    ]
    if early:
        lines += [
            "# Recovery for this target is the checker's, before mount, as at boot",
            "# (no journal, or a kernel that does not replay it).",
        ]
        if replay:
            lines += [
                f"pc_fsck 'journal replay by the checker' {_shell_argv(replay)}",
                'echo "note: journal replay by the checker: exit $pc_status"',
            ]
        lines += [
            f"if pc_fsck 'read-only fsck before mount' {_shell_argv(fsck)}; then",
            "\tpc_ok 'read-only fsck before mount is clean'",
            "else",
            ("\tpc_fail 'read-only fsck before mount is clean' \"exit $pc_status\""
             if target.journalled else
             '\techo "note: read-only fsck before mount found errors (exit $pc_status): '
             'repairing, as boot would"'),
            f"\tpc_fsck 'fsck repair' {_shell_argv(repair)}",
            '\techo "note: fsck repair: exit $pc_status"',
            "fi",
        ]
    lines += [
        f"timeout -k 10 \"$mount_timeout_s\" {mount} > \"$work/mount.out\" 2>&1",
        "pc_status=$?",
        "if [ $pc_status != 0 ]; then",
        "\tif [ $pc_status = 124 ]; then",
        "\t\tpc_fail 'the state mounts' \"mount did not finish within $mount_timeout_s s (hang)\"",
        "\telse",
        "\t\tpc_fail 'the state mounts' \"$(tail -n 2 \"$work/mount.out\" | tr '\\n' ' ')\"",
        "\tfi",
        '\techo "reproduced: $0"',
        "\texit 1",
        "fi",
        "mounted=1",
        "pc_ok 'the state mounts'",
        "",
        "# The promises powercut found broken.",
        *(c.render() for c in checks),
        "",
        'timeout -k 10 "$umount_timeout_s" umount "$mnt" || { pc_fail \'the state unmounts\'; exit 1; }',
        "mounted=",
        f"if pc_fsck 'read-only fsck after mount' {_shell_argv(fsck)}; then",
        "\tpc_ok 'read-only fsck after mount is clean'",
        "else",
        "\tpc_fail 'read-only fsck after mount is clean' \"exit $pc_status\"",
        "fi",
        "",
        "if [ $pc_failed = 1 ]; then",
        '\techo "reproduced: $0"',
        "\texit 1",
        "fi",
        'echo "not reproduced: every check passed"',
        "exit 0",
        "",
    ]
    return "\n".join(lines)


def build_checks(state: ExportState, data: DataSource, *, verify: bool) -> list[Check]:
    return CheckBuilder(state, data, verify=verify).checks()


def _fresh(path: Path, force: bool) -> None:
    if path.exists() and not force:
        raise ExportError(f"{path}: already exists (--force replaces it)")
    if path.exists() and path.is_dir():
        raise ExportError(f"{path}: is a directory")
    if not path.parent.is_dir():
        raise ExportError(f"{path}: directory {path.parent} does not exist")


def _state_image(state: ExportState, out: Path) -> None:
    """Put the state's gzip'ed image at ``out``: the run's copy, or rebuilt from the log."""
    kept = state.run_dir / image_name(state.key)
    if kept.is_file():
        shutil.copyfile(kept, out)
        return
    log_path = state.run_dir / "log.img"
    if not log_path.is_file():
        raise ExportError(f"{state.run_dir}: log.img is gone, and the run kept no image of "
                          f"{state.key}: nothing to rebuild it from")
    plan, crash_state = load_state(state.run_dir, state.key)
    with LogReader(log_path) as reader:
        entries = list(reader)
    size = disk_sizes(state.target, plan.data_mib)["data"]
    write_image(log_path, entries, crash_state, out, size)


def write_script(state: ExportState, out: Path, *, force: bool = False) -> tuple[Path, Path]:
    """Write the standalone reproducer ``out`` and the image beside it; returns both paths."""
    out = out.resolve()
    image = image_file_for(out)
    _fresh(out, force)
    _fresh(image, force)
    kept = state.run_dir / image_name(state.key)
    if not kept.is_file() and not (state.run_dir / "log.img").is_file():
        raise ExportError(f"{state.run_dir}: log.img is gone, and the run kept no image of "
                          f"{state.key}: nothing to rebuild it from")
    checks = build_checks(state, recorded_data(state.workload.seed), verify=True)
    size = disk_sizes(state.target, state.plan.data_mib)["data"]
    tmp_image = image.with_name(f".{image.name}.{uuid.uuid4().hex[:6]}.tmp")
    tmp_script = out.with_name(f".{out.name}.{uuid.uuid4().hex[:6]}.tmp")
    try:
        _state_image(state, tmp_image)
        with gzip.open(tmp_image, "rb") as f:
            f.read(1)  # a truncated or foreign file fails here, not in the script
        digest = hashlib.sha256(tmp_image.read_bytes()).hexdigest()
        tmp_script.write_text(script_text(state, checks, image=image.name, image_sha256=digest,
                                          size_bytes=size))
        tmp_script.chmod(0o755)
        os.replace(tmp_image, image)
        os.replace(tmp_script, out)
    except (OSError, EOFError) as exc:
        raise ExportError(f"{out}: cannot write the reproducer: {exc}") from exc
    finally:
        for tmp in (tmp_image, tmp_script):
            tmp.unlink(missing_ok=True)
    return out, image


# -- the fstests test -----------------------------------------------------------


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


_FALLOC = {
    FallocMode.ALLOCATE: "falloc",
    FallocMode.KEEP_SIZE: "falloc -k",
    FallocMode.PUNCH_HOLE: "fpunch",
    FallocMode.ZERO_RANGE: "fzero",
    FallocMode.COLLAPSE_RANGE: "fcollapse",
    FallocMode.INSERT_RANGE: "finsert",
}


def _fallocate(op: Op, ctx: OpContext) -> Step:
    command = _FALLOC[op.falloc]
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


def _clone(op: Op, ctx: OpContext) -> Step:
    args = "" if op.kind is OpKind.CLONE else f" {op.offset} {op.dst_offset} {op.length}"
    return Step((_io(op, [f"reflink {_io_file(op.path)}{args}"], path=op.dst),),
                (". ./common/reflink", "_require_scratch_reflink"))


_RENAMEAT2 = (". ./common/renameat2",)
_ATTRS = (". ./common/attr", "_require_attrs user")
#: What the test must require for the programs some checks run (the rest are coreutils).
CHECK_TOOL_REQUIRES = {"getfattr": _ATTRS}

#: How each op kind is done in the fstests test. A kind missing here cannot be
#: exported to fstests (a one-line error names it); add new kinds here.
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
    OpKind.CLONE: _clone,
    OpKind.CLONE_RANGE: _clone,
}


def translate_ops(workload: Workload, oracle: OracleLog, last: int,
                  table: dict[OpKind, Callable[[Op, OpContext], Step]] | None = None,
                  ) -> tuple[list[str], list[str]]:
    """The workload's ops 0..last as fstests shell lines, a mark after every durability op,
    and the preamble lines they require. An op kind without a translation: ExportError."""
    table = FSTESTS_OPS if table is None else table
    lines: list[str] = []
    requires: list[str] = []
    model = FsModel()
    marks = 0
    for index, op in enumerate(workload.ops[: last + 1]):
        if skipped(oracle, index):
            why = oracle.ops[index].rpartition("[skipped: ")[2].rstrip("]")
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
            lines.append(f"_log_writes_mark {mark_name(marks)}")
            marks += 1
    return lines, requires


TEST_NAME = re.compile(r"^(?P<dir>[a-z][a-z0-9_-]*)/(?P<num>[0-9]{3,})$")


def parse_test_name(name: str) -> tuple[str, str]:
    m = TEST_NAME.match(name)
    if not m:
        raise ExportError(f"--test-name {name!r}: expected DIR/NUMBER as fstests names tests, "
                          f"e.g. {DEFAULT_TEST_NAME}")
    return m["dir"], m["num"]


def check_fstests_state(state: ExportState) -> None:
    """Refuse what fstests' dm-log-writes tests cannot express, with a one-line error."""
    if state.variant.kind is not VariantKind.PREFIX:
        raise ExportError(
            f"state {state.key!r}: a {state.variant.kind.value} state is not the log replayed in "
            "order to a mark, which is all fstests can replay; export it with --script")
    if state.point_kind != CrashPointKind.MARK.value:
        raise ExportError(
            f"state {state.key!r}: its crash point is a {state.point_kind or 'unknown'} point "
            "(a log entry, not a mark), and fstests replays to marks; export it with --script")
    if state.target.journalled and fsck_first(state.target):
        # A journal only the checker replays (JFS): mounting the replayed log as fstests
        # does would meet a dirty volume. Without a journal the mount works as it is; the
        # read-only fsck powercut runs first changes nothing the promises are about.
        raise ExportError(
            f"state {state.key!r}: recovery of {state.target.name} is its checker's log "
            "replay before the mount, which fstests' dm-log-writes tests do not do; "
            "export it with --script")


def fstests_text(state: ExportState, checks: Sequence[Check], seq: str,
                 ) -> tuple[str, str]:
    """The fstests test and its golden output for ``state``."""
    target = state.target
    adapter = adapter_for(target.fstype)
    end = state.window_end
    ops, requires = translate_ops(state.workload, state.oracle, end)
    replay_to = state.last_mark or "mkfs"
    mount_opts = ",".join(adapter.mount_options(target))
    mount_args = f" -o {shlex.quote(mount_opts)}" if mount_opts else ""
    mkfs_args = "".join(f" {shlex.quote(o)}" for o in target.mkfs_options)
    for tool in sorted({t for c in checks for t in c.tools}):
        requires += [r for r in CHECK_TOOL_REQUIRES.get(tool, ()) if r not in requires]
    sources = [r for r in requires if r.startswith(". ")]
    needs = [r for r in requires if not r.startswith(". ")]
    header = textwrap.fill(
        f"Crash consistency: replay a dm-log-writes recording of a workload to the mark "
        f"{replay_to} and check what was promised durable by then. Exported by powercut from "
        f"crash state {state.key} of {state.run_dir} (target {target.name}: {target.fstype}, "
        f"mkfs options {' '.join(target.mkfs_options) or '(none)'}, mount options "
        f"{mount_opts or '(none)'}; workload {state.plan.case}, seed {state.plan.seed}), "
        f"which was {state.outcome.value}.", width=76)
    promise = (f"# Replay to {replay_to}, the mark placed when "
               f"{state.durability_words(replay_to)} returned; the"
               if state.last_mark else "# Replay to the mark after mkfs; the")
    lines = [
        "#! /bin/bash",
        "# SPDX-License-Identifier: GPL-2.0",
        "#",
        f"# FS QA Test No. {seq}",
        "#",
        *(f"# {ln}" for ln in header.splitlines()),
        "#",
        "# What powercut found there:",
        *finding_lines(state),
        "#",
        "# Data is written as one byte pattern per operation (pwrite -S); the",
        "# checks expect those patterns.",
        "#",
        ". ./common/preamble",
        f"_begin_fstest {' '.join(FSTESTS_GROUPS)}",
        "",
        "_cleanup()",
        "{",
        "\tcd /",
        "\t_log_writes_cleanup &> /dev/null",
        "\t_dmthin_cleanup",
        "\trm -f $tmp.*",
        "}",
        "",
        ". ./common/dmthin",
        ". ./common/dmlogwrites",
        *sources,
        "",
        f"# The promises checked below are those of {target.fstype} as powercut's target",
        f"# {target.name} configures it.",
        f"[ \"$FSTYP\" = {shlex.quote(target.fstype)} ] || "
        f"_notrun \"written for {target.fstype} (powercut target {target.name})\"",
        "_require_scratch_nocheck",
        "_require_no_logdev",
        "_require_log_writes",
        "_require_dm_target thin-pool",
        *needs,
        "",
        "# A thin volume as the replay target: its discards zero for certain, so a",
        "# replay never shows blocks from later in the log.",
        "size=$(_small_fs_size_mb 200)",
        "devsize=$((1024 * 1024 * size / 512))",
        "csize=$((1024 * 64 / 512))",
        "lowspace=$((1024 * 1024 / 512))",
        "_dmthin_init $devsize $devsize $csize $lowspace",
        "_log_writes_init $DMTHIN_VOL_DEV",
        f"_log_writes_mkfs{mkfs_args} >> $seqres.full 2>&1",
        *(["_require_metadata_journaling $LOGWRITES_DMDEV"] if target.journalled else []),
        f"_log_writes_mount{mount_args}",
        "",
        f"# The workload up to op {end}: nothing later can be in the state. The",
        "# marks are powercut's: pc-N follows the N-th durability operation.",
        *ops,
        "",
        "_log_writes_unmount",
        "_log_writes_remove",
        "",
        promise,
        f"# writes of the ops after it, up to op {end}, may be there in any part.",
        f"_log_writes_replay_log {replay_to} $DMTHIN_VOL_DEV",
        f"_dmthin_mount{mount_args} || _fail \"the replayed state does not mount\"",
        "",
        f"{ROOT_VAR}=$SCRATCH_MNT",
        "pc_scratch=$tmp.xattr",
        check_functions(checks, state.oracle.block_bytes),
        "",
        *(c.render() for c in checks),
        "",
        *(["_dmthin_check_fs"] if target.journalled else [
            "# Without a journal a crashed filesystem is left for fsck to repair: its",
            "# consistency is not what this test checks, only the promises above.",
            "_unmount $SCRATCH_MNT > /dev/null 2>&1"]),
        "",
        "# success, all done",
        "status=0",
        "exit",
        "",
    ]
    golden = "\n".join([f"QA output created by {seq}", *(f"ok: {c.what}" for c in checks), ""])
    return "\n".join(lines), golden


def write_fstests(state: ExportState, fstests_dir: Path, test_name: str = DEFAULT_TEST_NAME,
                  *, force: bool = False) -> tuple[Path, Path]:
    """Write the fstests test and its golden output into ``fstests_dir``; returns both paths.

    If the directory's group.list exists (a built checkout), the test's line
    is added to it so that ``./check`` finds the test without a rebuild.
    """
    sub, seq = parse_test_name(test_name)
    fstests_dir = fstests_dir.resolve()
    if not fstests_dir.is_dir():
        raise ExportError(f"{fstests_dir}: no such directory (an fstests checkout)")
    check_fstests_state(state)
    test_dir = fstests_dir / "tests" / sub
    test, out = test_dir / seq, test_dir / f"{seq}.out"
    for path in (test, out):
        if path.exists() and not force:
            raise ExportError(f"{path}: already exists (--force replaces it)")
    checks = build_checks(state, pattern_data, verify=False)
    text, golden = fstests_text(state, checks, seq)
    try:
        test_dir.mkdir(parents=True, exist_ok=True)
        for path, body, mode in ((test, text, 0o755), (out, golden, 0o644)):
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
            tmp.write_text(body)
            tmp.chmod(mode)
            os.replace(tmp, path)
        group_list = test_dir / "group.list"
        if group_list.is_file():
            kept = [ln for ln in group_list.read_text().splitlines()
                    if ln.split()[:1] != [seq]]
            group_list.write_text("\n".join([*kept, f"{seq} {' '.join(FSTESTS_GROUPS)}"]) + "\n")
    except OSError as exc:
        raise ExportError(f"{test}: cannot write the test: {exc}") from exc
    return test, out

