"""Checking a crash state against the oracle: ``verify`` and ``walk_tree``.

See crashcases.oracle.log for the model: for each promised thing, the
acceptable states are the versions it had from its promise to the end of
the window after the crash's last mark.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import os
import stat
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from crashcases.oracle.finding import Broken, Finding, FindingKind, render
from crashcases.oracle.log import (
    FS_IOC_GETFLAGS,
    MANAGED_FLAGS,
    AttrEvent,
    DataVersion,
    NodeKind,
    OracleLog,
    binding_spans,
    block_digest,
    data_digests,
    flag_words,
    value_digest,
)
from crashcases.oracle.promises import Promises, RangePromise, block_of, durable_at_marks
from recovery.persistence import PersistenceRules


def _attr_words(name: str, value: int) -> str:
    if name == "mode":
        return f"{value:04o}"
    if name == "flags":
        return flag_words(value)
    if name == "mtime":
        return f"{value // 10**9}.{value % 10**9:09d}"
    return str(value)


# ---------------------------------------------------------------------------
# Reading the crash state


@dataclass(frozen=True, slots=True)
class _Seen:
    kind: NodeKind | None  # None: something else (device, fifo)
    st: os.stat_result


def _kind_of(st: os.stat_result) -> NodeKind | None:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return NodeKind.FILE
    if stat.S_ISDIR(mode):
        return NodeKind.DIR
    if stat.S_ISLNK(mode):
        return NodeKind.SYMLINK
    if stat.S_ISFIFO(mode):
        return NodeKind.FIFO
    if stat.S_ISCHR(mode) and st.st_rdev == 0:
        return NodeKind.WHITEOUT  # the 0:0 device renameat2(RENAME_WHITEOUT) makes
    return None


def _read_file(path: str | Path) -> bytes:
    with open(path, "rb", buffering=0) as f:
        chunks = []
        while chunk := f.read(1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)


def io_error(path: str, what: str) -> Finding:
    """A read, listing, stat, readlink or getxattr that failed: ``what`` says which and why."""
    return Finding.make(FindingKind.IO_ERROR, path, Broken.IO, found=what)


def walk_tree(root: Path) -> list[Finding]:
    """Read every file, list every directory and readlink every symlink under ``root``."""
    findings: list[Finding] = []
    base = os.fspath(root)
    stack = [""]
    while stack:
        rel = stack.pop()
        here = f"{base}/{rel}" if rel else base
        try:
            names = sorted(os.listdir(here))
        except OSError as exc:
            findings.append(io_error(rel, f"listing the directory: {exc}"))
            continue
        for name in names:
            child = f"{rel}/{name}" if rel else name
            p = f"{base}/{child}"
            try:
                st = os.lstat(p)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(child)
                elif stat.S_ISLNK(st.st_mode):
                    os.readlink(p)
                elif stat.S_ISREG(st.st_mode):
                    _read_file(p)
            except OSError as exc:
                findings.append(io_error(child, f"reading: {exc}"))
    return sorted(findings, key=lambda f: f.path)


# ---------------------------------------------------------------------------
# Verification


def _path_trees(paths: Iterable[str]) -> list[tuple[str, bool, list[str]]]:
    """Each top-level name, whether it is a path of its own, and the paths below it,
    parents before children."""
    names = set(paths)
    below: dict[str, list[str]] = defaultdict(list)
    for path in sorted(names):
        head, sep, _ = path.partition("/")
        if sep:
            below[head].append(path)
        else:
            below.setdefault(head, [])
    return [(head, head in names, rest) for head, rest in sorted(below.items())]


class _TopNames:
    """Which of ``_path_trees``' top-level names a state's check must visit, found without
    a look at each: a long packed workload made thousands, one or more per sequence, and a
    state's check visits only those its root directory lists, those that name something
    at its window's end, and those that were never a path of their own. Every other one
    is a name the check would find absent and allowed to be (``_Checker.run``): it was
    visited once per name per state, most of the oracle check's time on gen:seq2.

    The bound intervals are kept sorted by start in blocks with their latest end, so a
    query reads the blocks' ends and the intervals of the few blocks that reach it.
    """

    BLOCK = 64

    def __init__(self, oracle: OracleLog, trees: list[tuple[str, bool, list[str]]]) -> None:
        self.index = {name: i for i, (name, _, _) in enumerate(trees)}
        self.not_paths = [i for i, (_, is_path, _) in enumerate(trees) if not is_path]
        spans: list[tuple[int, float, int]] = []
        for i, (name, is_path, _) in enumerate(trees):
            if not is_path:
                continue
            for b, end in binding_spans(oracle.paths.get(name, ())):
                if b.inode is not None:
                    spans.append((b.op, end, i))
        spans.sort()
        self.spans = spans
        self.starts = [start for start, _, _ in spans]
        self.block_end = [max(stop for _, stop, _ in spans[j:j + self.BLOCK])
                          for j in range(0, len(spans), self.BLOCK)]

    def named_at(self, op: int) -> set[int]:
        """The names bound to an inode after op ``op``."""
        out: set[int] = set()
        n = bisect.bisect_right(self.starts, op)  # the spans that start by then
        for b in range((n - 1) // self.BLOCK, -1, -1):
            if self.block_end[b] <= op:
                continue
            for start, stop, i in self.spans[b * self.BLOCK:min(n, (b + 1) * self.BLOCK)]:
                if start <= op < stop:
                    out.add(i)
        return out

    def to_visit(self, top: frozenset[str], op: int) -> list[int]:
        """In order, the names a state whose root lists ``top`` visits at window end ``op``."""
        visit = self.named_at(op)
        visit.update(self.not_paths)
        visit.update(self.index[name] for name in top if name in self.index)
        return sorted(visit)


def _promises(oracle: OracleLog, rules: PersistenceRules) -> Promises:
    return oracle._cached(("promises", rules), lambda: durable_at_marks(oracle, rules))


def _sync_marks(oracle: OracleLog, rules: PersistenceRules) -> list[int]:
    """The marks of the syncs, in order (durable_at_marks appends them in mark order)."""
    return oracle._cached(("sync_marks", rules),
                          lambda: [m for m, _ in _promises(oracle, rules).syncs])


def _trees(oracle: OracleLog) -> list[tuple[str, bool, list[str]]]:
    return oracle._cached("path_trees", lambda: _path_trees(oracle.paths))


def _top_names(oracle: OracleLog) -> _TopNames:
    return oracle._cached("top_names", lambda: _TopNames(oracle, _trees(oracle)))


def prepare(oracle: OracleLog, rules: PersistenceRules) -> None:
    """Build now what every check of a state under ``rules`` reads and the first one would
    build otherwise: the promises, the name indexes and, where the rule that another
    file's data is never exposed holds, the index of every block written. On gen:seq2 that
    is seconds of an emulated guest's time that a checking guest spends beside its log's
    header walk instead of in its first state's check, with the lanes waiting for it."""
    _sync_marks(oracle, rules)
    _top_names(oracle)
    oracle.inode_paths()
    if rules.other_files_data_never_exposed:
        oracle.written_blocks()


