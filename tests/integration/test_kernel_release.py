"""--kernel-release boots a Debian kernel fetched from the archive into the cache.

The newest 7.x build Debian's archive offers (trixie-backports, sid, experimental) is
fetched once per session into the kernel cache when it is not there yet: a short crash
run on ext4 and one on btrfs then boot it. Where the archive answers, these tests run;
where a fetch is refused, they fail with apt's reason (never a skip: CI must cover the
kernels maintainers test).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

POWERCUT = [sys.executable, "-m", "framework.cli"]
#: What must stay as it was however powercut talks to apt: the system's configuration,
#: package lists and download cache.
SYSTEM_APT = (Path("/etc/apt"), Path("/var/lib/apt/lists"), Path("/var/cache/apt/archives"))


def apt_files() -> dict[str, str]:
    """Every regular file under the system's apt directories, with its content's hash and
    its modification time."""
    out = {}
    for top in SYSTEM_APT:
        for dirpath, _, names in os.walk(top):
            for name in names:
                path = Path(dirpath) / name
                if path.is_file() and not path.is_symlink() and name != "lock":
                    st = path.stat()
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                    out[os.fspath(path)] = f"{digest} {st.st_mtime_ns}"
    return out


def fetch(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*POWERCUT, "kernels", *argv], capture_output=True, text=True,
                          timeout=1800, env=env)


@pytest.fixture(scope="session")
def newest_7x() -> tuple[str, dict[str, str], dict[str, str]]:
    """The newest 7.x release, fetched into the shared kernel cache (a second session, or a
    second worker, finds it there); the system's apt files before and after."""
    before = apt_files()
    out = fetch("fetch", "7", "--json")
    after = apt_files()
    assert out.returncode == 0, f"powercut kernels fetch 7 failed: {out.stderr.strip()}"
    return json.loads(out.stdout)["release"], before, after


def test_the_fetch_leaves_the_system_apt_files_as_they_were(newest_7x, tmp_path):
    release, before, after = newest_7x
    assert release.startswith("7."), release
    assert after == before
    # The package lists are read afresh into an empty cache of its own too.
    env = {**os.environ, "POWERCUT_KERNEL_CACHE": os.fspath(tmp_path)}
    out = fetch("list", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert apt_files() == before
    listed = json.loads(out.stdout)
    assert any(o["release"] == release for o in listed["offered"]), listed["offered"][:5]
    assert (tmp_path / "apt" / "lists").is_dir() and any((tmp_path / "apt" / "lists").iterdir())


def test_a_crash_run_on_the_newest_7x_kernel(newest_7x, tmp_path):
    """The issue's own target: ext4 with fast commits, whose code moved most since 6.12.
    (btrfs and xfs on 7.3.4: the dated pages' runs.)"""
    release = newest_7x[0]
    out = subprocess.run([*POWERCUT, "crash", "--target", "ext4/fast_commit", "--case", "gen:seq1",
                          "--max-sequences", "4", "--kernel-release", release, "--quiet",
                          "--results", os.fspath(tmp_path)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (results,) = tmp_path.glob("crash-*/results.json")
    data = json.loads(results.read_text())
    assert data["known"]["kernel"] == release  # the release the guest reported
    assert data["states"], "no crash state was checked"


def test_a_target_the_kernel_lacks_is_a_skip(newest_7x, tmp_path):
    """ReiserFS left the kernel in 6.13: on 7.x a crash run of it is skipped, naming the
    module, before any run directory exists."""
    out = subprocess.run([*POWERCUT, "crash", "--target", "reiserfs", "--case", "gen:seq1",
                          "--kernel-release", newest_7x[0], "--results", os.fspath(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 77, out.stderr
    assert out.stderr.strip() == (f"powercut: skipped: target reiserfs needs kernel module "
                                  f"reiserfs (not in kernel {newest_7x[0]})")
    assert not list(tmp_path.glob("crash-*"))
