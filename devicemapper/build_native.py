"""Build the compiled log walker (devicemapper/_lognative*.c) into the source tree.

``make setup`` runs ``python -m devicemapper.build_native`` from the checkout's top. The
module lands next to devicemapper/native.py, where the guest, which runs this tree and
venv read-only over 9p, finds it too; nothing is compiled at run time. The build is
optional: without a C compiler and Python's headers the log is walked in Python, and this
exits 1 with one line saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
SOURCES = ["devicemapper/_lognative.c", "devicemapper/_lognative_plan.c"]
HEADERS = ["devicemapper/_lognative.h"]
FLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"]


def build() -> None:
    """Compile the extension in place (setuptools' build_ext, driven without a setup.py)."""
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    ext = Extension("devicemapper._lognative", SOURCES, depends=HEADERS,
                    extra_compile_args=FLAGS)
    dist = Distribution({"name": "powercut-lognative", "ext_modules": [ext],
                         "script_name": "build_native", "verbose": 0})
    cmd = build_ext(dist)
    cmd.inplace = True
    cmd.ensure_finalized()
    cmd.run()


def main() -> int:
    import os

    os.chdir(TOP)
    try:
        build()
    except Exception as e:  # CompileError, LinkError, missing headers: all one answer
        print(f"powercut setup: could not build devicemapper/_lognative ({e}); "
              "the log is walked in Python", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
