"""The standalone shell reproducer: the state's image under a snapshot, recovered and checked."""

from __future__ import annotations

import gzip
import hashlib
import logging
import shlex
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

from crashcases.check import fsck_first
from crashcases.crash.plan import disk_sizes, timeouts_for
from crashcases.crash.rundir import load_state, write_image
from crashcases.findings.checks import Check, CheckBuilder, check_functions, finding_lines
from crashcases.findings.export import (
    ROOT_VAR,
    DataSource,
    ExportError,
    ExportState,
    MiB,
    recorded_data,
)
from devicemapper.logformat import LogReader
from framework.core import rundir
from framework.core.files import replacing
from recovery.filesystems import adapter_for
from recovery.mount import mount_argv

#: Exit statuses of the script.
EXIT_PASSED, EXIT_REPRODUCED, EXIT_CANNOT_RUN = 0, 1, 2
#: Placeholders for the device and the mountpoint in commands built for the script.
DEV, MNT = "@DEV@", "@MNT@"

log = logging.getLogger(__name__)


def _shell_argv(argv: Sequence[str]) -> str:
    """An argv with DEV and MNT placeholders as shell words."""
    out = []
    for arg in argv:
        if arg == DEV:
            out.append('"$dev"')
        elif arg == MNT:
            out.append('"$mnt"')
        else:
            out.append(shlex.quote(arg))
    return " ".join(out)


#: Programs every script runs, with the Debian package that ships each.
SCRIPT_TOOLS = {
    "dmsetup": "dmsetup", "losetup": "mount", "mount": "mount", "umount": "mount",
    "blockdev": "util-linux", "gzip": "gzip", "sha256sum": "coreutils", "timeout": "coreutils",
    "stat": "coreutils", "dd": "coreutils", "truncate": "coreutils", "mktemp": "coreutils",
    "head": "coreutils",
}
EXTRA_TOOL_PACKAGES = {"getfattr": "attr", "find": "findutils", "readlink": "coreutils"}


def image_file_for(script: Path) -> Path:
    """Where the state's image goes beside ``script``: repro.sh -> repro.img.gz."""
    stem = script.stem if script.suffix == ".sh" else script.name
    return script.with_name(stem + ".img.gz")


