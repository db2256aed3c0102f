"""The targets a run can name: the built-in ones, a user's, and a target sent as data.

A target (``recovery.target.Target``, which this module hands on) names the
mkfs options, the mount options, where the journal lives and, optionally,
the device profile of each disk (``disk_profiles``, see
``recovery.profiles``). The built-in targets are in ``builtin_targets.toml``
(same format as user files); users add their own with ``load_targets()``,
and their own device profiles in the same file::

    [targets."ext4/data-journal-big"]
    fstype = "ext4"
    mkfs_options = ["-J", "size=128"]
    mount_options = ["data=journal"]
    journal = "internal"            # internal | external | none
    journal_size_mib = 128          # optional
    description = "ext4 data=journal with a 128 MiB journal"
    disk_profiles = { data = "hdd", journal = "my-ssd" }   # optional

    [profiles.my-ssd]                # optional: see recovery/profiles.py
    flush_ms = 3
    bandwidth_mb_s = 400

Every target is validated where it enters, by its filesystem's adapter as
well: this module sits above the adapters, which know only
``recovery.target``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from framework.core.errors import ConfigError
from recovery.filesystems import adapter_for
from recovery.profiles import (
    DeviceProfile,
    builtin_profiles,
    get_profile,
    parse_profiles,
    profile_from_mapping,
)
from recovery.target import DISK_ROLES, JournalPlacement, Target

__all__ = [
    "DISK_ROLES",
    "JournalPlacement",
    "Target",
    "get_target",
    "list_targets",
    "load_target_file",
    "load_targets",
    "parse_target_file",
    "parse_targets",
    "resolve",
    "target_from_dict",
    "target_from_mapping",
    "with_profiles",
]


def target_from_dict(data: Mapping[str, Any]) -> Target:
    """The inverse of Target.to_dict, validated like a TOML table."""
    table = {k: v for k, v in data.items() if k != "name" and v is not None}
    if isinstance(table.get("disk_profiles"), list | tuple):
        # dataclasses.asdict() keeps the (role, profile) pairs as a sequence
        table["disk_profiles"] = dict(table["disk_profiles"])
    if isinstance(table.get("profile_defs"), list | tuple):
        # ... and the profile definitions as a sequence of tables, each with its name
        table["profile_defs"] = {p["name"]: {k: v for k, v in p.items() if k != "name"}
                                 for p in table["profile_defs"]}
    return target_from_mapping(str(data["name"]), table, source="target data")


_KEYS = frozenset(
    {"fstype", "mkfs_options", "mount_options", "journal", "journal_size_mib", "description",
     "disk_profiles", "profile_defs"}
)


def _where(source: str, name: str) -> str:
    return f"{source}: targets.{name!r}"


def _string_list(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what}: must be a list of strings, got {value!r}")
    return tuple(value)


def target_from_mapping(name: str, table: Mapping[str, Any], *, source: str,
                        profiles_of_file: Mapping[str, DeviceProfile] | None = None) -> Target:
    """Build and validate one target from its TOML table (``profiles_of_file``: the file's own
    device profiles, which its disk_profiles may name next to the built-in ones)."""
    where = _where(source, name)
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: must be a table, got {table!r}")
    for key in table:
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(_KEYS))})")
    if "fstype" not in table:
        raise ConfigError(f"{where}: missing key 'fstype'")
    fstype = table["fstype"]
    if not isinstance(fstype, str):
        raise ConfigError(f"{where}.fstype: must be a string, got {fstype!r}")
    journal_text = table.get("journal", "internal")
    try:
        journal = JournalPlacement(journal_text)
    except ValueError:
        choices = ", ".join(p.value for p in JournalPlacement)
        raise ConfigError(f"{where}.journal: {journal_text!r} is not one of {choices}") from None
    size = table.get("journal_size_mib")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
        raise ConfigError(f"{where}.journal_size_mib: must be a positive integer, got {size!r}")
    if size is not None and journal is JournalPlacement.NONE:
        raise ConfigError(f"{where}.journal_size_mib: set, but journal is 'none'")
    description = table.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}.description: must be a string, got {description!r}")
    profiles = table.get("disk_profiles", {})
    if not isinstance(profiles, Mapping):
        raise ConfigError(f"{where}.disk_profiles: must be a table, got {profiles!r}")
    for role, profile in profiles.items():
        if role not in DISK_ROLES:
            raise ConfigError(
                f"{where}.disk_profiles: unknown disk role {role!r} (known: {', '.join(DISK_ROLES)})"
            )
        if not isinstance(profile, str):
            raise ConfigError(f"{where}.disk_profiles.{role}: must be a string, got {profile!r}")
    if "journal" in profiles and journal is not JournalPlacement.EXTERNAL:
        raise ConfigError(f"{where}.disk_profiles.journal: set, but journal is {journal.value!r}"
                          " (no journal disk)")
    known = dict(profiles_of_file or {})
    embedded = table.get("profile_defs", {})
    if not isinstance(embedded, Mapping):
        raise ConfigError(f"{where}.profile_defs: must be a table, got {embedded!r}")
    for pname, ptable in embedded.items():
        known[pname] = profile_from_mapping(pname, ptable, where=f"{where}.profile_defs.{pname}")
    defs: dict[str, DeviceProfile] = {}
    for role, pname in profiles.items():
        try:
            defs[pname] = get_profile(pname, known)
        except ConfigError as exc:
            raise ConfigError(f"{where}.disk_profiles.{role}: {exc}") from None
    target = Target(
        name=name,
        fstype=fstype,
        mkfs_options=_string_list(table.get("mkfs_options", []), f"{where}.mkfs_options"),
        mount_options=_string_list(table.get("mount_options", []), f"{where}.mount_options"),
        journal=journal,
        journal_size_mib=size,
        description=description,
        disk_profiles=tuple(sorted(profiles.items())),
        profile_defs=tuple(defs[n] for n in sorted(defs)),
    )
    _check_supported(target, where)
    return target


def _check_supported(target: Target, where: str) -> None:
    # The adapter checks what it reads from the target (journal placement,
    # data mode, ...): a bad option fails here, at load time, not mid-run.
    adapter_for(target.fstype, where=where).check_target(target, where=where)


def parse_targets(text: str, *, source: str) -> dict[str, Target]:
    """Targets defined in TOML ``text``; ``source`` names the file in messages."""
    return parse_target_file(text, source=source)[0]


def parse_target_file(text: str, *, source: str
                      ) -> tuple[dict[str, Target], dict[str, DeviceProfile]]:
    """The targets and the device profiles a TOML file defines."""
    # Imported here: a guest's task gets its targets in its request, and under emulation
    # this import is ~70 ms of every task's start.
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # The decoder's message ends with "(at line L, column C)".
        raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
    for key in data:
        if key not in ("targets", "profiles"):
            raise ConfigError(f"{source}: unknown key {key!r} (expected only [targets.\"name\"] "
                              "and [profiles.\"name\"] tables)")
    tables = data.get("targets", {})
    if not isinstance(tables, Mapping):
        raise ConfigError(f"{source}: 'targets' must be a table of tables")
    profiles = parse_profiles(data.get("profiles", {}), source=source)
    return ({name: target_from_mapping(name, table, source=source, profiles_of_file=profiles)
             for name, table in tables.items()}, profiles)


def load_targets(path: str | os.PathLike[str]) -> dict[str, Target]:
    """User targets from a TOML file; a name that shadows a built-in one is an error."""
    return load_target_file(path)[0]


def load_target_file(path: str | os.PathLike[str]
                     ) -> tuple[dict[str, Target], dict[str, DeviceProfile]]:
    """User targets and device profiles from a TOML file; neither may redefine a built-in one."""
    source = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read target file: {exc.strerror}") from exc
    targets, profiles = parse_target_file(text, source=source)
    for name in profiles:
        if name in builtin_profiles():
            raise ConfigError(f"{source}: profiles.{name!r}: redefines a built-in device profile")
    for name in targets:
        # Results are stored by target name: one name must mean one configuration.
        if name in _builtin():
            raise ConfigError(f"{source}: targets.{name!r}: redefines a built-in target")
    return targets, profiles


def with_profiles(target: Target, roles: Mapping[str, str],
                  profiles: Mapping[str, DeviceProfile] | None = None) -> Target:
    """``target`` with the device profile of each disk role in ``roles`` set (``--profile``)."""
    for role, name in roles.items():
        get_profile(name, profiles)  # an unknown name: the error lists the known ones
        if role == "journal" and not target.needs_journal_disk:
            raise ConfigError(f"--profile journal={name}: target {target.name!r} has no journal "
                              f"disk (its journal is {target.journal.value!r})")
    table = target.to_dict()
    table["disk_profiles"] = {**table["disk_profiles"], **roles}
    table["profile_defs"] = {**table["profile_defs"],
                             **{n: get_profile(n, profiles).to_dict() for n in roles.values()}}
    return target_from_dict(table)


@functools.cache
def _builtin() -> dict[str, Target]:
    import importlib.resources  # with tempfile, shutil and random: ~230 ms of an emulated start

    resource = importlib.resources.files("recovery").joinpath("builtin_targets.toml")
    return parse_targets(resource.read_text(encoding="utf-8"), source="builtin_targets.toml")


def list_targets(extra: Mapping[str, Target] | None = None) -> list[Target]:
    """Built-in targets (in file order), then ``extra`` ones."""
    return [*_builtin().values(), *(extra or {}).values()]


def resolve(name: str, user: Sequence[Target] = ()) -> Target:
    """The target ``name``: built in, or one of a run's ``user`` targets (from a targets file)."""
    return get_target(name, {t.name: t for t in user})


def get_target(name: str, extra: Mapping[str, Target] | None = None) -> Target:
    """The built-in target ``name``, or one of ``extra`` (e.g. from load_targets())."""
    if extra and name in extra:
        return extra[name]
    try:
        return _builtin()[name]
    except KeyError:
        known = ", ".join(t.name for t in list_targets(extra))
        raise ConfigError(f"unknown target {name!r} (known: {known})") from None
