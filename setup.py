"""The compiled part of powercut: the log walker (devicemapper/_lognative*.c).

Everything else is in pyproject.toml. ``make setup`` builds the extension into the source
tree (``setup.py build_ext --inplace``), where the guest, which runs this tree over 9p,
finds it too. It is optional: without a C compiler the log is walked in Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "devicemapper._lognative",
            ["devicemapper/_lognative.c", "devicemapper/_lognative_plan.c"],
            depends=["devicemapper/_lognative.h"],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
