"""The durability oracle: what a workload promised, and checking a crash state against it."""
