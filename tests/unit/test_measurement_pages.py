"""A dated measurement page changes after its first commit only by an appended erratum.

A dated page (docs/measurements/YYYY-MM-DD-topic.md) says what was measured,
when, on what and with which commit; its figures are true of that moment. So
the page as first committed stays, byte for byte, as the start of the page, and
whatever is learnt later is appended in sections headed ``## Erratum
(YYYY-MM-DD)`` (docs/measurements/index.md states the rule). A page renamed
keeps its first text: the rule follows it through git's rename detection.

The rule is held wherever git history is present; an exported tree or a shallow
clone has no first versions to compare with, and the test says so.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = "docs/measurements"

#: A dated page: its name starts with the date its figures were taken.
DATED = re.compile(r"^docs/measurements/(\d{4}-\d{2}-\d{2})-[^/]+\.md$")
#: The one heading an appended section may have.
ERRATUM = re.compile(r"^## Erratum \((\d{4}-\d{2}-\d{2})\)$")
#: A heading of the page's own level or above (a level-3 heading inside an erratum is its own).
TOP_HEADING = re.compile(r"^#{1,2}(\s|$)")
FENCE = re.compile(r"^\s*(```|~~~)")
COMMIT = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")


def git_env() -> dict[str, str]:
    # Without GIT_DIR and the like, which a git hook sets: they would point every
    # command, those on the repositories made here too, at the hook's repository.
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", os.fspath(repo), *args], input=stdin,
                          capture_output=True, check=True, env=git_env()).stdout


def first_versions(repo: Path) -> dict[str, tuple[str, str]]:
    """Each dated page in HEAD's history: the commit that added its text, and its path there.

    One ``git log`` over the pages' folder, oldest first: an addition starts a page, a
    removal ends it, a rename carries its first version to the new name.
    """
    log = git(repo, "log", "--reverse", "--topo-order", "--format=%H", "--name-status", "-M",
              "--diff-filter=ADR", "--", PAGES).decode()
    first: dict[str, tuple[str, str]] = {}
    commit = ""
    for line in log.splitlines():
        if COMMIT.match(line):
            commit = line
            continue
        status, *paths = line.split("\t")
        if status == "A":
            first[paths[0]] = (commit, paths[0])
        elif status == "D":
            first.pop(paths[0], None)
        elif status.startswith("R"):
            old, new = paths
            first[new] = first.pop(old, (commit, new))
    return {path: origin for path, origin in first.items() if DATED.match(path)}


def read_blobs(repo: Path, revisions: list[str]) -> list[bytes]:
    """The files named ``COMMIT:PATH``, in one ``git cat-file --batch``."""
    out = git(repo, "cat-file", "--batch", stdin="".join(f"{r}\n" for r in revisions).encode())
    blobs, at = [], 0
    for revision in revisions:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        if header[-1] == b"missing":
            raise AssertionError(f"git has no {revision}")
        size = int(header[2])
        blobs.append(out[end + 1:end + 1 + size])
        at = end + 1 + size + 1
    return blobs


def appended_problem(page_date: str, first: str, now: str) -> str | None:
    """What is wrong with the page now against its first version, or None."""
    if not now.startswith(first):
        old, new = first.splitlines(), now.splitlines()
        at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        return f"its first version is no longer the start of the page (they differ at line {at + 1})"
    rest = now[len(first):].splitlines()
    if not rest:
        return None
    body = [line for line in rest if line.strip()]
    if not body or not ERRATUM.match(body[0]):
        return "text appended without an '## Erratum (YYYY-MM-DD)' heading before it"
    fenced = False
    for line in body:
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not TOP_HEADING.match(line):
            continue
        heading = ERRATUM.match(line)
        if not heading:
            return f"a heading appended that is not an erratum's: {line!r}"
        try:
            day = datetime.date.fromisoformat(heading[1])
        except ValueError:
            return f"an erratum dated with no real date: {line!r}"
        if day < datetime.date.fromisoformat(page_date):
            return f"an erratum dated before the page: {line!r}"
    return None


def dated_page_problems(repo: Path) -> list[str]:
    """One line for each dated page that changed other than by an appended erratum."""
    first = first_versions(repo)
    paths = sorted(first)
    blobs = read_blobs(repo, [f"{added_in}:{old}" for added_in, old in (first[p] for p in paths)])
    problems: list[str] = []
    for path, blob in zip(paths, blobs, strict=True):
        added_in, old = first[path]
        added = added_in[:7] + (f" as {old}" if old != path else "")
        page = repo / path
        if not page.exists():
            problems.append(f"{path} (added in {added}): removed")
            continue
        date = DATED.match(path)
        assert date is not None
        problem = appended_problem(date[1], blob.decode(), page.read_bytes().decode())
        if problem:
            problems.append(f"{path} (added in {added}): {problem}")
    return problems


def history_or_skip(repo: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: no first versions of the measurement pages to compare")
    probe = subprocess.run(["git", "-C", os.fspath(repo), "rev-parse",
                            "--is-shallow-repository"], capture_output=True, text=True,
                           env=git_env())
    if probe.returncode != 0:
        said = probe.stderr.strip().splitlines()
        pytest.skip(f"no git history here (an exported tree?): {said[-1] if said else 'git failed'}")
    if probe.stdout.strip() == "true":
        pytest.skip("a shallow clone: the commits that added the measurement pages may be missing")


def test_dated_measurement_pages_change_only_by_appended_errata() -> None:
    history_or_skip(ROOT)
    problems = dated_page_problems(ROOT)
    assert not problems, ("dated measurement pages changed other than by an appended "
                          "'## Erratum (YYYY-MM-DD)' section:\n" + "\n".join(problems))


# Positive and negative controls, on a repository made here.

PAGE = "docs/measurements/2026-01-02-speed.md"
FIRST = "# 2026-01-02: Speed\n\n- **Commit**: `abc1234`.\n\nThe replay took 0.5 s.\n\nThat is all.\n"


def repository(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / PAGES).mkdir(parents=True)
    git(repo, "init", "-q")
    commit(repo, {PAGE: FIRST, "docs/measurements/index.md": "# Measurements\n"})
    return repo


def commit(repo: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=powercut", "-c", "user.email=powercut@example.org",
        "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m",
        "pages")


def test_a_page_edited_in_the_middle_fires(tmp_path: Path) -> None:
    repo = repository(tmp_path)
    commit(repo, {PAGE: FIRST.replace("0.5 s", "0.4 s")})
    problems = dated_page_problems(repo)
    assert len(problems) == 1
    assert PAGE in problems[0] and "differ at line 5" in problems[0]


def test_an_edit_not_yet_committed_fires(tmp_path: Path) -> None:
    repo = repository(tmp_path)
    (repo / PAGE).write_text(FIRST.replace("`abc1234`", "`def5678`"))
    assert len(dated_page_problems(repo)) == 1


def test_an_appended_erratum_passes(tmp_path: Path) -> None:
    repo = repository(tmp_path)
    erratum = ("\n## Erratum (2026-01-03)\n\nThe replay took 0.4 s, not 0.5 s:\n\n"
               "```sh\n# the command that showed it\npowercut log replay LOG\n```\n\n"
               "### A second run\n\n0.41 s.\n")
    commit(repo, {PAGE: FIRST + erratum})
    assert dated_page_problems(repo) == []
    (repo / PAGE).write_text(FIRST + erratum + "\n## Erratum (2026-01-05)\n\nA third run: 0.42 s.\n")
    assert dated_page_problems(repo) == []


def test_text_appended_without_an_erratum_heading_fires(tmp_path: Path) -> None:
    repo = repository(tmp_path)
    page = repo / PAGE
    page.write_text(FIRST + "\nA second run took 0.4 s.\n")
    assert "without an '## Erratum" in dated_page_problems(repo)[0]
    page.write_text(FIRST + "\n## Erratum (2026-01-03)\n\nA run.\n\n## More runs\n\n0.4 s.\n")
    assert "not an erratum's" in dated_page_problems(repo)[0]
    page.write_text(FIRST + "\n## Erratum (2026-01-01)\n\nA run.\n")
    assert "before the page" in dated_page_problems(repo)[0]
    page.write_text(FIRST + "\n")
    assert "without an '## Erratum" in dated_page_problems(repo)[0]


def test_a_page_renamed_and_edited_fires_and_one_removed_fires(tmp_path: Path) -> None:
    repo = repository(tmp_path)
    renamed = "docs/measurements/2026-01-02-replay-speed.md"
    git(repo, "mv", PAGE, renamed)
    commit(repo, {renamed: FIRST.replace("That is all.", "That is all, and more.")})
    problems = dated_page_problems(repo)
    assert len(problems) == 1 and "added in" in problems[0] and f"as {PAGE}" in problems[0]
    os.remove(repo / renamed)
    assert dated_page_problems(repo)[0].endswith("removed")


def test_no_history_is_a_skip_that_says_why(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    with pytest.raises(pytest.skip.Exception, match="no git history"):
        history_or_skip(tmp_path)
