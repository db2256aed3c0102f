"""Who knows what: filesystems are described only in recovery/, device-mapper is driven only
from devicemapper/, and `make setup` installs every package the code declares.

"Adding a filesystem touches its adapter and the targets TOML, nothing else": a
string constant outside recovery/ that names a filesystem type, one of its tools
or its package is knowledge that belongs in an adapter. Docstrings do not count
(they explain, they do not decide), and neither does the help text of
framework/cli (``help=``, ``description=``, ``epilog=``, parser.error()
messages and the DESCRIPTION / EPILOG constants), whose examples name targets
such as ``ext4/ordered`` for users. Import-linter checks the imports; these tests check the strings and calls
it cannot see.

The allow-lists are empty and should stay so; an entry is a debt with its
reason beside it, and a test fails once the code it excuses is gone.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicemapper import features as dm_features
from framework.cli import doctor
from framework.core.machine.kernel import KernelSpec
from recovery.filesystems import ADAPTERS

ROOT = Path(__file__).resolve().parents[2]

# Filesystem types, whole words: "ext4/ordered" and "btrfs-progs" name one, "fstype" does not.
FS_TYPES = re.compile(r"(?<![A-Za-z0-9_])(ext[234]|xfs|btrfs|f2fs|jfs|reiserfs)(?![A-Za-z0-9])")
# Their tools and packages. A bare "mkfs" is not one: it is the name of the
# log mark made after mkfs (as in xfstests' dmlogwrites), whatever the filesystem.
FS_TOOLS = re.compile(
    r"(?<![A-Za-z0-9_])("
    r"mkfs\.\w+|mke2fs|e2fsck|dumpe2fs|tune2fs|resize2fs|e2image|e2fsprogs|"
    r"fsck\.\w+|xfs_\w+|xfsprogs|jfs_\w+|jfsutils|mkreiserfs|reiserfsck|reiserfstune|"
    r"reiserfsprogs|f2fs-tools"
    r")(?![A-Za-z0-9])"
)

#: Keyword arguments whose text is for people (framework/cli only); ``what``
#: is the help phrase framework.cli.add_target_options() puts in --target's help.
HELP_KEYWORDS = frozenset({"help", "description", "epilog", "usage", "what"})
#: Constants holding help text (framework/cli only).
HELP_NAMES = re.compile(r"^[A-Z_]*(DESCRIPTION|EPILOG|USAGE|HELP|EXAMPLES?)$")

# (path, the string constant) pairs in files owned elsewhere; see the module docstring.
FS_NAME_ALLOWED: set[tuple[str, str]] = set()
DMSETUP_ALLOWED: set[str] = set()
# FICLONE/FICLONERANGE, FIDEDUPERANGE and FS_IOC_SETFLAGS on regular files: workload
# operations, not device ioctls; FS_IOC_GETFLAGS reads a crash state's file's flags back.
IOCTL_ALLOWED: set[str] = {"crashcases/execute.py", "crashcases/oracle/verify.py"}


def _modules(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _help_text(tree: ast.AST) -> set[int]:
    """Every node inside help text: help=/description=/epilog= values, parser.error() messages
    and *_EPILOG-style constants."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            roots += [kw.value for kw in node.keywords if kw.arg in HELP_KEYWORDS]
            # parser.error("... e.g. ext4/ordered"): a usage message, for people too.
            if isinstance(node.func, ast.Attribute) and node.func.attr == "error":
                roots += node.args
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(
                isinstance(t, ast.Name) and HELP_NAMES.match(t.id) for t in targets
            ):
                roots.append(node.value)
    return {id(n) for root in roots for n in ast.walk(root)}