def verify(
    oracle: OracleLog, root: Path, *, last_mark: str | None, rules: PersistenceRules
) -> list[Finding]:
    """Check the crash state under ``root`` whose last completed mark is ``last_mark``.

    Sound by construction: a finding is only reported for a state no
    filesystem obeying ``rules`` may produce (see the module docstring).
    """
    k = oracle.mark_index(last_mark)
    return _Checker(oracle, root, k, rules).run()


class _Checker:
    def __init__(self, oracle: OracleLog, root: Path, k: int, rules: PersistenceRules,
                 *, prune: bool = True) -> None:
        self.o = oracle
        self.prune = prune
        self.root = root
        # Plain strings, not Path: the checks join thousands of paths per state.
        self._root_s = os.fspath(root)
        self.k = k
        self.rules = rules
        marks = oracle.mark_records
        # Ops up to the durability op of the next mark may be on disk in any part.
        self.end = marks[k + 1].op if k + 1 < len(marks) else oracle.n_ops - 1
        self.prom: Promises = _promises(oracle, rules)
        # The last sync at or before mark k.
        i = bisect.bisect_right(_sync_marks(oracle, rules), k)
        self.last_sync: tuple[int, int] | None = (
            (self.prom.syncs[i - 1][1], self.prom.syncs[i - 1][0]) if i else None)
        self.findings: list[Finding] = []
        self._seen: dict[str, _Seen | None] = {}
        self._missing: set[str] = set()  # lstat said ENOENT or ENOTDIR
        # Each name mapped to one model inode, and the promise of its entry (check_identity).
        self._name_promise: dict[str, tuple[int, int]] = {}
        self._content: dict[str, bytes | None] = {}
        self._digests: dict[str, tuple[str, ...]] = {}
        self._pinned: dict[tuple[str, int], int | None] = {}
        self._identified: dict[tuple[str, int], int | None] = {}
        self._flags_error = ""

    # -- promises -----------------------------------------------------------

    def _last(self, table: list[tuple[int, int]]) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        for m, v in table:
            if m <= self.k and (best is None or v > best[0]):
                best = (v, m)
        return best

    def entry_promise(self, path: str) -> tuple[int, int] | None:
        """(version op, mark index) of the last promise of ``path``'s entry."""
        best = self._last(self.prom.entry.get(path, []))
        hist = self.o.paths.get(path, ())
        s = self.last_sync
        if s is not None and hist and hist[0].op <= s[0] and (best is None or s[0] > best[0]):
            best = s
        return best

    def inode_promise(
        self, table: dict[int, list[tuple[int, int]]], ino: int
    ) -> tuple[int, int] | None:
        best = self._last(table.get(ino, []))
        s = self.last_sync
        if (
            s is not None
            and self.o.inodes[ino].created_op <= s[0]
            and (best is None or s[0] > best[0])
        ):
            best = s
        return best

    def range_promises(self, ino: int, after: int) -> list[RangePromise]:
        """Promises of byte ranges of ``ino`` at marks up to k, later than op ``after``, in order."""
        out = []
        for m, v, start, end in self.prom.ranges.get(ino, ()):
            if m <= self.k and v > after:
                out.append(RangePromise(v, m, start, end, self.o.versions_between(ino, v, self.end)))
        return sorted(out, key=lambda r: r.op)

    def note(self, promise: tuple[int, int]) -> str:
        v, m = promise
        mk = self.o.mark_records[m]
        return f"promised at {mk.name} as of {self.o.describe_op(v)}"

    def mark_name(self, promise: tuple[int, int]) -> str:
        return self.o.mark_records[promise[1]].name

    def promised(self, promise: tuple[int, int] | None) -> dict[str, Any]:
        """A finding's fields for the promise it breaks (none: no promise)."""
        if promise is None:
            return {}
        return {"mark": self.mark_name(promise), "op": promise[0], "promise": self.note(promise)}

    # -- which directory is which ------------------------------------------

    def pinned(self, path: str, since: int) -> int | None:
        """The dir inode certainly at ``path`` at the crash, there since op ``since``."""
        if path == "":
            return 0
        key = (path, since)
        if key not in self._pinned:
            self._pinned[key] = None
            p = self.entry_promise(path)
            if p is not None:
                lo = min(p[0], since)
                vals = self.o.bindings_between(path, lo, self.end)
                if len(vals) == 1:
                    (ino,) = vals
                    if (
                        ino is not None
                        and self.o.inodes[ino].kind is NodeKind.DIR
                        and self.pinned(path.rpartition("/")[0], lo) is not None
                    ):
                        self._pinned[key] = ino
        return self._pinned[key]

    def identified(self, path: str, since: int) -> int | None:
        """The dir inode a directory found at ``path`` must be (there since ``since``), if known."""
        pinned = self.pinned(path, since)
        if pinned is not None:
            return pinned
        key = (path, since)
        if key not in self._identified:
            self._identified[key] = None
            # Stable: only one inode ever had this name and it never had another,
            # so a directory found here is that one, in any state it ever had.
            inos = self.o.bindings_between(path, -1, self.o.n_ops) - {None}
            if len(inos) == 1:
                (ino,) = inos
                if (
                    ino is not None
                    and self.o.inodes[ino].kind is NodeKind.DIR
                    and self.o.inode_paths().get(ino) == [path]
                    and self.identified(path.rpartition("/")[0], -1) is not None
                ):
                    self._identified[key] = ino
        return self._identified[key]

    # -- observing -----------------------------------------------------------

    def at(self, path: str) -> str:
        return f"{self._root_s}/{path}"

    def seen(self, path: str) -> _Seen | None:
        if path not in self._seen:
            try:
                st = os.lstat(self.at(path))
                self._seen[path] = _Seen(_kind_of(st), st)
            except (FileNotFoundError, NotADirectoryError):
                self._seen[path] = None
                self._missing.add(path)
            except OSError as exc:
                self.findings.append(io_error(path, f"lstat: {exc}"))
                self._seen[path] = None
        return self._seen[path]

    def content(self, path: str) -> bytes | None:
        if path not in self._content:
            try:
                self._content[path] = _read_file(self.at(path))
            except OSError as exc:
                self.findings.append(io_error(path, f"reading: {exc}"))
                self._content[path] = None
        return self._content[path]

    def digests(self, path: str, data: bytes) -> tuple[str, ...]:
        """The block hashes of ``data``, the content read at ``path``."""
        if path not in self._digests:
            self._digests[path] = data_digests(data, self.o.block_bytes)
        return self._digests[path]

    def add(self, kind: FindingKind, path: str, broken: Broken, **fields: Any) -> None:
        self.findings.append(Finding.make(kind, path, broken, **fields))

    # -- the checks ----------------------------------------------------------

    def run(self) -> list[Finding]:
        identity: dict[int, dict[tuple[int, int], str]] = defaultdict(dict)
        # Below a directory that is missing and may be missing (see
        # check_path), nothing can be seen and nothing can be owed: skip it.
        # In a long packed workload most names belong to sequences that
        # have not started or have been removed, so this is most of them.
        gone: set[str] = set()
        # A top-level name that is not in the root directory and that names nothing at the
        # window's end (so "absent" is among the states it may legally be in) is what
        # check_path returns True for, found without an lstat or a promise lookup each:
        # a long workload has thousands of such names, one per finished sequence.
        top = self._root_names()
        trees = _trees(self.o)
        order: Iterable[int] = range(len(trees))
        if top is not None and self.prune:
            order = _top_names(self.o).to_visit(top, self.end)
        for name, is_path, below in (trees[i] for i in order):
            if not is_path:
                pass  # only names below it were ever made: they are checked on their own
            elif top is not None and name not in top:
                bound = self.o.binding_at(name, self.end)
                if bound is None or bound.inode is None:
                    self._seen[name] = None
                    self._missing.add(name)
                    if self.prune:
                        continue  # and nothing below it either
            if is_path and self.check_path(name, identity) and self.prune:
                continue
            for path in below:
                if path.rpartition("/")[0] in gone:
                    gone.add(path)
                    continue
                if self.check_path(path, identity) and self.prune:
                    gone.add(path)
        self.check_identity(identity)
        if self.rules.metadata_atomic:
            self.check_link_counts()
        unique = {(f.kind, f.path, f.detail): f for f in self.findings}
        return sorted(unique.values(), key=lambda f: (f.path, f.kind, f.detail))

    def _root_names(self) -> frozenset[str] | None:
        """The names in the root directory (None if it cannot be listed: lstat decides)."""
        try:
            return frozenset(os.listdir(self._root_s))
        except OSError:
            return None

    def check_path(self, path: str, identity: dict[int, dict[tuple[int, int], str]]) -> bool:
        """Check one name; True if it is absent and nothing below it can matter.

        That holds when the name is not there (ENOENT/ENOTDIR, not an I/O
        error) and it may legally be absent (no promise, or the name was
        absent at some op between its promise and the window's end). Then
        no directory can be *pinned* at it for any promise below it, so no
        name below it can be owed (data-loss needs a pinned parent), and
        none can be seen (the kernel shows nothing under a missing name).
        """
        promise = self.entry_promise(path)
        since = promise[0] if promise is not None else -1
        parent = path.rpartition("/")[0]
        if self.identified(parent, since) is None:
            return False  # the directory found at the parent path may be another one
        cands = self.o.bindings_between(path, since, self.end)
        obs = self.seen(path)
        if obs is None:
            if path in self._missing and (promise is None or None in cands):
                return True
            if (
                promise is not None
                and None not in cands
                and self.pinned(parent, promise[0]) is not None
            ):
                want = tuple(self.o.inodes[c].kind + f" #{c}"
                             for c in sorted(cands, key=str) if c is not None)
                self.add(FindingKind.DATA_LOSS, path, Broken.MISSING, expected=want,
                         **self.promised(promise))
            return False
        live = {c for c in cands if c is not None}
        if not live:
            if promise is not None:
                self.add(FindingKind.UNEXPECTED_ENTRY, path, Broken.PRESENT, found=str(obs.kind),
                         **self.promised(promise))
            else:
                # Only ops after the next mark ever made this name: they cannot be on disk yet.
                first = next(b.op for b in self.o.paths[path] if b.inode is not None)
                self.add(FindingKind.UNEXPECTED_ENTRY, path, Broken.LATE, found=str(obs.kind),
                         op=first, promise=self.o.describe_op(first))
            return False
        typed = sorted(c for c in live if self.o.inodes[c].kind == obs.kind)
        if not typed:
            kinds = tuple(sorted({str(self.o.inodes[c].kind) for c in live}))
            self.add(FindingKind.WRONG_TYPE, path, Broken.TYPE,
                     found=str(obs.kind or "special file"), expected=kinds,
                     **self.promised(promise))
            return False
        if len(typed) == 1:
            identity[typed[0]][(obs.st.st_dev, obs.st.st_ino)] = path
            if promise is not None:
                self._name_promise[path] = promise
        outcomes = [self.check_object(c, path, obs) for c in typed]
        if all(outcomes):
            best = min(outcomes, key=len)
            for f in best:
                if len(typed) > 1:
                    f = replace(f, others=len(typed) - 1)
                    f = replace(f, detail=render(f))
                self.findings.append(f)
        if obs.kind is NodeKind.DIR and self.identified(path, -1) is not None:
            self.check_listing(path)
        return False

    def check_listing(self, path: str) -> None:
        try:
            names = os.listdir(self.at(path))
        except OSError as exc:
            self.findings.append(io_error(path, f"listing the directory: {exc}"))
            return
        for name in sorted(names):
            child = f"{path}/{name}"
            if child not in self.o.paths:
                self.add(FindingKind.UNEXPECTED_ENTRY, child, Broken.NEVER_MADE)

    def check_object(self, ino: int, path: str, obs: _Seen) -> list[Finding]:
        """Findings if the object at ``path`` is inode ``ino`` (empty: it may be)."""
        out: list[Finding] = []
        rec = self.o.inodes[ino]
        if rec.kind is NodeKind.SYMLINK:
            if self.rules.metadata_atomic:
                try:
                    target = os.readlink(self.at(path))
                except OSError as exc:
                    return [io_error(path, f"readlink: {exc}")]
                if target != rec.target:
                    out.append(Finding.make(FindingKind.WRONG_TARGET, path, Broken.TARGET,
                                            found=target, expected=(rec.target,)))
            return out
        if rec.kind is NodeKind.FILE:
            dp = self.inode_promise(self.prom.data, ino)
            ranges = self.range_promises(ino, dp[0] if dp is not None else -1)
            if dp is not None or ranges:
                out += self.check_data(ino, path, dp, ranges)
            if self.rules.other_files_data_never_exposed:
                out += self.check_other_files_data(ino, path)
        xp = self.inode_promise(self.prom.xattr, ino)
        if xp is not None and rec.xattrs:
            out += self.check_xattrs(ino, path, xp)
        if xp is not None and rec.attrs:
            out += self.check_attrs(ino, path, obs, xp)
        return out

    def check_data(
        self,
        ino: int,
        path: str,
        promise: tuple[int, int] | None,
        ranges: list[RangePromise] | None = None,
    ) -> list[Finding]:
        """Findings on the data at ``path`` if it is inode ``ino``.

        ``promise`` covers every block (fsync, fdatasync, sync); each of
        ``ranges``, later than it, the blocks its byte range touches. A
        block answers to the latest promise that covers it; a block no
        promise covers is not compared.
        """
        data = self.content(path)
        if data is None:
            return []  # the read error is its own finding
        B = self.o.block_bytes
        ranges = ranges or []
        whole = (
            RangePromise(promise[0], promise[1], 0, -1,
                          self.o.versions_between(ino, promise[0], self.end))
            if promise is not None
            else None
        )
        size = len(data)
        found = self.digests(path, data)
        zero = block_digest(b"", B)
        if self.rules.data_writes_atomic:
            base = whole.versions if whole is not None else self.o.versions_between(ino, -1, self.end)

            def keeps(v: DataVersion, r: RangePromise) -> bool:
                return v in r.versions or all(
                    block_of(v, b, zero) in {block_of(w, b, zero) for w in r.versions}
                    for b in r.blocks(B)
                )

            if any(
                v.size_bytes == size and v.blocks == found and all(keeps(v, r) for r in ranges)
                for v in base
            ):
                return []
            last = ranges[-1] if ranges else whole
            assert last is not None
            return [Finding.make(FindingKind.WRONG_CONTENT, path, Broken.VERSIONS, size=size,
                                 versions=len(base), **self.promised(last.key))]
        for p in ([whole] if whole is not None else []) + ranges:
            need = p.min_size()
            if size < need:
                return [Finding.make(FindingKind.DATA_LOSS, path, Broken.SIZE_BELOW, size=size,
                                     bound=need, **self.promised(p.key))]
        if whole is not None and size > max(v.size_bytes for v in whole.versions):
            return [Finding.make(FindingKind.WRONG_CONTENT, path, Broken.SIZE_ABOVE, size=size,
                                 bound=max(v.size_bytes for v in whole.versions),
                                 **self.promised(whole.key))]
        out = []
        for b, digest in enumerate(found):
            gov = whole
            for r in ranges:
                if r.covers(b, B) and (gov is None or r.op >= gov.op):
                    gov = r
            if gov is None:
                continue  # no promise reaches this block
            versions = gov.versions
            if (
                gov is not whole
                and size < (b + 1) * B
                and size not in {v.size_bytes for v in versions}
            ):
                # The file ends inside this block at a size from before the range
                # was synced (the size need not be durable beyond the range): the
                # block's bytes up to there cannot be told apart by a block hash.
                continue
            allowed = {block_of(v, b, zero) for v in versions}
            if digest in allowed:
                continue
            if self.rules.stale_data_after_extension and any(
                v.size_bytes < (b + 1) * B for v in versions
            ):
                continue  # allocated by an in-flight extension: old disk contents are legitimate
            if not self.rules.data_block_atomic and len(allowed) > 1:
                continue  # overwritten in flight: a torn block cannot be told from a mix of versions
            what = "zeros" if digest == zero else self.what_block_holds(ino, b, digest, gov.op)
            kind = FindingKind.DATA_LOSS if digest == zero else FindingKind.WRONG_CONTENT
            out.append(Finding.make(kind, path, Broken.BLOCK, block=b, block_bytes=B, size=size,
                                    found=what, **self.promised(gov.key)))
        return out

    def what_block_holds(self, ino: int, b: int, digest: str, promise_op: int) -> str:
        """In words, what block ``b`` of inode ``ino`` holds when it is not one of the versions
        the promise of op ``promise_op`` allows and not zeros: the file's own data from before
        that promise, with the op that gave the block that content, or other data.

        A lost write (an overwrite still in the disk's cache) leaves the block as it was; saying
        so, and since which op, tells it apart from bytes the file never had there.
        """
        zero = block_digest(b"", self.o.block_bytes)
        held, since, hit = zero, -1, None
        for v in self.o.inodes[ino].data:
            if v.op > promise_op:
                break
            now = block_of(v, b, zero)
            if now != held:
                held, since = now, v.op
            if now == digest:
                hit = since
        return "other data" if hit is None else f"older data, as of {self.o.describe_op(hit)}"

    def check_other_files_data(self, ino: int, path: str) -> list[Finding]:
        """A finding if a block at ``path``, promised or not, equals a block of another file's
        data and of none of inode ``ino``'s versions (PersistenceRules.other_files_data_never_exposed).

        Only a block that is exactly another file's data is reported: a mix, a torn block or
        bytes the workload never wrote cannot be told from what a crash may legitimately leave.
        """
        written = self.o.written_blocks()
        if not written:
            return []
        data = self.content(path)
        if data is None:
            return []
        own = self.o.blocks_of(ino)
        hits = [(b, written[d]) for b, d in enumerate(self.digests(path, data))
                if d in written and d not in own]
        if not hits:
            return []
        b, (other, op) = hits[0]
        names = tuple(self.o.inode_paths().get(other, ()))
        return [Finding.make(FindingKind.WRONG_CONTENT, path, Broken.OTHER_FILE, block=b,
                             block_bytes=self.o.block_bytes, size=len(data), bound=len(hits),
                             found=f"another file's data, from {self.o.describe_op(op)}",
                             names=names)]

    def check_xattrs(self, ino: int, path: str, promise: tuple[int, int]) -> list[Finding]:
        events = self.o.inodes[ino].xattrs
        out = []
        for name in sorted({e.name for e in events}):
            mine = [e for e in events if e.name == name]
            before = [e.digest for e in mine if e.op <= promise[0]]
            allowed = {before[-1] if before else None}
            allowed.update(e.digest for e in mine if promise[0] < e.op <= self.end)
            try:
                got: str | None = value_digest(
                    os.getxattr(self.at(path), name, follow_symlinks=False)
                )
            except OSError as exc:
                if exc.errno == errno.ENODATA:
                    got = None
                else:
                    out.append(io_error(path, f"getxattr {name}: {exc}"))
                    continue
            if got not in allowed:
                have = "absent" if got is None else "a value it never had since"
                out.append(Finding.make(FindingKind.WRONG_XATTR, path, Broken.XATTR, xattr=name,
                                        found=have, **self.promised(promise)))
        return out

    def check_attrs(self, ino: int, path: str, obs: _Seen,
                    promise: tuple[int, int]) -> list[Finding]:
        """Each attribute an op set (crashcases.oracle.log.ATTRIBUTES) holds its value at the
        promise or one it had since, up to the window's end. The metadata promise is the
        xattrs' (fsync, O_SYNC writes, directory fsync of the directory itself, sync): the
        inode's metadata, which fsync(2) says it flushes (inode(7) lists mode, owner and
        times); fdatasync(2) and msync do not. An attribute whose value at the promise or
        since is not known (the time of day) is not compared, nor the inode flags where the
        rules do not hold them (PersistenceRules.inode_flags_durable)."""
        events: dict[str, list[AttrEvent]] = defaultdict(list)
        for e in self.o.inodes[ino].attrs:
            events[e.name].append(e)
        out = []
        for name, mine in sorted(events.items()):
            if name == "flags" and not self.rules.inode_flags_durable:
                continue
            before = [e.value for e in mine if e.op <= promise[0]]
            if not before:
                continue  # no op set it before the promise: its value is the kernel's
            allowed = {before[-1], *(e.value for e in mine if promise[0] < e.op <= self.end)}
            if None in allowed:
                continue
            got = self._attribute(path, name, obs)
            if got is None:
                out.append(io_error(path, f"reading the inode flags: {self._flags_error}"))
                continue
            if got not in allowed:
                out.append(Finding.make(
                    FindingKind.DATA_LOSS, path, Broken.ATTR, attribute=name,
                    found=_attr_words(name, got),
                    expected=tuple(sorted(_attr_words(name, v) for v in allowed if v is not None)),
                    **self.promised(promise)))
        return out

    def _attribute(self, path: str, name: str, obs: _Seen) -> int | None:
        """Attribute ``name`` of what ``obs`` found at ``path`` (None: unreadable)."""
        st = obs.st
        if name == "mode":
            return stat.S_IMODE(st.st_mode)
        if name == "uid":
            return st.st_uid
        if name == "gid":
            return st.st_gid
        if name == "mtime":
            return st.st_mtime_ns
        try:
            fd = os.open(self.at(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:
            self._flags_error = str(exc)
            return None
        try:
            buf = bytearray(8)
            fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf)
            return int.from_bytes(buf[:4], "little", signed=True) & MANAGED_FLAGS
        except OSError as exc:
            self._flags_error = str(exc)
            return None
        finally:
            os.close(fd)

    def check_identity(self, identity: dict[int, dict[tuple[int, int], str]]) -> None:
        owners: dict[tuple[int, int], dict[int, str]] = defaultdict(dict)
        for ino, seen in identity.items():
            if len(seen) > 1:
                paths = sorted(seen.values())
                # A name that named another inode (or nothing) at its promise and this one
                # only after it (rmdir d, sync, then rename x -> d) is the one that broke a
                # promise: what is there is not this inode, so it is what the promise removed
                # or replaced. The finding is that promise's; without one it is no promise's.
                late = [p for p in paths if self._named_later(p, ino)]
                self.add(FindingKind.IDENTITY, late[0] if late else paths[0], Broken.ONE_INODE,
                         names=tuple(paths),
                         **self.promised(self._name_promise[late[0]] if late else None))
            for key, path in seen.items():
                owners[key][ino] = path
        for inos in owners.values():
            # Two model inodes on one on-disk inode: only impossible if metadata is atomic
            # (else a freed inode number may be reused while the old name survives).
            if len(inos) > 1 and self.rules.metadata_atomic:
                paths = sorted(inos.values())
                self.add(FindingKind.IDENTITY, paths[0], Broken.MANY_INODES, names=tuple(paths))

    def _named_later(self, path: str, ino: int) -> bool:
        """``path`` had a promise, and named another inode or nothing at it: ``ino`` came
        there only by an op after it."""
        promise = self._name_promise.get(path)
        if promise is None:
            return False
        at = self.o.binding_at(path, promise[0])
        return at is None or at.inode != ino

    def check_link_counts(self) -> None:
        names: dict[tuple[int, int], list[str]] = defaultdict(list)
        nlink: dict[tuple[int, int], int] = {}
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                entries = list(os.scandir(self.at(rel) if rel else self._root_s))
            except OSError:
                continue  # walk_tree reports unreadable directories
            for e in entries:
                child = f"{rel}/{e.name}" if rel else e.name
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(child)
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    names[key].append(child)
                    nlink[key] = st.st_nlink
        for key, found in names.items():
            if nlink[key] != len(found):
                found.sort()
                self.add(FindingKind.LINK_COUNT, found[0], Broken.NLINK, bound=nlink[key],
                         names=tuple(found))
