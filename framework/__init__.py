"""powercut: crash-consistency and recovery-time tests for Linux filesystems."""

__version__ = "0.1.0"
