"""Which operations generated workloads use: an ``OpSelection``.

Given a target's capabilities (``load_case(..., capabilities=...)``, as
``powercut crash`` does) the generators add the newer operations (direct I/O,
mmap and msync, O_SYNC/O_DSYNC writes, sync_file_range, syncfs, renameat2,
copy_file_range, reflinks, collapse/insert range) the target's filesystem has,
and argument partitions in the manner of CM-IOCov (sizes below, at and across
page and block boundaries, unaligned offsets, writes at the end and into holes,
zero-length calls where the syscall allows them). Without capabilities they
keep the classic operation set, so a seed gives the workload it always gave.
``ops`` (``--ops``) narrows the generated operations to some kinds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from crashcases.vocabulary import DURABILITY_OPS, OpKind
from crashcases.workload.ops import ASSUMED_CAPABILITIES, Op, required_capability
from framework.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class OpSelection:
    """Which operations generated workloads use (see the module docstring).

    ``capabilities`` None and ``kinds`` None: the classic set only.
    Otherwise the classic set and the newer operations, those that need a
    capability only if it is in ``capabilities``; ``kinds`` keeps only
    those op kinds. Durability ops named in ``kinds`` are the only ones
    that follow each op; if it names none, every one that applies may.
    """

    capabilities: frozenset[str] | None = None
    kinds: frozenset[OpKind] | None = None

    @property
    def extended(self) -> bool:
        return self.capabilities is not None or self.kinds is not None

    def capable(self, op: Op) -> bool:
        need = required_capability(op)
        if need is None:
            return True
        if self.capabilities is None:
            return need in ASSUMED_CAPABILITIES
        return need in self.capabilities

    def allows(self, op: Op) -> bool:
        """Whether ``op`` may be one of the generated operations."""
        return (self.kinds is None or op.kind in self.kinds) and self.capable(op)

    def allows_durable(self, op: Op) -> bool:
        """Whether durability op ``op`` may follow an operation to make it durable."""
        if self.kinds is not None and self.kinds & DURABILITY_OPS and op.kind not in self.kinds:
            return False
        return self.capable(op)


CLASSIC = OpSelection()


def parse_ops(names: Iterable[str], *, where: str = "ops") -> frozenset[OpKind]:
    """Op kinds by name; ConfigError naming the first unknown one and listing the known ones."""
    out = set()
    for name in names:
        try:
            out.add(OpKind(name.strip()))
        except ValueError:
            known = ", ".join(sorted(k.value for k in OpKind))
            raise ConfigError(f"{where}: unknown operation {name.strip()!r} (known: {known})") from None
    if not out:
        raise ConfigError(f"{where}: name at least one operation")
    return frozenset(out)
