"""A finding: one broken promise or unreadable object, as data; its text is a rendering.

The oracle makes every finding from its fields (``Finding.make``): which
promise (the mark and the op whose state was promised), what exactly is
wrong (``Broken``), the bound that was broken, the block or the names
involved, and what was found instead. ``detail`` is those fields in words,
rendered once, the same way every time. Whatever acts on a finding (the
exported checks, the grouping of findings, reports) reads the fields;
nothing parses the words back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any


class FindingKind(StrEnum):
    DATA_LOSS = "data-loss"  # a promised name, size, block or attribute is gone
    WRONG_CONTENT = "wrong-content"  # data matches no version it may legitimately have
    UNEXPECTED_ENTRY = "unexpected-entry"  # a name promised absent, or never made, is there
    WRONG_TYPE = "wrong-type"  # a name refers to an object of a type it never had
    WRONG_TARGET = "wrong-target"  # a symlink's target is not the one it was made with
    WRONG_XATTR = "wrong-xattr"  # an xattr value matches no version since its promise
    LINK_COUNT = "link-count"  # st_nlink differs from the names found
    IDENTITY = "identity"  # names of one inode are different inodes, or the reverse
    IO_ERROR = "io-error"  # reading, listing or stat failed


class Broken(StrEnum):
    """What exactly a finding says is wrong; each has the fields named beside it."""

    MISSING = "missing"  # a promised name is not there (expected: what it may name)
    SIZE_BELOW = "size-below"  # the file is shorter than promised (size, bound: at least)
    SIZE_ABOVE = "size-above"  # the file is longer than any allowed version (size, bound: at most)
    BLOCK = "block"  # a block holds data no allowed version has (block, size, found)
    #: a block holds another file's data (block, size, found: whose, names: its paths,
    #: bound: how many of the file's blocks do)
    OTHER_FILE = "other-file"
    VERSIONS = "versions"  # whole-file writes: the file is none of the allowed versions (size)
    PRESENT = "present"  # a name promised absent is there (found: its type)
    LATE = "late"  # a name only an op after the window made is there (op: that op)
    NEVER_MADE = "never-made"  # a name the workload never created is there
    TYPE = "type"  # a name is of a type it never had (found, expected: the types)
    TARGET = "target"  # a symlink points elsewhere (found, expected: its target)
    XATTR = "xattr"  # an xattr holds a value it never had since the promise (xattr, found)
    #: an attribute (mode, uid, gid, mtime, flags) holds a value it never had since the
    #: promise (attribute, found, expected: the values it may hold)
    ATTR = "attr"
    NLINK = "nlink"  # st_nlink is not the number of names found (bound: st_nlink, names)
    ONE_INODE = "one-inode"  # names of one inode are different inodes (names)
    MANY_INODES = "many-inodes"  # names of different inodes are one inode (names)
    IO = "io"  # a read, listing, stat, readlink or getxattr failed (found: the error)


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    path: str
    detail: str  # the fields in words (see render)
    mark: str | None = None  # the mark whose promise is broken, if any
    broken: Broken | None = None  # None: recorded before findings had fields
    #: The op whose state was promised (LATE: the op that first made the name).
    op: int | None = None
    #: The words for ``op`` and its mark ("promised at pc-1 as of op 10 (fsync_dir d)").
    promise: str = ""
    bound: int | None = None  # SIZE_*: the size limit in bytes; NLINK: st_nlink
    size: int | None = None  # the size found, in bytes
    block: int | None = None  # BLOCK: the block's index
    block_bytes: int | None = None  # BLOCK: the block size
    #: What is there instead, in words ("zeros", "older data, as of op 5 (pwrite f @0+100)",
    #: "other data", "dir", ...).
    found: str = ""
    expected: tuple[str, ...] = ()  # what may be there (types, inodes, a target)
    names: tuple[str, ...] = ()  # the names involved (identity, link counts)
    xattr: str = ""  # XATTR: the attribute's name
    versions: int | None = None  # VERSIONS: how many versions were allowed
    others: int = 0  # how many other inodes the name had, none of which matches either
    attribute: str = ""  # ATTR: which (crashcases.oracle.log.ATTRIBUTES)

    @classmethod
    def make(cls, kind: FindingKind, path: str, broken: Broken, **fields: Any) -> Finding:
        """A finding with its ``detail`` rendered from its fields."""
        draft = cls(kind, path, "", broken=broken, **fields)
        return replace(draft, detail=render(draft))

    def __str__(self) -> str:
        return f"{self.kind}: {self.path or '.'}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kind"] = self.kind.value
        out["broken"] = self.broken.value if self.broken else None
        out["expected"], out["names"] = list(self.expected), list(self.names)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Finding:
        d = {k: v for k, v in raw.items() if k in FIELDS}
        d["kind"] = FindingKind(d["kind"])
        d["broken"] = Broken(d["broken"]) if d.get("broken") else None
        d["expected"] = tuple(d.get("expected", ()))
        d["names"] = tuple(d.get("names", ()))
        return cls(**d)


FIELDS = frozenset(Finding.__dataclass_fields__)


def render(f: Finding) -> str:
    """``f``'s fields in words: one sentence per kind of broken promise."""
    b = f.broken
    text = {
        Broken.MISSING: lambda: f"missing; {f.promise}: {', '.join(f.expected)}",
        Broken.SIZE_BELOW: lambda: f"size {f.size} B; {f.promise}: at least {f.bound} B",
        Broken.SIZE_ABOVE: lambda: f"size {f.size} B; {f.promise}: at most {f.bound} B",
        Broken.BLOCK: lambda: (
            f"block {f.block} (bytes {_block_span(f)}) holds {f.found}; {f.promise}"),
        Broken.OTHER_FILE: lambda: (
            f"block {f.block} (bytes {_block_span(f)}) holds {f.found}, which this file never "
            f"had" + (f" ({f.bound} such blocks)" if f.bound and f.bound > 1 else "")),
        Broken.VERSIONS: lambda: (
            f"{f.size} B matching none of {f.versions} whole versions; {f.promise}"),
        Broken.PRESENT: lambda: f"present ({f.found}); {f.promise}: absent",
        Broken.LATE: lambda: f"present ({f.found}); first made by {f.promise}, after the window",
        Broken.NEVER_MADE: lambda: "the workload never created this name",
        Broken.TYPE: lambda: f"found {f.found}, expected {'/'.join(f.expected)}",
        Broken.TARGET: lambda: f"target {f.found!r}, made as {f.expected[0]!r}",
        Broken.XATTR: lambda: f"xattr {f.xattr} is {f.found}; {f.promise}",
        Broken.ATTR: lambda: (
            f"{f.attribute} is {f.found}; {f.promise}: {' or '.join(f.expected)}"),
        Broken.NLINK: lambda: f"st_nlink {f.bound} but {len(f.names)} names found: {', '.join(f.names)}",
        Broken.ONE_INODE: lambda: f"names of one inode are different inodes: {', '.join(f.names)}",
        Broken.MANY_INODES: lambda: f"names of different inodes are one inode: {', '.join(f.names)}",
        Broken.IO: lambda: f.found,
    }[b]() if b is not None else f.detail
    if f.others:
        text += f" (nor any of {f.others} other inodes the name had)"
    return text


def _block_span(f: Finding) -> str:
    assert f.block is not None and f.block_bytes is not None and f.size is not None
    start = f.block * f.block_bytes
    return f"{start}-{min(f.size, start + f.block_bytes) - 1}"