def filesystem_knowledge(path: Path, *, cli: bool = False) -> list[tuple[int, str, str]]:
    """(line, the string, what it names) for every string constant naming a filesystem.

    ``cli``: the module is part of framework/cli, whose help text may name targets.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _docstrings(tree)
    if cli:
        skip |= _help_text(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for pattern in (FS_TOOLS, FS_TYPES):
                m = pattern.search(node.value)
                if m:
                    found.append((node.lineno, node.value, m.group(1)))
                    break
    return found


def _runs_dmsetup(node: ast.AST) -> bool:
    if not isinstance(node, ast.List | ast.Tuple) or not node.elts:
        return False
    first = node.elts[0]
    return isinstance(first, ast.Constant) and first.value == "dmsetup"


def _calls_ioctl(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "ioctl" and isinstance(node.value, ast.Name) and node.value.id == "fcntl"
    if isinstance(node, ast.ImportFrom):
        return node.module == "fcntl" and any(alias.name == "ioctl" for alias in node.names)
    return False


def device_mapper_calls(path: Path) -> tuple[list[int], list[int]]:
    """Lines that run dmsetup (an argv list or tuple starting with it) and lines that ioctl()."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.expr | ast.stmt)]
    return (sorted(n.lineno for n in nodes if _runs_dmsetup(n)),
            sorted(n.lineno for n in nodes if _calls_ioctl(n)))


def test_only_recovery_names_filesystems_and_their_tools() -> None:
    found = []
    used_allowances = set()
    for path in _modules("framework", "crashcases", "devicemapper"):
        for line, text, what in filesystem_knowledge(
                path, cli=_rel(path).startswith("framework/cli/")):
            if (_rel(path), text) in FS_NAME_ALLOWED:
                used_allowances.add((_rel(path), text))
                continue
            found.append(f"{_rel(path)}:{line}: {what!r} in {text[:60]!r}")
    assert found == [], "filesystem knowledge outside recovery/:\n" + "\n".join(found)
    assert used_allowances == FS_NAME_ALLOWED, "allow-list entries that are gone: remove them"


def test_only_devicemapper_runs_dmsetup_or_ioctl() -> None:
    found = []
    used_dmsetup, used_ioctl = set(), set()
    for path in _modules("framework", "crashcases", "recovery"):
        rel = _rel(path)
        dmsetup, ioctl = device_mapper_calls(path)
        if dmsetup and rel in DMSETUP_ALLOWED:
            used_dmsetup.add(rel)
            dmsetup = []
        if ioctl and rel in IOCTL_ALLOWED:
            used_ioctl.add(rel)
            ioctl = []
        found += [f"{rel}:{line}: runs dmsetup" for line in dmsetup]
        found += [f"{rel}:{line}: calls fcntl.ioctl" for line in ioctl]
    assert found == [], "device-mapper outside devicemapper/:\n" + "\n".join(found)
    assert used_dmsetup == DMSETUP_ALLOWED and used_ioctl == IOCTL_ALLOWED, \
        "allow-list entries that are gone: remove them"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('x = "mkfs.xfs"', ["mkfs.xfs"]),
        ('x = ["e2fsck", "-n"]', ["e2fsck"]),
        ('x = {"ext2": ("ext4",)}', ["ext2", "ext4"]),
        ('x = "btrfs-progs"', ["btrfs"]),
        ('x = f"{fs} on ext4/ordered"', ["ext4"]),
        ('x = "fsck.f2fs"', ["fsck.f2fs"]),
        ('"""Docstrings may say ext4."""\ndef f():\n    """And xfs_repair."""', []),
        ('x = "mkfs"  # the mark name', []),
        ('x = "fstype"; y = "xfsdump_not"', []),
    ],
)
def test_the_scan_finds_what_it_should(tmp_path: Path, source: str, expected: list[str]) -> None:
    # Positive controls: a scan that finds nothing proves nothing.
    path = tmp_path / "m.py"
    path.write_text(source + "\n")
    assert sorted(what for _, _, what in filesystem_knowledge(path)) == sorted(expected)


def test_help_text_is_allowed_only_in_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('p.add_argument("--target", help="e.g. ext4/ordered")\n'
                    'EPILOG = "powercut bench --targets ext2,ext4/journal"\n'
                    'p.add_argument("--fs", default="ext4", help=f"{x} ext4")\n'
                    'add_target_options(p, what="e.g. xfs")\n'
                    'parser.error(f"{opt}: expected a target name, e.g. ext4/ordered")\n')
    assert [line for line, _, _ in filesystem_knowledge(path, cli=True)] == [3]
    assert len(filesystem_knowledge(path)) == 6


