"""`python -m s3direct ARGS`: the s3direct command-line tool, as the `s3direct` console
script runs it (the same arguments, output and exit status; see _cli.py)."""

from __future__ import annotations

from ._cli import main

if __name__ == "__main__":
    main()
