"""Benchmark workloads: wrappers that run a real tool and parse its output into metrics."""
