"""``powercut kernels``: Debian kernels and kernel sources from any suite, in a cache.

    powercut kernels list               the cached kernels, and what the archive offers
    powercut kernels fetch SPEC         a kernel into the cache (SPEC: RELEASE, a series, newest)
    powercut kernels source SERIES      a linux-source-SERIES tarball into the cache
    powercut kernels build SERIES [--patch FILE]
                                        that source built for the guest (with a patch)
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from framework.cli import print_json
from framework.core.errors import ConfigError
from framework.core.machine.archive import Archive, Offer, check_spec
from framework.core.machine.build import BuiltKernel
from framework.core.machine.kernel import cached_kernels, installed_kernels, kernel_cache

EPILOG = """\
Debian builds its newest kernels outside the stable release: in trixie-backports, sid
and experimental. powercut reads them from the Debian mirror this system already uses,
through an apt directory of its own in the kernel cache (POWERCUT_KERNEL_CACHE, else
~/.cache/powercut): the system's apt configuration and package lists are read, never
written. A fetched kernel is unpacked with its modules and config into
kernels/RELEASE/ there, and every command that boots a guest finds it with
--kernel-release RELEASE (first in /boot, then in the cache).

SPEC is a release (7.3.4+deb13-amd64), a series (7.3, 7, 6.12: the newest release in
it) or newest (the newest release of any suite, release candidates included).

examples:
  powercut kernels list
  powercut kernels fetch newest
  powercut kernels fetch 6.12            # the newest 6.12 build
  powercut crash --target ext4/fast_commit --case gen:seq1 --kernel-release 7.3.4+deb13-amd64
  powercut kernels source 7.3            # /.../sources/linux-source-7.3_VERSION/usr/src/...tar.xz
  powercut kernels build 7.3 --patch fix.patch   # prints the --kernel/--modules to boot it
