# SPDX-License-Identifier: Apache-2.0
"""pyproject.toml says everything but one thing: a wheel that carries libsluice.so is for one
platform (linux_x86_64, ...) yet any Python 3 (ctypes, no extension module): py3-none-PLATFORM.
Without the library it is a pure py3-none-any wheel."""

import glob
import os

from setuptools import setup

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # no wheel package: sdists and plain installs still work
    bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
CARRIES_LIB = bool(glob.glob(os.path.join(HERE, "sluice", "libsluice.so*")))
cmdclass = {}
if bdist_wheel is not None and CARRIES_LIB:
    class PlatformWheel(bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = PlatformWheel

setup(cmdclass=cmdclass)
