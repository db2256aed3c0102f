"""Crash workloads by name: the hand-written cases and every spec ``--case`` takes.

``hand:<name>`` is a known idiom (atomic replace, log append, ...);
``gen:seq1``, ``gen:seq2`` and ``gen:seq3`` (crashcases.workload.sequences),
``gen:burst`` (crashcases.workload.bursts), ``gen:chain`` (crashcases.workload.chains),
``random:N``, ``stress:N`` and ``ranges:N`` (crashcases.workload.streams) and ``cover:N``
(crashcases.workload.cover) come from the generators, which draw from the operations an ``OpSelection`` allows
(crashcases.workload.selection) and are packed into one workload
(crashcases.workload.packing); ``file:PATH`` is a workload in JSON.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from crashcases.vocabulary import OpKind
from crashcases.workload.bursts import BURST_DEFAULT, burst
from crashcases.workload.chains import CHAIN_DEFAULT, chain
from crashcases.workload.cover import cover_ops
from crashcases.workload.kinds import FallocMode
from crashcases.workload.model import FsModel
from crashcases.workload.ops import Op, Workload, WorkloadError
from crashcases.workload.packing import pack, pack_numbered, sample
from crashcases.workload.selection import OpSelection, parse_ops
from crashcases.workload.sequences import SEQ3_DEFAULT, B, seq1, seq2, seq3, variants
from crashcases.workload.streams import RANGES_KINDS, random_ops, ranges_ops
from framework.core.errors import ConfigError


def _hand_cases() -> dict[str, list[Op]]:
    K = OpKind
    return {
        # The atomic-replace idiom done right: write, fsync, rename, fsync the directory.
        "write-fsync-rename": [
            Op(K.CREAT, "data"),
            Op(K.WRITE, "data", length=2 * B),
            Op(K.FSYNC, "data"),
            Op(K.FSYNC_DIR, ""),
            Op(K.CREAT, "data.tmp"),
            Op(K.WRITE, "data.tmp", length=2 * B + 1808),
            Op(K.FSYNC, "data.tmp"),
            Op(K.RENAME, "data.tmp", dst="data"),
            Op(K.FSYNC_DIR, ""),
        ],
        # Replace via rename without fsync of the new file: only ext4 auto_da_alloc helps.
        "replace-rename-nofsync": [
            Op(K.CREAT, "conf"),
            Op(K.WRITE, "conf", length=B + 10),
            Op(K.SYNC),
            Op(K.CREAT, "conf.new"),
            Op(K.WRITE, "conf.new", length=B + 300),
            Op(K.RENAME, "conf.new", dst="conf"),
            Op(K.FSYNC_DIR, ""),
        ],
        # A log: appends each made durable by fdatasync.
        "append-fdatasync": [
            Op(K.CREAT, "log"),
            Op(K.FSYNC_DIR, ""),
            *itertools.chain.from_iterable(
                (Op(K.APPEND, "log", length=700 + 300 * i), Op(K.FDATASYNC, "log"))
                for i in range(8)
            ),
        ],
        # A new file in a new directory: file fsync, then each directory.
        "create-dir-fsync": [
            Op(K.MKDIR, "dir"),
            Op(K.CREAT, "dir/file"),
            Op(K.WRITE, "dir/file", length=B + 1000),
            Op(K.FSYNC, "dir/file"),
            Op(K.FSYNC_DIR, "dir"),
            Op(K.FSYNC_DIR, ""),
        ],
        "rename-dir": [
            Op(K.MKDIR, "a"),
            Op(K.CREAT, "a/f"),
            Op(K.WRITE, "a/f", length=3000),
            Op(K.SYNC),
            Op(K.RENAME, "a", dst="b"),
            Op(K.FSYNC_DIR, ""),
            Op(K.CREAT, "b/g"),
            Op(K.WRITE, "b/g", length=B),
            Op(K.FSYNC, "b/g"),
            Op(K.FSYNC_DIR, "b"),
        ],
        "link-unlink": [
            Op(K.CREAT, "f"),
            Op(K.WRITE, "f", length=5000),
            Op(K.FSYNC, "f"),
            Op(K.LINK, "f", dst="g"),
            Op(K.FSYNC_DIR, ""),
            Op(K.UNLINK, "f"),
            Op(K.FSYNC_DIR, ""),
            Op(K.APPEND, "g", length=100),
            Op(K.FSYNC, "g"),
        ],
        "truncate-fallocate": [
            Op(K.CREAT, "f"),
            Op(K.WRITE, "f", length=5 * B),
            Op(K.FSYNC, "f"),
            Op(K.FSYNC_DIR, ""),
            Op(K.TRUNCATE, "f", size=B + 100),
            Op(K.FSYNC, "f"),
            Op(K.TRUNCATE, "f", size=6 * B),
            Op(K.FDATASYNC, "f"),
            Op(K.FALLOCATE, "f", offset=B, length=2 * B, falloc=FallocMode.PUNCH_HOLE),
            Op(K.FSYNC, "f"),
            Op(K.FALLOCATE, "f", offset=6 * B, length=2 * B, falloc=FallocMode.ALLOCATE),
            Op(K.FSYNC, "f"),
        ],
        "xattr-fsync": [
            Op(K.CREAT, "f"),
            Op(K.FSYNC_DIR, ""),
            Op(K.SETXATTR, "f", xattr="user.one", length=10),
            Op(K.SETXATTR, "f", xattr="user.two", length=200),
            Op(K.FSYNC, "f"),
            Op(K.SETXATTR, "f", xattr="user.one", length=33),
            Op(K.REMOVEXATTR, "f", xattr="user.two"),
            Op(K.FSYNC, "f"),
        ],
        "symlink-fsync-dir": [
            Op(K.CREAT, "target"),
            Op(K.SYMLINK, "link", target="target"),
            Op(K.FSYNC_DIR, ""),
            Op(K.UNLINK, "link"),
            Op(K.SYMLINK, "link", target="elsewhere/" + "x" * 100),
            Op(K.SYNC),
        ],
        # Every newer op once; the only promises are made by the newer durability
        # ops (O_SYNC and O_DSYNC writes, msync, syncfs), so on a disk that
        # loses unflushed writes each of their marks must show a loss.
        # Reflinks and collapse/insert are skipped where unsupported.
        "new-ops": [
            Op(K.MKDIR, "a"),
            Op(K.CREAT, "a/f"),
            Op(K.WRITE, "a/f", length=2 * B + 100),
            Op(K.WRITE_OSYNC, "a/f", offset=B + 7, length=300),
            Op(K.MKDIR, "b"),
            Op(K.CREAT, "b/f"),
            Op(K.DIRECT_WRITE, "b/f", offset=0, length=2 * B),
            Op(K.WRITE_ODSYNC, "b/f", offset=2 * B, length=B + 50),
            Op(K.CREAT, "a/m"),
            Op(K.TRUNCATE, "a/m", size=3 * B),
            Op(K.MMAP_WRITE, "a/m", offset=100, length=B),
            Op(K.MSYNC, "a/m", offset=0, length=2 * B),
            Op(K.CREAT, "b/c"),
            Op(K.COPY_FILE_RANGE, "a/f", dst="b/c", offset=0, length=B + 500),
            Op(K.CREAT, "b/k"),
            Op(K.CLONE, "a/f", dst="b/k"),
            Op(K.CLONE_RANGE, "a/m", dst="b/k", offset=0, length=2 * B, dst_offset=2 * B),
            Op(K.FALLOCATE, "a/m", offset=0, length=B, falloc=FallocMode.COLLAPSE_RANGE),
            Op(K.FALLOCATE, "a/m", offset=B, length=B, falloc=FallocMode.INSERT_RANGE),
            Op(K.RENAME_NOREPLACE, "a/f", dst="a/g"),
            Op(K.RENAME_EXCHANGE, "a", dst="b"),
            Op(K.SYNC_FILE_RANGE, "b/g"),
            Op(K.SYNCFS, ""),
            Op(K.DIRECT_WRITE, "b/g", offset=B, length=B),
            Op(K.WRITE_OSYNC, "b/g", offset=0, length=10),
        ],
    }


def _names(items: Iterable[str] | None) -> str:
    return ",".join(sorted(items)) if items else "none"


def list_cases() -> list[str]:
    return [*(f"hand:{n}" for n in _hand_cases()), "gen:seq1", "gen:seq2", "gen:seq3", "gen:burst",
            "gen:chain", "random:200", "stress:200", "ranges:200", "cover:600", "file:PATH"]


def load_case(
    spec: str,
    *,
    seed: int,
    max_sequences: int | None = None,
    capabilities: Iterable[str] | None = None,
    ops: Sequence[str] | None = None,
) -> Workload:
    """The workload ``spec`` names (see the module docstring); deterministic for ``seed``.

    ``max_sequences`` caps the sequences packed by ``gen:*`` (a seeded
    sample, namespaces keep their enumeration numbers). ``file:PATH`` is a
    workload saved by ``Workload.to_json`` (``powercut shrink`` writes one);
    it keeps its own seed, so its bytes do not depend on ``seed``.
    ``capabilities`` (the target filesystem's) make ``gen:*``, ``random:N``
    and ``stress:N`` use the newer operations it has; ``ops`` (op kind
    names) restricts those generated cases to these kinds.
    """
    family, _, arg = spec.partition(":")
    if max_sequences is not None and max_sequences < 1:
        raise ConfigError(f"case {spec!r}: max_sequences must be at least 1, got {max_sequences}")
    kinds = parse_ops(ops) if ops else None
    if kinds is not None and family not in ("gen", "random", "stress", "ranges", "cover"):
        raise ConfigError(
            f"case {spec!r}: ops choose what generated cases use (gen:*, random:N, stress:N, "
            f"ranges:N, cover:N); {family}: cases have their own")
    selection = OpSelection(
        None if capabilities is None else frozenset(capabilities), kinds)
    if family == "hand":
        cases = _hand_cases()
        if arg not in cases:
            raise ConfigError(f"case {spec!r}: no hand case {arg!r} (known: {', '.join(cases)})")
        return pack(
            [Workload(name=arg, seed=seed, ops=tuple(cases[arg]))],
            name=spec,
            seed=seed,
            namespaces=["h"],
        )
    if family == "gen":
        if arg in ("seq1", "seq2", "seq3", "burst", "chain") and not variants(selection):
            raise ConfigError(
                f"case {spec!r}: no generated operation is of kinds {_names(kinds)} "
                f"on this target (capabilities: {_names(selection.capabilities)})")
        if arg in ("seq1", "seq2"):
            found = seq1(selection) if arg == "seq1" else seq2(selection)
            items = [(i, label, ops) for i, (label, ops) in enumerate(found)]
            return pack_numbered(spec, sample(items, max_sequences, seed), seed)
        if arg == "seq3":
            return pack_numbered(spec, seq3(seed, max_sequences or SEQ3_DEFAULT, selection), seed)
        if arg == "burst":
            return pack_numbered(spec, burst(seed, max_sequences or BURST_DEFAULT, selection), seed)
        if arg == "chain":
            chained = chain(seed, max_sequences or CHAIN_DEFAULT, selection)
            if not chained:
                raise ConfigError(f"case {spec!r}: no chain is made of operations of kinds "
                                  f"{_names(kinds)}")
            return pack_numbered(spec, chained, seed)
        raise ConfigError(
            f"case {spec!r}: unknown generator {arg!r} (known: seq1, seq2, seq3, burst, chain)")
    if family == "stress":
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"case {spec!r}: expected stress:N with N >= 1 ops")
        return Workload(name=spec, seed=seed, ops=tuple(
            random_ops(int(arg), seed, block=64 * 1024, selection=selection)))
    if family == "ranges":
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"case {spec!r}: expected ranges:N with N >= 1 ops")
        if kinds is not None and not kinds & RANGES_KINDS:
            raise ConfigError(
                f"case {spec!r}: ranges:N uses data and durability operations; "
                f"{_names(kinds)} are none of them ({_names(RANGES_KINDS)})")
        return Workload(name=spec, seed=seed, ops=tuple(
            ranges_ops(int(arg), seed, selection=selection)))
    if family == "cover":
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"case {spec!r}: expected cover:N with N >= 1 ops")
        return Workload(name=spec, seed=seed, ops=tuple(
            cover_ops(int(arg), seed, selection)))
    if family == "random":
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"case {spec!r}: expected random:N with N >= 1 ops")
        return Workload(name=spec, seed=seed, ops=tuple(
            random_ops(int(arg), seed, selection=selection)))
    if family == "file":
        if not arg:
            raise ConfigError(f"case {spec!r}: expected file:PATH, a workload JSON file")
        try:
            with open(arg, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"case {spec!r}: cannot read {arg}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            workload = Workload.from_json(text)
        except (WorkloadError, ValueError, TypeError, AttributeError) as exc:
            raise ConfigError(f"case {spec!r}: {arg} is not a workload: {exc}") from None
        model = FsModel()  # a bad op is caught here, not in the guest after mkfs
        for index, op in enumerate(workload.ops):
            problem = model.check(op)
            if problem is not None:
                raise ConfigError(f"case {spec!r}: op {index} ({op.describe()}): {problem}")
            model.apply(op, bytes(op.length))
        return workload
    raise ConfigError(
        f"case {spec!r}: expected hand:NAME, gen:seq1|seq2|seq3|burst|chain, random:N, stress:N, "
        "ranges:N, cover:N or file:PATH"
    )
