"""What device-mapper work needs from the kernel and the host: the dm targets and dmsetup.

``powercut doctor`` reads these to say what is missing and how to get it;
the guest's initramfs loads the modules (they are among its base modules).
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.core.command import CommandRunner, Tool


@dataclass(frozen=True, slots=True)
class KernelFeature:
    """One kernel option powercut's device-mapper work relies on."""

    config: str  # the Kconfig symbol, without CONFIG_ (drivers/md/Kconfig)
    module: str  # the module that provides it when it is not built in
    #: The target type `dmsetup targets` lists once it is loaded (None: not a target).
    dm_target: str | None
    required: bool = True


KERNEL_FEATURES: tuple[KernelFeature, ...] = (
    KernelFeature("BLK_DEV_DM", "dm-mod", None),
    # Recording: every write, flush and FUA in order, with marks.
    KernelFeature("DM_LOG_WRITES", "dm-log-writes", "log-writes"),
    # Live power cuts: drop_writes / error_writes.
    KernelFeature("DM_FLAKEY", "dm-flakey", "flakey"),
    # Throwaway copies of a crash state for mount-time replay and fsck repairs.
    KernelFeature("DM_SNAPSHOT", "dm-snapshot", "snapshot"),
    # Latency of device profiles.
    KernelFeature("DM_DELAY", "dm-delay", "delay"),
)

DMSETUP = Tool("dmsetup", "dmsetup", ("--version",))

TOOLS: tuple[Tool, ...] = (DMSETUP,)


def kernel_modules() -> tuple[str, ...]:
    """The modules of KERNEL_FEATURES, in load order."""
    return tuple(f.module for f in KERNEL_FEATURES)


def dm_targets() -> tuple[str, ...]:
    """The target types a guest must list in `dmsetup targets`."""
    return tuple(f.dm_target for f in KERNEL_FEATURES if f.dm_target is not None)


def loaded_targets(runner: CommandRunner) -> list[str]:
    """Names of the device-mapper targets the running kernel offers now (``dmsetup targets``).

    Built-in targets and those whose module is loaded; sorted."""
    from devicemapper.dmsetup import DmSetup  # here: doctor reads this module's tables only

    return sorted(DmSetup(runner, timeout_s=30).targets())
