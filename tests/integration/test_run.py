"""``powercut run`` with a small study: steps run, controls are judged, exit status follows;
then ``powercut report`` renders it and headless Chromium opens the report."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STUDY = """
[study]
name = "tiny"
description = "one honest step, one positive control that fires, power cuts and a bench"

[[step]]
command = "crash"
targets = ["ext4/ordered"]
options = { case = "hand:append-fdatasync", quiet = true }

[[step]]
command = "crash"
targets = ["ext4/nobarrier"]
options = { case = "hand:write-fsync-rename", quiet = true }
expect = "fail"

[[step]]
command = "cut"
targets = ["ext2", "ext4/ordered"]
options = { case = "random:60", trials = 2, quiet = true }

[[step]]
command = "bench"
targets = ["ext2", "ext4/ordered"]
options = { workload = "fsmark", reps = 2, seed = 3, quiet = true }
"""


def run_study(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    study = tmp_path / "study.toml"
    study.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "framework.cli", "run", str(study), "--results", str(tmp_path / "r"),
         "--db", str(tmp_path / "db.sqlite")], capture_output=True, text=True, timeout=1200)




def test_a_control_that_stays_quiet_fails_the_study(tmp_path):
    steps = STUDY.split("[[step]]")
    quiet_control = steps[2].replace('targets = ["ext4/nobarrier"]', 'targets = ["ext4/journal"]')
    out = run_study(tmp_path, steps[0] + "[[step]]" + quiet_control)
    assert out.returncode == 1
    assert "UNEXPECTED" in out.stdout


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


def test_a_study_runs_its_steps_judges_controls_and_its_report_opens_in_chromium(
        tmp_path: Path) -> None:
    study_dir = tmp_path
    out = run_study(study_dir, STUDY)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "powercut crash --target ext4/ordered --case hand:append-fdatasync" in out.stdout
    assert out.stdout.count("as expected") == 5  # crash, control, two cut runs, bench
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (Debian package chromium; 'make setup' installs it)")
    html = tmp_path / "report.html"
    made = subprocess.run([sys.executable, "-m", "framework.cli", "report", "latest", "--db",
                           str(study_dir / "db.sqlite"), "-o", str(html)],
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
    # The trade-off, both recovery figures, the in-flight scatter and the throughput bars.
    assert {"fig-trade-off", "fig-cut", "fig-crash-times", "fig-in-flight",
            "fig-throughput"} <= set(images), dom.stdout[-2000:]
    assert all(not size.startswith("0x") for size in images.values()), images
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if re.search(r"error|uncaught", line, re.I)], console
    shot = tmp_path / "report.png"
    subprocess.run([*browser, f"--screenshot={shot}", html.as_uri()], capture_output=True,
                   timeout=120, check=True)
    assert shot.stat().st_size > 50_000  # a page of figures, not a blank one
