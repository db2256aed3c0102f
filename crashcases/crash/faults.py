"""Faults a crash run injects to test its own handling of hangs, busy devices and panics.

Three hidden options of ``powercut crash`` name states by their place in the run ("#4",
the fourth state) or by key: ``--inject-hang`` blocks that state's check as a mount stuck
in the kernel would; ``--inject-busy "#2@1,#5"`` has another process hold a state's device
open for that many seconds, or for good; ``--inject-panic "#4@once"`` panics the guest
kernel (sysrq c) as the state's check starts, each time or the first time only. They are
parsed once, where the options come in; the engine names the states by key before the
guest sees them, and spends a fault that is injected once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from framework.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault at one state: ``state`` is "#N" (the N-th state of the run) or a state key."""

    state: str
    #: A busy device: how long the other process holds it (None: for good).
    seconds: float | None = None
    #: A panic: only the first time the state is checked.
    once: bool = False


@dataclass(frozen=True, slots=True)
class Faults:
    hang: str | None = None
    busy: tuple[Fault, ...] = ()
    panic: tuple[Fault, ...] = ()

    @classmethod
    def parse(cls, *, hang: str | None = None, busy: str | None = None,
              panic: str | None = None) -> Faults:
        """The faults the three options name; a malformed one is a one-line ConfigError."""
        held = []
        for state, seconds in _items(busy, "--inject-busy"):
            try:
                held.append(Fault(state, float(seconds) if seconds else None))
            except ValueError:
                raise ConfigError(f"--inject-busy {busy!r}: {seconds!r} is no number of "
                                  "seconds (STATE or STATE@SECONDS)") from None
        panics = []
        for state, how in _items(panic, "--inject-panic"):
            if how not in ("", "once"):
                raise ConfigError(f"--inject-panic {panic!r}: expected STATE or STATE@once")
            panics.append(Fault(state, once=how == "once"))
        return cls(hang or None, tuple(held), tuple(panics))

    def options(self) -> dict[str, str | None]:
        """The three options as given (a plan.json keeps them so)."""
        return {"inject_hang": self.hang,
                "inject_busy": ",".join(f.state + ("" if f.seconds is None else f"@{f.seconds:g}")
                                        for f in self.busy) or None,
                "inject_panic": ",".join(f.state + ("@once" if f.once else "")
                                         for f in self.panic) or None}

    def named(self, keys: Sequence[str]) -> Faults:
        """The faults with each "#N" replaced by the key of the N-th of ``keys``."""

        def key(state: str) -> str:
            n = state[1:]
            return keys[int(n) - 1] if state.startswith("#") and n.isdigit() \
                and 0 < int(n) <= len(keys) else state

        return Faults(key(self.hang) if self.hang else None,
                      tuple(replace(f, state=key(f.state)) for f in self.busy),
                      tuple(replace(f, state=key(f.state)) for f in self.panic))

    def without_busy(self, key: str) -> Faults:
        """A busy device is injected once: the fresh guest checks the state as it is."""
        return replace(self, busy=tuple(f for f in self.busy if f.state != key))

    def panics_spent(self, keys: Collection[str]) -> Faults:
        """Without the "once" panics of ``keys``: those states' guests died already."""
        return replace(self, panic=tuple(f for f in self.panic
                                         if not (f.once and f.state in keys)))

    def busy_seconds(self) -> dict[str, float | None]:
        """State key -> how long its device is held (None: for good)."""
        return {f.state: f.seconds for f in self.busy}

    def panicking(self) -> set[str]:
        return {f.state for f in self.panic}

    def alone(self) -> set[str]:
        """States whose fault is in their own check: they share no mount with another."""
        return ({self.hang} if self.hang else set()) | {f.state for f in self.busy}

    def to_dict(self) -> dict[str, Any]:
        return {"hang": self.hang,
                "busy": [{"state": f.state, "seconds": f.seconds} for f in self.busy],
                "panic": [{"state": f.state, "once": f.once} for f in self.panic]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Faults:
        return cls(raw.get("hang"),
                   tuple(Fault(str(f["state"]), seconds=f["seconds"]) for f in raw.get("busy", ())),
                   tuple(Fault(str(f["state"]), once=bool(f["once"])) for f in raw.get("panic", ())))


NO_FAULTS = Faults()


def _items(text: str | None, option: str) -> list[tuple[str, str]]:
    """(state, what follows its "@") of each comma-separated item."""
    out = []
    for item in (text or "").split(","):
        if item:
            state, _, after = item.partition("@")
            if not state:
                raise ConfigError(f"{option} {text!r}: an item names no state")
            out.append((state, after))
    return out
