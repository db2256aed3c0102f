"""Throughput benchmarks: workloads, the in-guest repetition task, the host engine and its report."""
