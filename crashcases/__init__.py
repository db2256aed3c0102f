"""Crash consistency: workloads, what they promise, and checking crash states against it.

The rooms, from the bottom floor up (import-linter keeps them in this order):

- ``vocabulary``: outcomes, crash-point kinds, variant kinds; ``fails``.
- ``oracle/``: the log of what a workload did and promised (``log``), what became
  durable at each mark (``promises``), findings as data (``finding``) and checking a
  mounted state (``verify``).
- ``workload/``: operations (``ops``), the model of a tree (``model``), the generators
  (``generate``) and named cases (``cases``); pure, no syscalls.
- ``execute``: running a workload with real syscalls, marking the log.
- ``check``: checking one crash state (mount, oracle, tree, fsck).
- ``known``: known behaviour (``known.toml``) and how states are judged against it.
- ``group``: failing states grouped into distinct findings by a signature.
- ``crash/``, ``cut/``, ``sweep/``: the three engines, each with its host half
  (``engine``) and its guest half (``guest``).
- ``findings/``: what a failing state becomes: shrunk (``shrink``) and exported as a
  script (``script``) or an fstests test (``fstests``), its checks built from the
  findings' fields (``checks``).
"""
