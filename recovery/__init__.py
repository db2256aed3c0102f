"""Filesystem adapters (mkfs, mount, fsck, journal placement) and recovery-time measurement."""
