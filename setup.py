"""Only the compiled part of the package; everything else is declared in pyproject.toml.

The native face (shim/native/src/wooly_native.c) is a plain C shared library that becomes the
process's libcuda.so.1 under ``wooly run``; it is compiled here so that ``pip install .`` ships it.
Without a C compiler the install still succeeds: the face compiles it at first use, or says why
it cannot (shim/native/build.py).
"""

import importlib.util
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _native_build_module():
    spec = importlib.util.spec_from_file_location(
        "_wooly_native_build", os.path.join(HERE, "shim", "native", "build.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class BuildNative(build_ext):
    """build_ext for a non-Python shared library; a failed compile is a warning, not a failed install."""

    def get_export_symbols(self, ext):  # not a Python module: no PyInit_ symbol
        return []

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(
                f"warning: the wooly native library was not built ({exc}); it is compiled at first use", file=sys.stderr
            )
            return
        stamp = self.get_ext_fullpath(ext.name) + ".srchash"
        with open(stamp, "w") as f:
            f.write(_native_build_module()._source_hash())


setup(
    ext_modules=[
        Extension(
            "shim.native._wooly_native",
            sources=["shim/native/src/wooly_native.c", "shim/native/src/export_tables.c"],
            depends=["shim/native/src/exports.h", "shim/native/src/native.h"],
            extra_compile_args=["-O1", "-g0"],
            extra_link_args=["-Wl,-soname,libcuda.so.1"],
            libraries=["pthread", "dl"],
        ),
        Extension(  # NOTE [nvrtc stand-in] (shim/native/src/nvrtc_standin.c)
            "shim.native._wooly_nvrtc",
            sources=["shim/native/src/nvrtc_standin.c"],
            extra_compile_args=["-O1", "-g0"],
            extra_link_args=["-Wl,-soname,libnvrtc.so.12"],
            libraries=["pthread", "dl"],
        ),
    ],
    cmdclass={"build_ext": BuildNative},
)
