"""A user target from --targets-file goes through crash, cut, bench and run like a built-in one,
and the study's report opens in headless Chromium.

The target is ext4 with data=journal under a name of its own: the guest must
mount it with the user's options (it gets the whole target, not a name) and
check it with exactly the rules of ext4/journal (derived from its options).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from framework.core.store import RunStatus, Store

TARGETS = """
[targets."mine"]
fstype = "ext4"
mount_options = ["data=journal", "commit=1"]
description = "ext4 data=journal under a user's name"
"""

STUDY = """
[study]
name = "user-target"
description = "every command on one user target"
targets_file = "mine.toml"

[[step]]
command = "crash"
targets = ["mine"]
options = { case = "hand:append-fdatasync", quiet = true }

[[step]]
command = "cut"
targets = ["mine"]
options = { case = "random:40", trials = 1, quiet = true }

[[step]]
command = "bench"
targets = ["mine"]
options = { workload = "fsmark", reps = 2, seed = 1, quiet = true }
"""

POWERCUT = [sys.executable, "-m", "framework.cli"]

# Appended to a copy of the report: once the page has loaded, list every image and whether
# the browser decoded it (naturalWidth) into a <pre> that --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", () => {
  const rows = [...document.images].map(i => `${i.id || i.className}=${i.naturalWidth}x${i.naturalHeight}`);
  const pre = document.createElement("pre"); pre.id = "probe";
  pre.textContent = "IMAGES " + rows.join(" ");
  document.body.appendChild(pre);
});
</script>"""




def test_a_study_runs_crash_cut_and_bench_on_a_user_target_and_recheck_needs_no_file(
        tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(TARGETS)
    (tmp_path / "study.toml").write_text(STUDY)
    db = tmp_path / "db.sqlite"
    out = subprocess.run([*POWERCUT, "run", str(tmp_path / "study.toml"), "--results",
                          str(tmp_path / "r"), "--db", str(db)],
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("as expected") == 3
    assert re.search(r"^report: .*/study-[^/]+/report\.html$", out.stdout, re.M)
    with Store(db) as store:
        (study,) = [r for r in store.runs() if r.kind == "study"]
        runs = store.children(study.id)  # the study's steps
        assert [r.study.split()[0] for r in runs] == ["crash", "cut", "bench"]
        for run in runs:
            assert run.status is RunStatus.FINISHED
            config = store.targets(run.id)["mine"]
            assert config["mount_options"] == ["data=journal", "commit=1"]
        # The guest mounted the user's options, not a built-in target's.
        assert "data=journal" in store.targets(runs[2].id)["mine"]["applied_mount_options"]
    # The crash run keeps the definition, so its reproducer needs no targets file.
    (run_dir,) = (tmp_path / "r").glob("crash-*")
    plan = json.loads((run_dir / "plan.json").read_text())
    assert [t["name"] for t in plan["user_targets"]] == ["mine"]
    (tmp_path / "mine.toml").unlink()
    last = json.loads((run_dir / "results.json").read_text())["states"][-1]["key"]
    again = subprocess.run([*POWERCUT, "recheck", str(run_dir), last],
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.startswith(f"{last}: ok")
    report_opens_in_chromium(db, tmp_path)


def report_opens_in_chromium(db: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (Debian package chromium; 'make setup' installs it)")
    html = tmp_path / "report.html"
    made = subprocess.run([sys.executable, "-m", "framework.cli", "report", "latest", "--db",
                           str(db), "-o", str(html)],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert f"report: {html}" in made.stdout
    text = html.read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", PROBE + "</body>"))
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
               "--v=0", "--window-size=1280,3000"]
    dom = subprocess.run([*browser, "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=120)
    images = dict(re.findall(r"(\S+)=(\d+x\d+)", dom.stdout.split("IMAGES", 1)[1]))
    # The trade-off, both recovery figures and the throughput bars.
    assert {"fig-trade-off", "fig-cut", "fig-crash-times", "fig-throughput"} <= set(images), (
        dom.stdout[-2000:])
    assert all(not size.startswith("0x") for size in images.values()), images
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if re.search(r"error|uncaught", line, re.I)], console
    shot = tmp_path / "report.png"
    subprocess.run([*browser, f"--screenshot={shot}", html.as_uri()], capture_output=True,
                   timeout=120, check=True)
    assert shot.stat().st_size > 50_000  # a page of figures, not a blank one