def script_text(state: ExportState, checks: Sequence[Check], *, image: str, image_sha256: str,
                size_bytes: int) -> str:
    """The standalone reproducer for ``state``, reading ``image`` from beside itself."""
    target = state.target
    adapter = adapter_for(target.fstype)
    timeouts = timeouts_for(state.plan.check_timeout_s)
    tools = dict(SCRIPT_TOOLS)
    packages = {t.binary: t.package for t in adapter.tools}
    fsck = adapter.fsck_argv(DEV, repair=False)
    repair = adapter.fsck_argv(DEV, repair=True)
    replay = adapter.journal_replay_argv(DEV)
    for argv in (fsck, repair, replay or []):
        if argv:
            tools.setdefault(argv[0], packages.get(argv[0], "the filesystem's tools"))
    for check in checks:
        for tool in check.tools:
            tools.setdefault(tool, EXTRA_TOOL_PACKAGES.get(tool, tool))
    tool_words = " ".join(f"{t}:{p}" for t, p in tools.items())
    early = fsck_first(target)
    mount = _shell_argv(mount_argv(target, DEV, MNT))
    lines = [
        "#!/bin/sh",
        f"# powercut crash reproducer: state {state.key} of {state.run_dir}",
        f"#   target {target.name}: {target.fstype}, mkfs options "
        f"{shlex.join(target.mkfs_options) or '(none)'}, mount options "
        f"{','.join(adapter.mount_options(target)) or '(none)'}",
        f"#   workload {state.plan.case} (seed {state.plan.seed}), "
        f"{state.outcome.value} after {state.last_mark or 'mkfs'}"
        + (f" ({state.durability_words(state.last_mark)})" if state.last_mark else ""),
        f"#   variant {state.variant.spec} at log entry {state.point}",
        "# What powercut found:",
        *finding_lines(state),
        "#",
        f"# Run as root beside {image} (the state's disk image, gzip'ed):",
        "#   sh THIS_SCRIPT",
        "# The image is never written: it is attached read-only to a loop device",
        "# under a non-persistent dm-snapshot whose COW is a temporary file, so",
        "# journal replay at mount and fsck write only there. Nothing but the loop",
        "# and dm devices it creates is touched; all of it goes away at exit.",
        "# Exit status: 1 the finding reproduces (a FAIL line), 0 it does not,",
        f"# {EXIT_CANNOT_RUN} the script cannot run here.",
        "set -u",
        "export LC_ALL=C",
        'here=$(cd "$(dirname "$0")" && pwd)',
        f'image="$here"/{shlex.quote(image)}',
        f"image_sha256={image_sha256}",
        f"size_bytes={size_bytes}",
        f"cow_bytes={size_bytes + 16 * MiB}",
        f"block_bytes={state.oracle.block_bytes}",
        f"mount_timeout_s={max(1, round(timeouts.mount_s))}",
        f"fsck_timeout_s={max(1, round(timeouts.fsck_s))}",
        f"umount_timeout_s={max(1, round(timeouts.umount_s))}",
        "",
        f"die() {{ echo \"$0: $*\" >&2; exit {EXIT_CANNOT_RUN}; }}",
        '[ "$(id -u)" = 0 ] || die "must run as root: it creates loop and device-mapper devices"',
        "missing=",
        f"for pair in {tool_words}; do",
        '\tcommand -v "${pair%%:*}" > /dev/null 2>&1 || missing="$missing ${pair%%:*} (package ${pair#*:})"',
        "done",
        '[ -z "$missing" ] || die "missing tools:$missing"',
        '[ -f "$image" ] || die "$image: the state image is not beside the script"',
        '[ "$(sha256sum < "$image" | cut -d" " -f1)" = "$image_sha256" ] ||',
        '\tdie "$image: not the image this script was exported with (sha256 differs)"',
        # No udev (a minimal guest or container): libdevmapper makes the nodes itself.
        "[ -S /run/udev/control ] || export DM_DISABLE_UDEV=1",
        "",
        'work=$(mktemp -d "${TMPDIR:-/tmp}/powercut-repro.XXXXXX") || die "mktemp failed"',
        # The shell's pid keeps two runs apart; the rest names the state, so that the
        # same state always exports the same script.
        f"dm_name=powercut-repro-$$-{hashlib.sha256(state.key.encode()).hexdigest()[:6]}",
        "dev=/dev/mapper/$dm_name",
        'mnt="$work/mnt"',
        f"{ROOT_VAR}=$mnt",
        'pc_scratch="$work/scratch"',
        "origin= cow= mounted=",
        "cleanup() {",
        '\t[ -z "$mounted" ] || umount "$mnt" 2> /dev/null || umount -l "$mnt" 2> /dev/null',
        '\t[ ! -b "$dev" ] || dmsetup remove "$dm_name" 2> /dev/null ||',
        '\t\t{ sleep 1; dmsetup remove "$dm_name"; }',
        '\t[ -z "$cow" ] || losetup -d "$cow"',
        '\t[ -z "$origin" ] || losetup -d "$origin"',
        '\trm -rf "$work"',
        "}",
        "trap cleanup EXIT",
        f"trap 'exit {EXIT_CANNOT_RUN}' HUP INT TERM",
        "",
        "# The state, as a sparse file; read-only under the snapshot.",
        'gzip -dc "$image" | dd of="$work/state.img" bs=1M conv=sparse iflag=fullblock '
        'status=none || die "cannot unpack $image"',
        'truncate -s ">$size_bytes" "$work/state.img"',
        'truncate -s "$cow_bytes" "$work/cow.img"',
        'origin=$(losetup --find --show --read-only "$work/state.img") || die "losetup of the image failed"',
        'cow=$(losetup --find --show "$work/cow.img") || die "losetup of the COW file failed"',
        'sectors=$(blockdev --getsz "$origin")',
        # N: not persistent (the COW vanishes with the device); 8-sector chunks.
        'dmsetup create "$dm_name" --table "0 $sectors snapshot $origin $cow N 8" ||',
        '\tdie "dmsetup create of the snapshot failed (is the dm-snapshot module available?)"',
        '[ -b "$dev" ] || die "$dev did not appear"',
        'mkdir "$mnt"',
        "",
        check_functions(checks, state.oracle.block_bytes),
        "",
        "# Run a checker on the snapshot; print its last lines when it is not clean.",
        "pc_fsck() {",
        '\tpc_what=$1; shift',
        '\ttimeout -k 10 "$fsck_timeout_s" "$@" > "$work/checker.out" 2>&1',
        "\tpc_status=$?",
        "\tif [ $pc_status = 124 ]; then",
        '\t\tpc_fail "$pc_what" "did not finish within $fsck_timeout_s s (hang)"',
        "\t\texit 1",
        "\tfi",
        '\t[ $pc_status = 0 ] || tail -n 5 "$work/checker.out" | sed "s/^/    /"',
        "\treturn $pc_status",
        "}",
        "",
    ]
    if early:
        lines += [
            "# Recovery for this target is the checker's, before mount, as at boot",
            "# (no journal, or a kernel that does not replay it).",
        ]
        if replay:
            lines += [
                f"pc_fsck 'journal replay by the checker' {_shell_argv(replay)}",
                'echo "note: journal replay by the checker: exit $pc_status"',
            ]
        lines += [
            f"if pc_fsck 'read-only fsck before mount' {_shell_argv(fsck)}; then",
            "\tpc_ok 'read-only fsck before mount is clean'",
            "else",
            ("\tpc_fail 'read-only fsck before mount is clean' \"exit $pc_status\""
             if target.journalled else
             '\techo "note: read-only fsck before mount found errors (exit $pc_status): '
             'repairing, as boot would"'),
            f"\tpc_fsck 'fsck repair' {_shell_argv(repair)}",
            '\techo "note: fsck repair: exit $pc_status"',
            "fi",
        ]
    lines += [
        f"timeout -k 10 \"$mount_timeout_s\" {mount} > \"$work/mount.out\" 2>&1",
        "pc_status=$?",
        "if [ $pc_status != 0 ]; then",
        "\tif [ $pc_status = 124 ]; then",
        "\t\tpc_fail 'the state mounts' \"mount did not finish within $mount_timeout_s s (hang)\"",
        "\telse",
        "\t\tpc_fail 'the state mounts' \"$(tail -n 2 \"$work/mount.out\" | tr '\\n' ' ')\"",
        "\tfi",
        '\techo "reproduced: $0"',
        "\texit 1",
        "fi",
        "mounted=1",
        "pc_ok 'the state mounts'",
        "",
        "# The promises powercut found broken.",
        *(c.render() for c in checks),
        "",
        'timeout -k 10 "$umount_timeout_s" umount "$mnt" || { pc_fail \'the state unmounts\'; exit 1; }',
        "mounted=",
        f"if pc_fsck 'read-only fsck after mount' {_shell_argv(fsck)}; then",
        "\tpc_ok 'read-only fsck after mount is clean'",
        "else",
        "\tpc_fail 'read-only fsck after mount is clean' \"exit $pc_status\"",
        "fi",
        "",
        "if [ $pc_failed = 1 ]; then",
        '\techo "reproduced: $0"',
        "\texit 1",
        "fi",
        'echo "not reproduced: every check passed"',
        "exit 0",
        "",
    ]
    return "\n".join(lines)


