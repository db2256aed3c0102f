"""Crash workloads: operations, the model of their effect, generators and named cases (no syscalls)."""
