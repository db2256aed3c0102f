"""Zoo entries: real crash-consistency bugs, fixed upstream, put back into one kernel tree.

An entry set is a directory: ``set.toml`` says which Debian source its reverts apply to
and names the set, and each entry is two files beside it, ``NAME.toml`` (the fix and
where it came from) and ``NAME.patch`` (the fix reverted on that source, applied with
``patch -p1``). The built-in set is ``framework/zoo/entries`` (linux-source-6.12); a set
may live anywhere (``powercut zoo ... --entries DIR``). ``set.toml``:

    [set]
    name = "zoo-7.3"          # names the set's kernels and its results
    base = "7.3"              # Debian's linux-source-SERIES the reverts apply to
    description = "..."       # one line

The keys of an entry's TOML file:

    name           the file's stem
    filesystem     the code that has the bug: a filesystem, or jbd2
    targets        the powercut targets whose configuration the bug needs: a feature's
                   (fast_commit, nojournal, an external log) if it lives there, else
                   the filesystem's default (the kernel's budget is shared among them)
    fix            the upstream (mainline) fix commit, 12 hex digits or more
    subject        the fix's subject line
    fixed_in       the first mainline release with the fix
    stable_in      the stable release of the base series that took it ("" if the base
                   release had it from mainline)
    patch          the revert, relative to this directory
    hand_port      whether the revert is not the fix's diff reversed as it is
    port_notes     what the hand port changed, and why
    fstests        the fstests test that covers it ("" if none)
    thread         the upstream thread of the fix
    symptom        the syscalls that trigger it and what a crash shows

The symptom is for people: nothing in the recall run reads it; the
workloads are chosen per filesystem (crashcases' generators), never per
bug.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from framework.core.errors import ConfigError
from recovery.filesystems import fstypes
from recovery.targets import resolve

#: The code a zoo bug may live in: a filesystem powercut has an adapter for, or the
#: journalling layer ext3 and ext4 share.
FILESYSTEMS = (*fstypes(), "jbd2")
KEYS = ("name", "filesystem", "targets", "fix", "subject", "fixed_in", "stable_in", "patch",
        "hand_port", "port_notes", "fstests", "thread", "symptom")


@dataclass(frozen=True, slots=True)
class ZooEntry:
    name: str
    filesystem: str
    targets: tuple[str, ...]
    fix: str
    subject: str
    fixed_in: str
    stable_in: str
    patch: Path
    hand_port: bool
    port_notes: str
    fstests: str
    thread: str
    symptom: str

    @property
    def patch_sha256(self) -> str:
        return hashlib.sha256(self.patch.read_bytes()).hexdigest()

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "filesystem": self.filesystem, "targets": list(self.targets),
                "fix": self.fix, "subject": self.subject, "fixed_in": self.fixed_in,
                "stable_in": self.stable_in, "patch": self.patch.name,
                "hand_port": self.hand_port, "port_notes": self.port_notes,
                "fstests": self.fstests, "thread": self.thread, "symptom": self.symptom}


def entries_dir() -> Path:
    return Path(str(resources.files("framework.zoo") / "entries"))


def parse_entry(path: Path) -> ZooEntry:
    """One entry file; a one-line ConfigError naming the file and what is wrong."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a zoo entry ({exc})") from None
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (keys: {', '.join(KEYS)})")
    missing = [k for k in KEYS if k not in raw]
    if missing:
        raise ConfigError(f"{path}: missing key {missing[0]!r}")
    strings = [k for k in KEYS if k not in ("targets", "hand_port")]
    for key in strings:
        if not isinstance(raw[key], str):
            raise ConfigError(f"{path}: {key} must be a string")
    if raw["name"] != path.stem:
        raise ConfigError(f"{path}: name {raw['name']!r} is not the file's stem {path.stem!r}")
    if raw["filesystem"] not in FILESYSTEMS:
        raise ConfigError(f"{path}: filesystem {raw['filesystem']!r} is not one of "
                          f"{', '.join(FILESYSTEMS)}")
    fix = raw["fix"]
    if len(fix) < 12 or any(c not in "0123456789abcdef" for c in fix):
        raise ConfigError(f"{path}: fix {fix!r} is not a commit id (12 or more hex digits)")
    if not isinstance(raw["hand_port"], bool):
        raise ConfigError(f"{path}: hand_port must be true or false")
    targets = raw["targets"]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise ConfigError(f"{path}: targets must be a list of target names")
    for t in targets:
        try:
            resolve(t)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    patch = path.parent / raw["patch"]
    if not patch.is_file():
        raise ConfigError(f"{path}: patch {raw['patch']!r} is not beside it")
    if raw["hand_port"] and not raw["port_notes"].strip():
        raise ConfigError(f"{path}: a hand port must say what it changed (port_notes)")
    return ZooEntry(raw["name"], raw["filesystem"], tuple(targets), fix, raw["subject"],
                    raw["fixed_in"], raw["stable_in"], patch, raw["hand_port"],
                    raw["port_notes"], raw["fstests"], raw["thread"], raw["symptom"])


SET_FILE = "set.toml"
SET_KEYS = ("name", "base", "description")


@dataclass(frozen=True, slots=True)
class EntrySet:
    """A directory of entries that revert fixes on one Debian source."""

    name: str
    base: str  # the series of linux-source-SERIES, e.g. "6.12" or "7.3"
    description: str
    directory: Path
    entries: tuple[ZooEntry, ...]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "base": self.base, "description": self.description,
                "directory": str(self.directory), "entries": [e.name for e in self.entries]}


def load_set(directory: Path | None = None, names: tuple[str, ...] = ()) -> EntrySet:
    """The entry set in ``directory`` (default: the built-in one), with every entry or only
    those ``names``; bad input is a one-line ConfigError naming the file."""
    directory = (directory or entries_dir()).resolve()
    if not directory.is_dir():
        raise ConfigError(f"--entries {directory}: no such directory")
    path = directory / SET_FILE
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{directory}: not a zoo entry set (no {SET_FILE} saying its base, "
                          "e.g. [set] name = \"zoo-7.3\", base = \"7.3\")") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a zoo set file ({exc})") from None
    head = raw.get("set")
    if set(raw) != {"set"} or not isinstance(head, dict):
        raise ConfigError(f"{path}: expected one [set] table")
    unknown = sorted(set(head) - set(SET_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} in [set] (keys: "
                          f"{', '.join(SET_KEYS)})")
    for key in ("name", "base"):
        if not isinstance(head.get(key), str) or not head[key]:
            raise ConfigError(f"{path}: [set] {key} must be a non-empty string")
    if not re.fullmatch(r"\d+\.\d+", head["base"]):
        raise ConfigError(f"{path}: [set] base {head['base']!r} is not a Debian kernel series "
                          "(linux-source-SERIES: 6.12, 7.3)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", head["name"]):
        raise ConfigError(f"{path}: [set] name {head['name']!r} must be letters, digits, '.', "
                          "'_' and '-' (it names a directory)")
    entries = [parse_entry(p) for p in sorted(directory.glob("*.toml")) if p.name != SET_FILE]
    if names:
        by_name = {e.name: e for e in entries}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ConfigError(f"no zoo entry {unknown[0]!r} in {directory} (entries: "
                              f"{', '.join(by_name)})")
        entries = [by_name[n] for n in names]
    return EntrySet(head["name"], head["base"], str(head.get("description", "")), directory,
                    tuple(entries))


def load_entries(directory: Path | None = None, names: tuple[str, ...] = ()) -> list[ZooEntry]:
    """Every entry of a set (or those ``names``), sorted by name."""
    return list(load_set(directory, names).entries)
