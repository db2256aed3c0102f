"""The guest program: every task resolves at import, start-up stays lean, the env task."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from devicemapper.features import loaded_targets
from framework.cli import guest
from framework.core import agent
from framework.core.errors import ConfigError, DeviceMapperError
from framework.core.machine.base import project_root
from framework.core.machine.fake import FakeMachine

HEAVY = ("numpy", "scipy", "pandas", "statsmodels", "matplotlib", "rich")
IMPORTED = "import sys, {module}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"


def test_every_task_resolves_and_is_named_as_its_key() -> None:
    assert set(guest.TASKS) == {"echo", "env", "crash-record", "crash-check", "cut-oracle",
                                "cut-trial", "bench-rep", "sweep-point"}
    for name, task in guest.TASKS.check().items():
        assert task.name == name
        for kind in (task.request, task.result):
            assert callable(kind.to_dict) and callable(kind.from_dict)


def test_a_task_named_where_another_is_defined_is_an_error() -> None:
    tasks = agent.LazyTasks({"crash-check": "crashcases.crash.guest:CRASH_RECORD"})
    with pytest.raises(ConfigError, match="is not the task 'crash-check'"):
        tasks.check()


def test_the_program_started_as_the_guest_starts_it_answers() -> None:
    # In the checkout, without site-packages (python -S), as a QemuMachine starts it.
    for program in sorted(agent.SITE_FREE_PROGRAMS):
        out = subprocess.run([sys.executable, "-S", "-m", program], cwd=project_root(),
                             input='{"task": "echo", "payload": 5}', capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, (program, out.stderr)
        assert list(agent.parse_frames(out.stdout)) == [{"result": {"payload": 5}}]


def test_every_task_imports_without_site_packages_and_only_its_own_module() -> None:
    probe = ("import sys, framework.cli.guest as g; g.TASKS['crash-check']; "
             "print(' '.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-S", "-c", probe], cwd=project_root(),
                            capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert "crashcases.crash.guest" in loaded
    assert not {"crashcases.cut.guest", "crashcases.sweep.guest", "framework.bench.task"} & set(loaded)
    every = subprocess.run([sys.executable, "-S", "-c",
                            "import framework.cli.guest as g; print(len(g.TASKS.check()))"],
                           cwd=project_root(), capture_output=True, text=True, timeout=60)
    assert every.returncode == 0 and every.stdout.split() == ["8"], every.stderr


def test_a_machine_started_in_the_checkout_runs_the_guest_program_site_free() -> None:
    seen: list[str] = []

    class Checkout(FakeMachine):
        runs_from_checkout = True

    for machine in (FakeMachine(), Checkout()):
        machine.on("*", respond=lambda argv, text: (
            seen.append(" ".join(argv[1:4])) or (0, agent.frame({"result": {"payload": 1}}), "")))
        agent.perform(machine, agent.ECHO, agent.Echo(1))
        agent.perform(machine, agent.ECHO, agent.Echo(1), module="bench.crash")
    assert seen == ["-m framework.cli.guest", "-m bench.crash", "-S -m framework.cli.guest",
                    "-m bench.crash"]


def _top_level_imports(module: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", IMPORTED.format(module=module)],
                         capture_output=True, text=True, timeout=60, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", ["framework.cli.guest", "crashcases.cut.guest",
                                    "framework.cli.sweepguest"])
def test_the_guest_imports_no_heavy_library(module: str) -> None:
    # Every guest start reads its imports over 9p, often under an emulated CPU.
    assert _top_level_imports(module) & set(HEAVY) == set()


def test_the_lean_import_check_can_fire() -> None:
    assert "scipy" in _top_level_imports("framework.bench.engine")  # the host's statistics


#: Modules the crash check does not use at start; under an emulated CPU each costs tens of
#: milliseconds of every task's start (hashlib loads OpenSSL, importlib.resources
#: brings tempfile, shutil, bz2, lzma and random, ctypes.util is for find_library).
NOT_AT_CHECK_START = ("hashlib", "tomllib", "importlib.resources", "platform", "shutil",
                      "random", "tempfile", "bz2", "lzma", "ctypes.util",
                      # and the recording task's own: the workload runner, dm-delay, the recorder
                      "crashcases.execute", "devicemapper.delay", "devicemapper.logwrites")


def _imported(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(*sorted(m for m in {NOT_AT_CHECK_START!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True)
    return set(out.stdout.split())


def test_the_check_tasks_start_imports_nothing_it_does_not_use() -> None:
    assert _imported("import framework.cli.guest, crashcases.crash.guest") == set()
    # The positive control: the same probe sees one that is imported.
    assert _imported("import framework.cli.guest, crashcases.crash.guest, tomllib") == {"tomllib"}


def test_env_reports_the_kernels_dm_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("devicemapper.features.loaded_targets", lambda _runner: ["flakey", "log-writes"])
    out = io.StringIO()
    assert agent.serve(guest.TASKS, {"task": "env"}, out) == 0
    (frame,) = agent.parse_frames(out.getvalue())
    facts = guest.EnvFacts.from_dict(frame["result"])
    assert facts.dm_targets == ("flakey", "log-writes")
    assert facts.filesystems and list(facts.filesystems) == sorted(facts.filesystems)

    def broken(_runner: object) -> list[str]:
        raise DeviceMapperError("dmsetup: no device-mapper in this kernel")

    monkeypatch.setattr("devicemapper.features.loaded_targets", broken)
    assert guest.environment(guest.EnvRequest()).dm_targets == ()


def test_loaded_targets_lists_dmsetups_answer_by_name() -> None:
    fake = FakeMachine()
    fake.on("dmsetup targets", stdout="striped          v1.6.0\nflakey           v1.5.0\n"
                                      "log-writes       v1.1.0\n")
    assert loaded_targets(fake) == ["flakey", "log-writes", "striped"]
    facts = guest.EnvFacts("6.1.0", "3.11.2", 2, ("flakey",), ("ext4", "xfs"))
    assert guest.EnvFacts.from_dict(json.loads(json.dumps(facts.to_dict()))) == facts
