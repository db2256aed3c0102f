"""The core: errors, clock, command runner, machines, agent protocol, store, statistics."""
