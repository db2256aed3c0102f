"""A mongo-like phase workload, run inside the machine as a module.

``python -m framework.bench.workloads.phases DIR --files N --seed S`` times seven
phases over a tree of small files, as the ReiserFS "mongo" benchmark did:
create, copy, symlink, read, stat, rename, delete. Each phase ends with
sync(), inside its timing, so a phase costs what it takes to make its
changes durable (the journalling cost shows up, not just the page cache).
It prints one JSON line: ``{"workload": "phases", ..., "phases": {name: seconds}}``.

This module imports nothing from powercut beyond the clock, so it starts
fast in a slow guest.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from framework.core import clock
from framework.core.syscalls import drop_caches

PHASES = ("create", "copy", "symlink", "read", "stat", "rename", "delete")

# File contents are slices of one random block: incompressible, yet cheap
# to produce under an emulated CPU.
_BLOCK_BYTES = 1 << 16


class Tree:
    """The file set: ``files`` files of random size spread over directories."""

    def __init__(self, root: Path, *, files: int, size_bytes: int, files_per_dir: int,
                 seed: int) -> None:
        if files < 1 or size_bytes < 1 or files_per_dir < 1:
            raise ValueError("files, size_bytes and files_per_dir must be positive")
        self.root = root
        rng = random.Random(seed)
        self.block = rng.randbytes(_BLOCK_BYTES)
        self.dirs = -(-files // files_per_dir)
        # Sizes uniform around the median, as mongo varied them.
        low, high = max(1, size_bytes // 2), size_bytes + size_bytes // 2
        self.files = [
            (f"d{i // files_per_dir:04d}", f"f{i:07d}", rng.randint(low, high),
             rng.randrange(_BLOCK_BYTES))
            for i in range(files)
        ]

    @property
    def total_bytes(self) -> int:
        return sum(size for _, _, size, _ in self.files)

    def content(self, size: int, offset: int) -> bytes:
        out = bytearray()
        while len(out) < size:
            take = min(size - len(out), _BLOCK_BYTES - offset)
            out += self.block[offset:offset + take]
            offset = 0
        return bytes(out)

    def paths(self, top: str, suffix: str = "") -> Iterator[Path]:
        for d, f, _, _ in self.files:
            yield self.root / top / d / (f + suffix)

    # The phases.

    def create(self) -> None:
        for d in sorted({d for d, _, _, _ in self.files}):
            (self.root / "src" / d).mkdir(parents=True)
        for d, f, size, offset in self.files:
            (self.root / "src" / d / f).write_bytes(self.content(size, offset))

    def copy(self) -> None:
        for d in sorted({d for d, _, _, _ in self.files}):
            (self.root / "copy" / d).mkdir(parents=True)
        for src, dst in zip(self.paths("src"), self.paths("copy")):
            dst.write_bytes(src.read_bytes())

    def symlink(self) -> None:
        for d in sorted({d for d, _, _, _ in self.files}):
            (self.root / "links" / d).mkdir(parents=True)
        for d, f, _, _ in self.files:
            os.symlink(os.path.join("..", "..", "src", d, f), self.root / "links" / d / f)

    def read(self) -> None:
        for top in ("src", "copy"):
            for path in self.paths(top):
                path.read_bytes()

    def stat(self) -> None:
        for top in ("src", "copy", "links"):
            for path in self.paths(top):
                path.lstat()

    def rename(self) -> None:
        for top in ("src", "copy"):
            for path in self.paths(top):
                path.rename(path.with_name(path.name + ".r"))

    def delete(self) -> None:
        for top, suffix in (("links", ""), ("copy", ".r"), ("src", ".r")):
            for path in self.paths(top, suffix):
                path.unlink()
            for d in sorted({d for d, _, _, _ in self.files}):
                (self.root / top / d).rmdir()
            (self.root / top).rmdir()


def run_phases(tree: Tree, *, drop: bool) -> dict[str, float]:
    timings: dict[str, float] = {}
    for name in PHASES:
        phase: Callable[[], None] = getattr(tree, name)
        if drop and name in ("read", "stat"):
            drop_caches()
        start = clock.monotonic()
        phase()
        os.sync()
        timings[name] = clock.monotonic() - start
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework.bench.workloads.phases",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("directory", type=Path, help="an empty or new directory to work in")
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--size-bytes", type=int, default=1000, help="median file size")
    parser.add_argument("--files-per-dir", type=int, default=256)
    parser.add_argument("--drop-caches", action="store_true",
                        help="drop the page cache before the read and stat phases (root)")
    args = parser.parse_args(argv)
    root: Path = args.directory
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        parser.error(f"{root}: not empty")
    tree = Tree(root, files=args.files, size_bytes=args.size_bytes,
                files_per_dir=args.files_per_dir, seed=args.seed)
    timings = run_phases(tree, drop=args.drop_caches)
    report = {
        "workload": "phases", "files": len(tree.files), "dirs": tree.dirs,
        "bytes": tree.total_bytes, "seed": args.seed, "phases": timings,
    }
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
