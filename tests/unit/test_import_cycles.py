"""No import cycle between any two modules of powercut's packages.

A cycle means neither module can be read, tested or moved without the
other, and one of the imports has to hide inside a function to load at all.
The import-linter contracts (pyproject.toml) hold the floors and rooms; this
test holds every module, also within one room. It reads the same import
graph import-linter builds (grimp), with imports under ``TYPE_CHECKING`` and
inside functions counted: a cycle hidden there is still a cycle.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Cycles known and being removed, each as the set of its modules (none now): a cycle that
#: has to stay for a while goes here, and a test below fails once it is gone and not removed.
ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()


def root_packages() -> list[str]:
    """The packages import-linter checks (pyproject.toml), so both read the same tree."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["importlinter"]["root_packages"])


def imports_of(*packages: str) -> dict[str, set[str]]:
    """Each module of ``packages`` and the modules of ``packages`` it imports."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) & graph.modules
            for m in graph.modules}


def cycles(imports: Mapping[str, Set[str]]) -> list[list[str]]:
    """The import cycles of a module graph: its strongly connected components of more than
    one module (or of one that imports itself), each sorted, sorted by their first module.

    Tarjan's algorithm, without recursion (Tarjan 1972, "Depth-first search and linear
    graph algorithms", SIAM J. Comput. 1(2))."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    # The depth-first path: each module with the imports of it still to follow.
    path: list[tuple[str, Iterator[str]]] = []
    for start in sorted(imports):
        if start in index:
            continue
        step: str | None = start
        while True:
            if step is not None and step not in index:  # enter it
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                path.append((step, iter(sorted(imports.get(step, ())))))
            elif step is not None and step in on_stack:
                module = path[-1][0]
                low[module] = min(low[module], index[step])
            if not path:
                break
            module, todo = path[-1]
            step = next(todo, None)
            if step is not None:
                continue
            path.pop()  # all its imports followed: leave it
            if path:
                parent = path[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1 or module in imports.get(module, ()):
                    found.append(sorted(component))
    return sorted(found)


def describe(component: list[str], imports: Mapping[str, Set[str]]) -> str:
    """A component and, per module, the modules of it that it imports."""
    members = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(imports[m] & members))}" for m in component)


def test_no_module_imports_itself_through_others() -> None:
    imports = imports_of(*root_packages())
    found = cycles(imports)
    new = [c for c in found if frozenset(c) not in ALLOWED_CYCLES]
    assert not new, "import cycles:\n" + "\n".join(describe(c, imports) for c in new)


def test_each_allowed_cycle_is_still_there() -> None:
    """An allowance outlives its cycle only by mistake: remove it with the cycle."""
    found = {frozenset(c) for c in cycles(imports_of(*root_packages()))}
    assert not ALLOWED_CYCLES - found, f"gone, remove from ALLOWED_CYCLES: {ALLOWED_CYCLES - found}"


PLANTED = {
    # a -> b -> c -> a: a cycle of three; d imports into it but is not part of it.
    "a.py": "from planted import b\n",
    "b.py": "from planted import c\n",
    "c.py": "import planted.a\n",
    "d.py": "import planted.a\n",
    # e <-> f, the second import hidden where a cycle usually hides: inside a function.
    "e.py": "import planted.f\n",
    "f.py": "def late():\n    from planted import e\n    return e\n",
    # g imports itself; h imports nothing of the package.
    "g.py": "import planted.g\n",
    "h.py": "import os\n",
}


def test_planted_cycles_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Positive control: every cycle of a package made with known cycles, and nothing else."""
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in PLANTED.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    imports = imports_of("planted")
    assert cycles(imports) == [["planted.a", "planted.b", "planted.c"],
                               ["planted.e", "planted.f"], ["planted.g"]]
    assert describe(["planted.e", "planted.f"], imports) == \
        "planted.e -> planted.f; planted.f -> planted.e"


def test_a_cycle_planted_in_powercut_fails_the_check() -> None:
    """Positive control on the real tree: one import back from the adapters to the target
    loader makes a cycle the check reports."""
    imports = imports_of(*root_packages())
    imports["recovery.filesystems.xfs"].add("recovery.targets")
    new = [c for c in cycles(imports) if frozenset(c) not in ALLOWED_CYCLES]
    assert any({"recovery.targets", "recovery.filesystems",
                "recovery.filesystems.xfs"} <= set(c) for c in new), new
