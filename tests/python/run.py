# SPDX-License-Identifier: Apache-2.0
"""Run the Python package's tests with pytest (`python3 -m pytest` with meson's exit codes).

Exit 77 (skipped) when pytest or numpy is missing, or when SLUICE_LIBRARY cannot be loaded into
this interpreter (a sanitizer build's library needs the sanitizer runtime preloaded), or, with
a first argument --needs VAR, when the environment has no VAR (an optional peer).
"""

import os
import subprocess
import sys

SKIP = 77


def main():
    args = sys.argv[1:]
    if args[:1] == ["--needs"]:
        if not os.environ.get(args[1]):
            print("SKIP: %s is not set" % args[1])
            return SKIP
        args = args[2:]
    for mod, pkg in (("pytest", "python3-pytest"), ("numpy", "python3-numpy")):
        try:
            __import__(mod)
        except ImportError:
            print("SKIP: %s is not installed (Debian: %s)" % (mod, pkg))
            return SKIP
    lib = os.environ.get("SLUICE_LIBRARY")
    if lib:
        # in a child: a sanitizer runtime that is not preloaded aborts the process
        r = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])",
                            lib], capture_output=True, text=True)
        if r.returncode != 0:
            print("SKIP: %s cannot be loaded into this python: %s" % (
                lib, (r.stderr.strip().splitlines() or ["?"])[-1][:300]))
            return SKIP
    import pytest
    return pytest.main(args)


if __name__ == "__main__":
    sys.exit(main())
