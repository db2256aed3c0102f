"""Console framing: recorded guest transcripts, and a real local shell."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pexpect
import pytest

from framework.core.errors import ConsoleTimeout, MachineError
from framework.core.machine.console import (
    ConsoleRunner,
    command_script,
    frame_line,
    marker_pattern,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "console"


def tokens(prefix: str = "feed"):
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter):08x}"


def replay(transcript: bytes, tmp_path: Path) -> ConsoleRunner:
    """A console whose 'guest' is a recorded transcript played back by cat."""
    path = tmp_path / "transcript.log"
    path.write_bytes(transcript)
    child = pexpect.spawn("cat", [str(path)], echo=False, timeout=5)
    return ConsoleRunner(child, tmp_path / "x", token_factory=tokens())


def test_recorded_guest_transcript_yields_each_status(tmp_path):
    # Recorded from a real guest: command 1 printed a fake marker with status 0
    # and binary noise to stdout, then exited 3; the console only carried markers.
    runner = replay((FIXTURES / "guest-two-commands.log").read_bytes(), tmp_path)
    first = runner.run(["sh", "-c", "exit 3"], ok_status=None, timeout_s=5)
    second = runner.run(["uname", "-r"], timeout_s=5)
    assert (first.status, second.status) == (3, 0)


def test_echoed_frame_line_and_stale_markers_do_not_match(tmp_path):
    script = tmp_path / "x" / "c1.sh"
    echo = frame_line(script, "feed00000001").encode()  # what tty echo shows
    transcript = (
        echo
        + b"guest# __PC_feed00000009_0__\r\n"  # a marker of another command
        + b"\x00\xff\x1b[2J__PC_feed00000001_x__\r\n"  # malformed status
        + b"\r\n__PC_feed00000001_42__\r\n"
    )
    runner = replay(transcript, tmp_path)
    assert runner.run(["true"], ok_status=None, timeout_s=5).status == 42
    assert not marker_pattern("feed00000001").search(echo)


def test_transcript_without_marker_is_a_clear_error(tmp_path):
    runner = replay(b"[   12.1] Kernel panic - not syncing\r\n", tmp_path)
    with pytest.raises(MachineError, match="guest went away"):
        runner.run(["true"], timeout_s=5)


def test_command_script_redirects_and_quotes(tmp_path):
    text = command_script(
        ("printf", "%s\n", "a b", "$HOME"),
        stdin=None,
        stdout=tmp_path / "o",
        stderr=tmp_path / "e",
        env={"X": "1 2"},
        cwd="/srv",
    )
    assert "cd /srv" in text
    assert "exec env 'X=1 2' printf '%s\n' 'a b' '$HOME' </dev/null" in text


@pytest.fixture
def local_shell(tmp_path):
    """The console protocol against a real interactive shell on this host."""
    if shutil.which("sh") is None:
        pytest.skip("no sh")
    child = pexpect.spawn("sh", ["-i"], echo=True, timeout=10, env={"PS1": "guest# ", "PATH": "/usr/bin:/bin"})
    runner = ConsoleRunner(child, tmp_path / "x")
    runner.sync(timeout_s=10)
    yield runner
    child.close(force=True)


def test_local_shell_round_trips_status_output_and_noise(local_shell):
    noise = "guest# $ __PC_0_0__ \\000\\377\\033[2J done"
    res = local_shell.run(["sh", "-c", f"printf '{noise}'; printf 'err\\n' >&2; exit 7"],
                          ok_status=None, timeout_s=10)
    assert res.status == 7
    assert res.stdout.encode("utf-8", "surrogateescape").startswith(b"guest# $ __PC_0_0__ \x00")
    assert res.stdout.endswith("\x1b[2J done")
    assert res.stderr == "err\n"


def test_local_shell_passes_stdin_env_and_long_argv(local_shell):
    long_arg = "x" * 10000  # longer than a tty line may be
    res = local_shell.run(["sh", "-c", 'cat; printf "%s" "$V"; printf "%s" "$1" | wc -c', "_", long_arg],
                          input="in\n", env={"V": "v1"}, timeout_s=10)
    assert res.stdout.split() == ["in", "v110000"]


def test_local_shell_timeout(local_shell):
    with pytest.raises(ConsoleTimeout, match="timed out after 0.5 s: sleep 5"):
        local_shell.run(["sleep", "5"], timeout_s=0.5)
