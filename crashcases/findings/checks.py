"""Shell checks of a crash state's findings, built from the findings' fields and the oracle.

A ``Check`` is one broken promise as a shell condition that is true when the
promise is kept; ``CheckBuilder`` makes them from a state's findings, with the
data a ``DataSource`` gives, so that a check names the versions a block or a
file may hold.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from crashcases.findings.export import (
    Contents,
    DataSource,
    ExportError,
    ExportState,
    _sha256,
    shell_path,
)
from crashcases.oracle.finding import Broken, Finding
from crashcases.oracle.log import NodeKind, value_digest


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

    def of(self, raw: dict[str, Any]) -> list[Check]:
        """The checks of one finding, from its fields; a finding without them (recorded by an
        older powercut) or one no check can express is an ExportError."""
        try:
            finding = Finding.from_dict(raw)
        except (KeyError, ValueError, TypeError):
            raise ExportError(f"state {self.state.key!r}: unreadable finding {raw!r}") from None
        path, broken = finding.path, finding.broken
        p = shell_path(path)
        name = path or "."
        if broken is None:
            raise ExportError(f"state {self.state.key!r}: finding {finding.kind.value} at {name} "
                              "has no fields (recorded before powercut kept them): check the "
                              "state again with 'powercut recheck' and export that run")
        why = f"promised by {self.state.promise_words(finding.mark)}" if finding.mark else ""
        if broken is Broken.MISSING:
            return [Check(f"{name} exists ({why})", f"pc_exists {p}", "it is missing")]
        if broken in (Broken.SIZE_BELOW, Broken.SIZE_ABOVE):
            least = broken is Broken.SIZE_BELOW
            return [Check(f"{name} holds at {'least' if least else 'most'} {finding.bound} bytes "
                          f"({why})",
                          f'[ "$(pc_size {p})" -{"ge" if least else "le"} {finding.bound} ] '
                          "2>/dev/null", f"size $(pc_size {p})")]
        if broken is Broken.BLOCK and finding.block is not None and finding.op is not None:
            return [self._block(name, p, path, finding.block, finding.op, why)]
        if broken is Broken.OTHER_FILE and finding.block is not None:
            return [self._own_block(name, p, path, finding.block, finding.found)]
        if broken is Broken.VERSIONS and finding.op is not None:
            hashes = sorted({_sha256(v) for v in self._versions(path, finding.op)})
            return [Check(f"{name} holds one of {len(hashes)} allowed versions ({why})",
                          f'pc_one_of "$(pc_sha256 {p})" {shlex.quote(" ".join(hashes))}',
                          f"sha256 $(pc_sha256 {p})")]
        if broken is Broken.NEVER_MADE:
            return [Check(f"{name} is absent (the workload never made it)", f"! pc_exists {p}",
                          f"it is there: $(pc_type {p})")]
        if broken in (Broken.PRESENT, Broken.LATE):
            if broken is Broken.LATE:
                why = f"only {finding.promise} made it, after the window"
            return [Check(f"{name} is absent ({why})", f"! pc_exists {p}",
                          f"it is there: $(pc_type {p})")]
        if broken is Broken.TYPE:
            test = " || ".join(f"pc_is {k} {p}" for k in finding.expected)
            return [Check(f"{name} is a {' or '.join(finding.expected)}", f"{{ {test}; }}",
                          f"it is $(pc_type {p})")]
        if broken is Broken.TARGET:
            targets = sorted({self.oracle.inodes[i].target
                              for i in self._inodes(path, (NodeKind.SYMLINK,))})
            test = " || ".join(f'[ "$(readlink {p})" = {shlex.quote(t)} ]' for t in targets)
            return [Check(f"{name} points to {' or '.join(repr(t) for t in targets)}",
                          f"{{ {test or 'false'}; }}", f"it points to $(readlink {p})",
                          ("readlink",))]
        if broken is Broken.XATTR and finding.op is not None:
            return [self._xattr(name, p, path, finding.xattr, finding.op, why)]
        if broken is Broken.NLINK:
            return [Check(f"{name} has as many links as names", f'[ "$(pc_nlink {p})" = '
                          f'"$(pc_names {p})" ]',
                          f"st_nlink $(pc_nlink {p}), names $(pc_names {p})", ("find",))]
        if broken in (Broken.ONE_INODE, Broken.MANY_INODES):
            names = finding.names
            same = broken is Broken.ONE_INODE
            pairs = [f'[ "$(pc_inode {shell_path(names[0])})" {"=" if same else "!="} '
                     f'"$(pc_inode {shell_path(n)})" ]' for n in names[1:]]
            return [Check(f"{', '.join(names)} are {'one inode' if same else 'different inodes'}",
                          f"{{ {' && '.join(pairs)}; }}",
                          " ".join(f"{n}=$(pc_inode {shell_path(n)})" for n in names))]
        if broken is Broken.IO:
            return [Check(f"{name} can be read", f"pc_readable {p}", "reading it failed")]
        raise ExportError(f"state {self.state.key!r}: finding {finding.kind.value} at {name} "
                          f"({finding.detail!r}): no shell check for it")

    def _block(self, name: str, p: str, path: str, block: int, since: int, why: str) -> Check:
        hashes = self._block_hashes(path, block, since)
        return self._block_check(name, p, block, hashes,
                                 f"holds one of {len(hashes)} allowed versions ({why})")

    def _own_block(self, name: str, p: str, path: str, block: int, found: str) -> Check:
        """Block ``block`` holds zeros or data the file at ``path`` was given at that offset."""
        hashes = self._block_hashes(path, block, -1) | {_sha256(bytes(self.block_bytes))}
        return self._block_check(name, p, block, hashes, "holds zeros or data written to this "
                                 f"file, not another file's (it held {found})")

    def _block_hashes(self, path: str, block: int, since: int) -> set[str]:
        """The sha256 of block ``block`` (zero-padded) of each version ``path`` may hold."""
        B = self.block_bytes
        return {_sha256(v[block * B:(block + 1) * B].ljust(B, b"\0"))
                for v in self._versions(path, since)}

    def _block_check(self, name: str, p: str, block: int, hashes: set[str], what: str) -> Check:
        """A check that block ``block`` of ``name`` hashes to one of ``hashes``."""
        B = self.block_bytes
        return Check(
            f"{name} block {block} (bytes {block * B}-{(block + 1) * B - 1}) {what}",
            f'pc_one_of "$(pc_block {p} {block})" {shlex.quote(" ".join(sorted(hashes)))}',
            f"it holds $(pc_block_words {p} {block})")

    def _xattr(self, name: str, p: str, path: str, attr: str, since: int, why: str) -> Check:
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
        return Check(f"{name} xattr {attr} holds one of {len(allowed)} allowed values ({why})",
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


#: Shell punctuation around a function's name in a check ("$(pc_size ...)", "{ pc_is ...; }").
_PUNCTUATION = str.maketrans({c: " " for c in "$(){};|&!\"'"})


def check_functions(checks: Sequence[Check], block_bytes: int) -> str:
    """The shell functions ``checks`` call (and pc_ok, pc_fail), for a script's text."""
    used = " ".join(f"{c.test} {c.shows}" for c in checks)
    words = set(used.translate(_PUNCTUATION).split())
    wanted = {"pc_ok", "pc_fail"} | {n for n, _, _ in CHECK_FUNCTIONS if n in words}
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



