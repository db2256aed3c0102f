"""Generated workloads, byte for byte: a seed gives the workload it always gave.

A recorded run is re-created from its plan (case, seed, target): recheck, export and
the known-behaviour list rebuild its workload, so a generator that drew one op
differently would silently pair an old oracle with a new workload. Each case below is
generated for seeds 0 and 1 under the capabilities of five filesystems and without
any (the classic operation set), and the digest of all those workloads' JSON is
pinned here. A change that is meant to change generation changes a digest on purpose,
and says so in its commit.
"""

from __future__ import annotations

import hashlib

import pytest

from crashcases.workload.cases import list_cases, load_case
from crashcases.workload.ops import Op, OpKind, Workload

#: The adapters' capabilities when the digests were taken, written out so that a change
#: to an adapter does not show up here as a change of generation. The capabilities that
#: came with cover:N (rename-whiteout, setflags, dedupe, unshare-range) were added to them
#: with no digest of an older case changing: those generators do not look at them.
CAPABILITIES: dict[str, frozenset[str] | None] = {
    "ext4": frozenset({"collapse-range", "direct-io", "fallocate", "insert-range",
                       "punch-hole", "rename-exchange", "zero-range", "rename-whiteout",
                       "setflags"}),
    "xfs": frozenset({"collapse-range", "direct-io", "fallocate", "insert-range",
                      "punch-hole", "reflink", "rename-exchange", "zero-range",
                      "rename-whiteout", "setflags", "dedupe", "unshare-range"}),
    "btrfs": frozenset({"direct-io", "fallocate", "punch-hole", "reflink",
                        "rename-exchange", "zero-range", "rename-whiteout", "setflags",
                        "dedupe"}),
    "f2fs": frozenset({"collapse-range", "direct-io", "fallocate", "insert-range",
                       "punch-hole", "rename-exchange", "zero-range", "rename-whiteout",
                       "setflags"}),
    "jfs": frozenset({"direct-io"}),
    "classic": None,
}
SEEDS = (0, 1)
#: gen:seq2 has thousands of pairs: a sample of them is what a run packs.
MAX_SEQUENCES = {"gen:seq2": 40}