"""


BUILD_HELP = """\
Build Debian's linux-source-SERIES for powercut's guest (x86_64_defconfig with
kvm_guest.config and powercut's guest.config), as shipped and, with --patch,
with the patch too; print the machine options that boot each build.
"""

BUILD_EPILOG = """\
The source is fetched into the kernel cache when it is not there, and unpacked
and built under builds/ there. A patch that does not apply fails before
anything is built. The first build of a series takes about 35 minutes on 2
cores; later builds rebuild only what the patch changed (a minute or two).
Each build is a directory builds/kernels/NAME with its bzImage and modules.

examples:
  powercut kernels build 7.3 --patch fix.patch
  powercut crash --target ext4/fast_commit --case file:workload.json \\
      --kernel .../builds/kernels/7.3-fix-0123456789ab/bzImage \\
      --modules .../builds/kernels/7.3-fix-0123456789ab
"""


def build_series(series: str, patch: str | None, *,
                 say: Callable[[str], None] = print) -> tuple[BuiltKernel, BuiltKernel | None]:
    """Debian's linux-source-SERIES built for powercut's guest in the kernel cache
    (builds/), as shipped and, with ``patch``, with it. The source is fetched when it is
    not there; a patch that does not apply fails before anything is built. The first
    build of a series takes about 35 minutes on 2 cores; later ones rebuild only what
    changed. Each build is a directory builds/kernels/NAME with its bzImage and modules."""
    from framework.core.machine.build import Patch, SourceTree
    from framework.core.machine.kernel import source_tarball

    series = check_spec(series)
    fix, name = None, ""
    if patch is not None:
        path = Path(patch)
        if not path.is_file():
            raise ConfigError(f"--patch {patch}: no such file")
        fix = Patch(f"patch-{path.name}", path.resolve(), path.name)
        name = f"{series}-{path.stem}-{fix.sha256[:12]}"  # the name given, not a link's target
    tarball = source_tarball(series) or Archive(say=say).fetch_source(series)
    tree = SourceTree(series, kernel_cache() / "builds", say=say, prefix="build",
                      tarball=tarball)
    tree.prepare([fix] if fix else [])
    if fix is not None:
        tree.check_applies(fix)  # before the first build: a patch that fails costs nothing
    base = tree.build(f"{series}-unpatched")
    if fix is None:
        return base, None
    return base, tree.build(name, fix)


def cmd_build(args: argparse.Namespace) -> int:
    """Build Debian's linux-source-SERIES for powercut's guest, as shipped and, with
    --patch, with the patch too; print the machine options that boot each build."""
    base, patched = build_series(args.series, args.patch, say=_err)
    for label, kernel in (("unpatched", base), ("patched", patched)):
        if kernel is None:
            continue
        argv = ["--kernel", str(kernel.image), "--modules", str(kernel.modules)]
        if args.json:
            print_json({"build": label, "name": kernel.name, "release": kernel.release,
                        "image": str(kernel.image), "modules": str(kernel.modules)})
        else:
            print(f"{label}: {shlex.join(argv)}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """What the cache holds and, unless --cached, what the archive offers, newest first."""
    cached = cached_kernels()
    installed = [k for k in installed_kernels() if k.has_modules]
    offers: list[Offer] = [] if args.cached else Archive(say=_err).offers()
    if not args.all:
        offers = _newest_per_series(offers)
    if args.json:
        print_json({
            "cache": str(kernel_cache()),
            "installed": [{"release": k.release, "image": str(k.image)} for k in installed],
            "cached": [{"release": k.release, "version": k.version, "suite": k.suite,
                        "directory": str(k.directory)} for k in cached],
            "offered": [{"package": o.package, "release": o.release, "version": o.version,
                         "suite": o.suite} for o in offers]})
        return 0
    print(f"installed in /boot: {', '.join(k.release for k in installed) or 'none'}")
    print(f"in the cache ({kernel_cache() / 'kernels'}): "
          + (", ".join(f"{k.release} ({k.version}, {k.suite})" for k in cached) or "none"))
    if args.cached:
        return 0
    have = {k.release for k in cached} | {k.release for k in installed}
    for kind, prefix in (("kernels", "linux-image-"), ("kernel sources", "linux-source-")):
        rows = [o for o in offers if o.package.startswith(prefix)]
        print(f"\n{kind} the archive offers" + ("" if args.all else " (newest of each series; "
                                                 "--all lists every version)") + ":")
        for suite in dict.fromkeys(o.suite for o in rows):
            print(f"  {suite}:")
            for o in (o for o in rows if o.suite == suite):
                mark = "  [have]" if o.release in have else ""
                print(f"    {o.release:<28} {o.version}{mark}")
    return 0


def _newest_per_series(offers: list[Offer]) -> list[Offer]:
    """The first (newest) offer of each package kind, series and suite."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for o in offers:
        kind = o.package.split("-")[1]
        series = ".".join(o.release.split("-")[0].split("+")[0].split("~")[0].split(".")[:2])
        if (kind, series, o.suite) not in seen:
            seen.add((kind, series, o.suite))
            out.append(o)
    return out


def cmd_fetch(args: argparse.Namespace) -> int:
    """Fetch each kernel SPEC names into the cache (already there: nothing is downloaded)."""
    archive = Archive(say=_err)  # progress on stderr, the data on stdout
    for spec in args.spec:
        kernel = archive.fetch_kernel(check_spec(spec), force=args.force)
        if args.json:
            print_json({"release": kernel.release, "version": kernel.version,
                        "suite": kernel.suite, "image": str(kernel.image),
                        "modules": str(kernel.spec().modules_root)})
        else:
            print(kernel.release)
    return 0


def cmd_source(args: argparse.Namespace) -> int:
    """Fetch the newest linux-source-SERIES into the cache; print its tarball's path."""
    tarball = Archive(say=_err).fetch_source(check_spec(args.series), force=args.force)
    print(tarball)
    return 0


def _err(line: str) -> None:
    print(line, file=sys.stderr)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "kernels", help="Debian kernels and kernel sources from any suite, fetched into a cache",
        description=__doc__.split("\n\n")[0].removeprefix("``powercut kernels``: "),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="kernels_command", metavar="VERB", required=True)
    lst = verbs.add_parser("list", help="the cached kernels and what the archive offers",
                           description=cmd_list.__doc__)
    lst.add_argument("--cached", action="store_true",
                     help="only what is installed and cached (reads no package lists)")
    lst.add_argument("--all", action="store_true",
                     help="every version the archive offers, not only the newest of each series")
    lst.add_argument("--json", action="store_true", help="as JSON")
    lst.set_defaults(func=cmd_list)
    fetch = verbs.add_parser("fetch", help="fetch kernels into the cache",
                             description=cmd_fetch.__doc__, epilog=EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    fetch.add_argument("spec", nargs="+", metavar="SPEC",
                       help="a release (7.3.4+deb13-amd64), a series (7.3, 6.12) or newest")
    fetch.add_argument("--force", action="store_true", help="fetch again even when cached")
    fetch.add_argument("--json", action="store_true", help="each kernel's paths as JSON")
    fetch.set_defaults(func=cmd_fetch)
    source = verbs.add_parser("source", help="fetch a linux-source-SERIES tarball into the cache",
                              description=cmd_source.__doc__)
    source.add_argument("series", help="the series, e.g. 7.3 or 6.12 (or newest)")
    source.add_argument("--force", action="store_true", help="fetch again even when cached")
    source.set_defaults(func=cmd_source)
    build = verbs.add_parser("build", help="build a linux-source-SERIES for the guest, with a "
                                           "patch or without", description=BUILD_HELP, epilog=BUILD_EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("series", help="the source series, e.g. 7.3 (its newest Debian version)")
    build.add_argument("--patch", metavar="FILE", help="a patch to apply (patch -p1) and build")
    build.add_argument("--json", action="store_true", help="each build's paths as JSON")
    build.set_defaults(func=cmd_build)
