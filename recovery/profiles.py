"""Device profiles: what a run's data and journal disks pretend to be (ram, nvme, ssd, hdd, ...).

A profile is a latency model applied in the guest with dm-delay (read,
write and flush delays in whole milliseconds; Documentation/admin-guide/
device-mapper/delay.rst, the 9-argument table of Linux 6.1's
drivers/md/dm-delay.c, whose flush class is what REQ_PREFLUSH bios, i.e.
fsync and journal commits, wait for) plus a bandwidth and IOPS limit
applied by qemu's block throttling (``throttling.bps-total``,
``throttling.iops-total`` of the disk's -drive). The built-in profiles
are in ``builtin_profiles.toml`` with the figures they model and where
those come from; users define their own in a targets file::

    [profiles.slow-sd]
    description = "an SD card"
    read_ms = 2
    write_ms = 10
    flush_ms = 40
    bandwidth_mb_s = 10
    iops = 50
    source = "my card's measured fio figures"
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from framework.core.errors import ConfigError

#: Below this qemu's throttling can stall a guest (its documentation warns of it).
MIN_BANDWIDTH_MB_S = 2.0
MIN_IOPS = 10
MB = 1_000_000

_KEYS = frozenset({"description", "read_ms", "write_ms", "flush_ms", "bandwidth_mb_s", "iops",
                   "source"})


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    name: str
    description: str = ""
    read_ms: int = 0
    write_ms: int = 0
    flush_ms: int = 0
    bandwidth_mb_s: float | None = None  # None: not throttled
    iops: int | None = None
    source: str = ""

    @property
    def delayed(self) -> bool:
        """Whether dm-delay is needed at all (a profile of zeros leaves the disk as it is)."""
        return bool(self.read_ms or self.write_ms or self.flush_ms)

    @property
    def delays(self) -> tuple[int, int, int] | None:
        """(read, write, flush) milliseconds for dm-delay, None when nothing is delayed."""
        return (self.read_ms, self.write_ms, self.flush_ms) if self.delayed else None

    @property
    def bandwidth_bytes_s(self) -> int | None:
        return None if self.bandwidth_mb_s is None else int(self.bandwidth_mb_s * MB)

    def describe(self) -> str:
        limits = ", ".join(filter(None, (
            f"{self.bandwidth_mb_s:g} MB/s" if self.bandwidth_mb_s is not None else "",
            f"{self.iops} IOPS" if self.iops is not None else ""))) or "no throttle"
        return (f"read {self.read_ms} ms, write {self.write_ms} ms, flush {self.flush_ms} ms; "
                f"{limits}")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "name"}


def _number(table: Mapping[str, Any], key: str, where: str, *, minimum: float,
            integer: bool) -> Any:
    value = table.get(key)
    if value is None:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or value < minimum:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}.{key}: must be {kind} of at least {minimum:g}, got {value!r}")
    return value


def profile_from_mapping(name: str, table: Any, *, where: str) -> DeviceProfile:
    """One profile from its TOML table, validated; ``where`` names it in messages."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: must be a table, got {table!r}")
    for key in table:
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(_KEYS))})")
    for key in ("description", "source"):
        if not isinstance(table.get(key, ""), str):
            raise ConfigError(f"{where}.{key}: must be a string, got {table[key]!r}")
    delays = {k: _number(table, k, where, minimum=0, integer=True) or 0
              for k in ("read_ms", "write_ms", "flush_ms")}
    return DeviceProfile(
        name=name, description=table.get("description", ""), **delays,
        bandwidth_mb_s=_number(table, "bandwidth_mb_s", where, minimum=MIN_BANDWIDTH_MB_S,
                               integer=False),
        iops=_number(table, "iops", where, minimum=MIN_IOPS, integer=True),
        source=table.get("source", ""))


def parse_profiles(tables: Any, *, source: str) -> dict[str, DeviceProfile]:
    """The ``[profiles.NAME]`` tables of a file; ``source`` names it in messages."""
    if not isinstance(tables, Mapping):
        raise ConfigError(f"{source}: 'profiles' must be a table of tables")
    return {name: profile_from_mapping(name, table, where=f"{source}: profiles.{name!r}")
            for name, table in tables.items()}


@functools.cache
def builtin_profiles() -> dict[str, DeviceProfile]:
    import importlib.resources  # imported when first needed (recovery.targets says why)
    import tomllib

    text = importlib.resources.files("recovery").joinpath("builtin_profiles.toml").read_text(
        encoding="utf-8")
    return parse_profiles(tomllib.loads(text)["profiles"], source="builtin_profiles.toml")


def get_profile(name: str, extra: Mapping[str, DeviceProfile] | None = None) -> DeviceProfile:
    """The profile ``name``: one of ``extra`` (a targets file's) or a built-in one."""
    if extra and name in extra:
        return extra[name]
    known = builtin_profiles()
    if name in known:
        return known[name]
    names = ", ".join([*known, *(n for n in (extra or {}) if n not in known)])
    raise ConfigError(f"unknown device profile {name!r} (known: {names})")


def parse_profile_option(text: str, roles: tuple[str, ...]) -> dict[str, str]:
    """``--profile data=hdd,journal=ram`` as {role: profile name}; a bare name is the data disk's."""
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        role, sep, name = item.partition("=")
        if not sep:
            role, name = "data", item
        if role not in roles:
            raise ConfigError(f"--profile {text!r}: unknown disk role {role!r} "
                              f"(roles: {', '.join(roles)})")
        if not name:
            raise ConfigError(f"--profile {text!r}: no profile named for {role!r}")
        if role in out:
            raise ConfigError(f"--profile {text!r}: {role!r} given twice")
        out[role] = name
    if not out:
        raise ConfigError(f"--profile {text!r}: expected ROLE=NAME[,ROLE=NAME], e.g. "
                          "data=hdd,journal=ram")
    return out