#: Per case, for each of CAPABILITIES in order: sha256 (first 16 hex digits) of the
#: case's workloads for SEEDS, one JSON text a line.
DIGESTS: dict[str, tuple[str, ...]] = {
    "gen:seq1": (
        "61cb1eee1c89775c", "cda23af63880a305", "73f48ecc93b0a584", "61cb1eee1c89775c",
        "1349ecd6340c4860", "6e1554876faa77a4"),
    "gen:seq2": (
        "b0c9b918780d7e8c", "dde42c9dd98629c9", "6d72051be5908970", "b0c9b918780d7e8c",
        "10071adf17c70ec1", "e138560a47de4098"),
    "gen:seq3": (
        "8c65b7c64de9d417", "0b013a48e6fdf672", "66d702cb5f64a79f", "8c65b7c64de9d417",
        "53a37718dab40974", "492d2dd1e55e2923"),
    "gen:burst": (
        "77d2438f4726cb9d", "77d2438f4726cb9d", "6ad87e7dc54d6a57", "77d2438f4726cb9d",
        "58de05f094a13d78", "841f7a1a948c5aac"),
    "gen:chain": (
        "43b755acb5157fb3", "43b755acb5157fb3", "43b755acb5157fb3", "43b755acb5157fb3",
        "cdc2a9cb9a49b41b", "43b755acb5157fb3"),
    "random:200": (
        "e07c8607f41dc11e", "e0784dc3d5a8ba07", "01196db176229a9a", "e07c8607f41dc11e",
        "cb9e0d53e414c9e0", "03cb02d9d3c9ce7d"),
    "stress:400": (
        "42951fdcdf23cfc1", "b2b40ec9a083018b", "4877159d477f557c", "42951fdcdf23cfc1",
        "1de7eb4862ccca72", "dda3b754709caedc"),
    "ranges:600": (
        "ebb7935c0545a600", "ebb7935c0545a600", "c3c006cc5f3f1f6c", "ebb7935c0545a600",
        "bb6688f0c5e350c7", "4d7a8be37eaeb731"),
    "hand:write-fsync-rename": (
        "65337f64dfaf44c0", "65337f64dfaf44c0", "65337f64dfaf44c0", "65337f64dfaf44c0",
        "65337f64dfaf44c0", "65337f64dfaf44c0"),
    "hand:replace-rename-nofsync": (
        "e3f798b718477e8f", "e3f798b718477e8f", "e3f798b718477e8f", "e3f798b718477e8f",
        "e3f798b718477e8f", "e3f798b718477e8f"),
    "hand:append-fdatasync": (
        "898b37be0d16d8c0", "898b37be0d16d8c0", "898b37be0d16d8c0", "898b37be0d16d8c0",
        "898b37be0d16d8c0", "898b37be0d16d8c0"),
    "hand:create-dir-fsync": (
        "0221ad2a914743b2", "0221ad2a914743b2", "0221ad2a914743b2", "0221ad2a914743b2",
        "0221ad2a914743b2", "0221ad2a914743b2"),
    "hand:rename-dir": (
        "2d69948d954bfaed", "2d69948d954bfaed", "2d69948d954bfaed", "2d69948d954bfaed",
        "2d69948d954bfaed", "2d69948d954bfaed"),
    "hand:link-unlink": (
        "3508c8d37f22a883", "3508c8d37f22a883", "3508c8d37f22a883", "3508c8d37f22a883",
        "3508c8d37f22a883", "3508c8d37f22a883"),
    "hand:truncate-fallocate": (
        "f68b01591dff1cad", "f68b01591dff1cad", "f68b01591dff1cad", "f68b01591dff1cad",
        "f68b01591dff1cad", "f68b01591dff1cad"),
    "hand:xattr-fsync": (
        "fe537684793d0d32", "fe537684793d0d32", "fe537684793d0d32", "fe537684793d0d32",
        "fe537684793d0d32", "fe537684793d0d32"),
    "hand:symlink-fsync-dir": (
        "e9d85635e2d04682", "e9d85635e2d04682", "e9d85635e2d04682", "e9d85635e2d04682",
        "e9d85635e2d04682", "e9d85635e2d04682"),
    "hand:new-ops": (
        "a984d868e17d0480", "a984d868e17d0480", "a984d868e17d0480", "a984d868e17d0480",
        "a984d868e17d0480", "a984d868e17d0480"),
}


def workloads(case: str, fs: str) -> list[Workload]:
    return [load_case(case, seed=seed, max_sequences=MAX_SEQUENCES.get(case),
                      capabilities=CAPABILITIES[fs]) for seed in SEEDS]


def digest(found: list[Workload]) -> str:
    text = "".join(w.to_json() + "\n" for w in found)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digest_of(case: str, fs: str) -> str:
    return DIGESTS[case][list(CAPABILITIES).index(fs)]


#: Each set of capabilities once (ext4's and f2fs's are the same): the first to have it.
DISTINCT: dict[frozenset[str] | None, str] = {}
for _fs, _caps in CAPABILITIES.items():
    DISTINCT.setdefault(_caps, _fs)


@pytest.mark.parametrize("fs", DISTINCT.values())
@pytest.mark.parametrize("case", DIGESTS)
def test_generated_workloads_are_unchanged(case: str, fs: str) -> None:
    assert digest(workloads(case, fs)) == digest_of(case, fs)


def test_every_named_case_has_a_digest() -> None:
    hand = {c for c in list_cases() if c.startswith("hand:")}
    assert hand <= set(DIGESTS)
    assert all(len(found) == len(CAPABILITIES) for found in DIGESTS.values())
    # A filesystem whose capabilities another has gets that one's workloads.
    for case in DIGESTS:
        assert all(digest_of(case, fs) == digest_of(case, DISTINCT[caps])
                   for fs, caps in CAPABILITIES.items())


def test_one_changed_byte_changes_the_digest() -> None:
    # The positive control: the digest sees one op's length grown by one byte.
    found = workloads("hand:rename-dir", "ext4")
    assert digest(found) == digest_of("hand:rename-dir", "ext4")
    first = found[0]
    ops = list(first.ops)
    index = next(i for i, op in enumerate(ops) if op.kind is OpKind.WRITE)
    op = ops[index]
    ops[index] = Op(op.kind, op.path, length=op.length + 1)
    changed = [Workload(first.name, first.seed, tuple(ops)), *found[1:]]
    assert digest(changed) != digest_of("hand:rename-dir", "ext4")
