"""`python -m inhouse`: the `inhouse` command, where the console script is not on PATH (a
virtual environment not activated, a container that runs `python -m`)."""

from __future__ import annotations

import sys

from inhouse.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