def build_checks(state: ExportState, data: DataSource, *, verify: bool) -> list[Check]:
    return CheckBuilder(state, data, verify=verify).checks()


def _fresh(path: Path, force: bool) -> None:
    if path.exists() and not force:
        raise ExportError(f"{path}: already exists (--force replaces it)")
    if path.exists() and path.is_dir():
        raise ExportError(f"{path}: is a directory")
    if not path.parent.is_dir():
        raise ExportError(f"{path}: directory {path.parent} does not exist")


def _state_image(state: ExportState, out: Path) -> None:
    """Put the state's gzip'ed image at ``out``: the run's copy, or rebuilt from the log."""
    kept = state.run_dir / rundir.state_image(state.key)
    if kept.is_file():
        try:  # read through once: a damaged image is an error here, not in the script
            with gzip.open(kept, "rb") as f:
                while f.read(1 << 20):
                    pass
        except (OSError, EOFError, zlib.error) as exc:
            raise ExportError(f"{kept}: the state's kept image is damaged ({exc})") from None
        shutil.copyfile(kept, out)
        return
    log_path = rundir.crash_log(state.run_dir)
    if not log_path.is_file():
        raise ExportError(f"{state.run_dir}: log.img is gone, and the run kept no image of "
                          f"{state.key}: nothing to rebuild it from")
    plan, crash_state = load_state(state.run_dir, state.key)
    with LogReader(log_path) as reader:
        entries = list(reader)
    size = disk_sizes(state.target, plan.data_mib)["data"]
    write_image(log_path, entries, crash_state, out, size)


def write_script(state: ExportState, out: Path, *, force: bool = False) -> tuple[Path, Path]:
    """Write the standalone reproducer ``out`` and the image beside it; returns both paths."""
    if state.target.needs_journal_disk:
        raise ExportError(f"state {state.key!r}: {state.target.name} keeps its journal on a "
                          "second disk, and the script recovers one disk's image; --fstests "
                          "writes a test that records and replays both")
    out = out.resolve()
    image = image_file_for(out)
    _fresh(out, force)
    _fresh(image, force)
    kept = state.run_dir / rundir.state_image(state.key)
    if not kept.is_file() and not rundir.crash_log(state.run_dir).is_file():
        raise ExportError(f"{state.run_dir}: log.img is gone, and the run kept no image of "
                          f"{state.key}: nothing to rebuild it from")
    checks = build_checks(state, recorded_data(state.workload.seed), verify=True)
    size = disk_sizes(state.target, state.plan.data_mib)["data"]
    try:
        # The image takes its place first, then the script that names it.
        with replacing(out, mode=0o755) as tmp_script, replacing(image) as tmp_image:
            _state_image(state, tmp_image)
            with gzip.open(tmp_image, "rb") as f:
                f.read(1)  # a truncated or foreign file fails here, not in the script
            digest = hashlib.sha256(tmp_image.read_bytes()).hexdigest()
            tmp_script.write_text(script_text(state, checks, image=image.name,
                                              image_sha256=digest, size_bytes=size))
    except (OSError, EOFError) as exc:
        raise ExportError(f"{out}: cannot write the reproducer: {exc}") from exc
    return out, image


# -- the fstests test -----------------------------------------------------------


