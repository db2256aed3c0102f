"""Zoo entries: real crash-consistency bugs, fixed upstream, put back into one kernel tree.

Each entry is two files in ``framework/zoo/entries``: ``NAME.toml`` (the fix
and where it came from) and ``NAME.patch`` (the fix reverted on
linux-source-6.12, applied with ``patch -p1``). The keys of the TOML file:

    name           the file's stem
    filesystem     the code that has the bug: a filesystem, or jbd2
    targets        the powercut targets whose configuration the bug needs: a feature's
                   (fast_commit, nojournal, an external log) if it lives there, else
                   the filesystem's default (the kernel's budget is shared among them)
    fix            the upstream (mainline) fix commit, 12 hex digits or more
    subject        the fix's subject line
    fixed_in       the first mainline release with the fix
    stable_in_612  the 6.12 stable release that took it ("" if older than 6.12)
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
KEYS = ("name", "filesystem", "targets", "fix", "subject", "fixed_in", "stable_in_612", "patch",
        "hand_port", "port_notes", "fstests", "thread", "symptom")


@dataclass(frozen=True, slots=True)
class ZooEntry:
    name: str
    filesystem: str
    targets: tuple[str, ...]
    fix: str
    subject: str
    fixed_in: str
    stable_in_612: str
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
                "stable_in_612": self.stable_in_612, "patch": self.patch.name,
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
                    raw["fixed_in"], raw["stable_in_612"], patch, raw["hand_port"],
                    raw["port_notes"], raw["fstests"], raw["thread"], raw["symptom"])


def load_entries(directory: Path | None = None, names: tuple[str, ...] = ()) -> list[ZooEntry]:
    """Every entry (or those ``names``), sorted by name."""
    directory = directory or entries_dir()
    entries = [parse_entry(p) for p in sorted(directory.glob("*.toml"))]
    if names:
        by_name = {e.name: e for e in entries}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ConfigError(f"no zoo entry {unknown[0]!r} (entries: {', '.join(by_name)})")
        entries = [by_name[n] for n in names]
    return entries