def test_the_device_mapper_scan_finds_what_it_should(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('import fcntl\nrun(["dmsetup", "targets"])\nfcntl.ioctl(fd, 1, b"")\n'
                    'from fcntl import ioctl\nx = ("dmsetup",)\ny = ["sudo", "dmsetup"]\n')
    assert device_mapper_calls(path) == ([2, 5], [3, 4])


def apt_packages(makefile: Path) -> set[str]:
    """The words of the Makefile's APT_PACKAGES assignment (with its continuation lines)."""
    text = makefile.read_text(encoding="utf-8").replace("\\\n", " ")
    m = re.search(r"^APT_PACKAGES\s*:?=(.*)$", text, re.MULTILINE)
    assert m, f"{makefile}: no APT_PACKAGES assignment"
    return set(m.group(1).split())


def test_make_setup_installs_every_declared_package() -> None:
    declared = {tool.package for adapter in ADAPTERS for tool in adapter.tools}
    declared |= {tool.package for tool in doctor.all_tools()}
    missing = sorted(declared - apt_packages(ROOT / "Makefile"))
    assert missing == [], f"Makefile APT_PACKAGES lacks: {' '.join(missing)}"


def test_apt_packages_parser(tmp_path: Path) -> None:
    makefile = tmp_path / "Makefile"
    makefile.write_text("X := 1\nAPT_PACKAGES := a b \\\n\tc \\\n\td\nOTHER := e\n")
    assert apt_packages(makefile) == {"a", "b", "c", "d"}


def make_python(*overrides: str) -> str:
    """The interpreter `make setup` would make the virtualenv with (PYTHON unset around it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    res = subprocess.run(["make", "-s", "-C", os.fspath(ROOT), "--eval",
                          "show-python: ; @echo $(PYTHON)", *overrides, "show-python"],
                         capture_output=True, text=True, check=True, env=env)
    return res.stdout.strip()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_virtualenv_is_made_with_debians_python3_unless_told_otherwise() -> None:
    debian = Path("/usr/bin/python3")
    recent = debian.exists() and subprocess.run(
        [debian, "-c", "import sys; sys.exit(sys.version_info < (3, 11))"]).returncode == 0
    expected = "/usr/bin/python3" if recent else "python3"
    assert make_python() == expected
    assert make_python("PYTHON=/opt/py/bin/python3.12") == "/opt/py/bin/python3.12"


def test_doctor_checks_what_the_adapters_and_devicemapper_declare() -> None:
    binaries = [t.binary for t in doctor.all_tools()]
    assert len(set(binaries)) == len(binaries)
    assert {t.binary for a in ADAPTERS for t in a.tools} <= set(binaries)
    assert {t.binary for t in dm_features.TOOLS} <= set(binaries)


def test_doctor_names_a_missing_device_mapper_module_and_its_config(tmp_path: Path) -> None:
    moddir = tmp_path / "lib/modules/r"
    moddir.mkdir(parents=True)
    present = [f.module for f in dm_features.KERNEL_FEATURES if f.config != "DM_DELAY"]
    present += [m for _, m, _ in doctor.KERNEL_FEATURES]
    (moddir / "modules.dep").write_text("".join(f"kernel/{m}.ko:\n" for m in present))
    checks = {c.name: c for c in doctor.check_kernel(KernelSpec(tmp_path / "bzImage", "r", tmp_path))}
    assert checks["CONFIG_DM_LOG_WRITES"].ok
    delay = checks["CONFIG_DM_DELAY"]
    assert not delay.ok and delay.required
    assert delay.fix == "rebuild the kernel with CONFIG_DM_DELAY=m (or =y)"


# (a file to plant a line in, the import planted, the contract it must break)
PLANTED = [
    ("crashcases/cut/engine.py", "import crashcases.sweep.engine",
     "Rooms of crashcases"),  # sibling engines: '|'
    ("crashcases/oracle/log.py", "import crashcases.workload.ops", "Rooms of crashcases"),
    ("framework/report/html.py", "import framework.study.engine", "Layers: application"),
    ("crashcases/sweep/guest.py", "import numpy", "Guest programs load no numerics"),
    ("crashcases/crash/guest.py", "import crashcases.findings.checks", "Rooms of crashcases"),
    ("recovery/filesystems/xfs.py", "import recovery.targets", "Targets load above"),
    ("framework/core/stats.py", "import sqlite3", "Only the store imports sqlite3"),
]


@pytest.mark.parametrize("where,line,contract", PLANTED, ids=[p[1] for p in PLANTED])
def test_each_import_contract_reports_a_planted_violation(tmp_path: Path, where: str, line: str,
                                                          contract: str) -> None:
    """Positive control of the import-linter contracts in pyproject.toml: a copy of the
    packages with one forbidden import added is reported broken, by name."""
    for name in ("framework", "crashcases", "recovery", "devicemapper"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / where
    text = target.read_text()
    head, sep, rest = text.partition("\nfrom __future__ import annotations\n")
    target.write_text(head + sep + f"{line}  # planted\n" + rest)
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "400"},
                         timeout=300)
    assert out.returncode != 0, out.stdout
    # "NAME BROKEN", or "NAME BROKEN (N ignored imports)" for a contract that ignores some
    broken = [ln for ln in out.stdout.splitlines()
              if re.search(r" BROKEN( \(\d+ ignored imports?\))?$", ln)]
    assert len(broken) == 1 and broken[0].startswith(contract), out.stdout[-2000:]


def test_doctor_says_whether_the_interpreter_loads_a_shared_libpython(tmp_path: Path) -> None:
    static = tmp_path / "static-maps"
    static.write_text("55d0c0000000-55d0c0100000 r-xp 00000000 08:01 1 /usr/bin/python3.11\n")
    shared = tmp_path / "shared-maps"
    shared.write_text(static.read_text()
                      + "7f36b0000000-7f36b0400000 r-xp 00000000 08:01 2 /opt/lib/libpython3.11.so.1.0\n")
    ok = doctor.check_interpreter(static)
    assert ok.ok and "libpython linked in" in ok.detail
    slow = doctor.check_interpreter(shared)
    assert not slow.ok and not slow.required
    assert "shared library" in slow.detail and "make setup" in slow.fix
    unreadable = doctor.check_interpreter(tmp_path / "missing")
    assert unreadable.ok and "cannot read" in unreadable.detail
    # This process: the answer agrees with its own mappings.
    with open("/proc/self/maps", encoding="utf-8") as f:
        assert doctor.check_interpreter().ok == ("libpython" not in f.read())


def test_doctor_says_whether_guests_skip_acpi_interrupt_routing(tmp_path: Path) -> None:
    spec = KernelSpec(tmp_path / "bzImage", "r", tmp_path)
    missing = doctor.check_msi(spec)
    assert not missing.ok and not missing.required
    assert "no .config found" in missing.detail and missing.fix.endswith("as config-r")
    config = tmp_path / "config-r"
    config.write_text("# CONFIG_PCI_MSI is not set\n")
    without = doctor.check_msi(spec)
    assert not without.ok and f"{config}: no CONFIG_PCI_MSI=y" in without.detail
    config.write_text("CONFIG_PCI_MSI=y\nCONFIG_PCI=y\n")
    assert doctor.check_msi(spec).ok
    assert doctor.check_kernel(spec)[1] == doctor.check_msi(spec)
    assert "dropped in the guest's initramfs" in doctor.check_signatures(spec).detail
    config.write_text("CONFIG_PCI_MSI=y\nCONFIG_MODULE_SIG_FORCE=y\n")
    assert "kept in the guest's initramfs (the kernel enforces" in \
        doctor.check_signatures(spec).detail
    config.unlink()
    assert "(no .config found" in doctor.check_signatures(spec).detail
