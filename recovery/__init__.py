"""Filesystem adapters (mkfs, mount, fsck, journal placement, persistence rules, kernel modules
and tools) and recovery-time measurement."""
