"""The `s3direct` console script of a pip install: runs the C CLI installed in _lib/."""

from __future__ import annotations

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "s3direct")
    if not os.access(exe, os.X_OK):
        sys.exit(f"s3direct: the command-line tool is not installed at {exe}")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
