"""Crash workloads with a durability oracle, crash points and variants, checking one crash state."""
