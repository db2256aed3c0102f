"""Crash runs: record a workload on dm-log-writes, then check every chosen crash state (host ``engine``, guest ``guest``)."""
