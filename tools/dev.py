#!/usr/bin/env python3
"""Run a nox session on a machine with nothing but Python: python3 tools/dev.py tests

Creates .venv-nox (once) with nox in it, then runs `nox -s <session> ...`. Arguments after
`--` go to the session (for tests: to pytest), e.g. python3 tools/dev.py tests -- -k numpy
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-nox"
NOX = VENV / "bin" / "nox"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print("\nsessions: demo, tests, tests_cpu_only (see noxfile.py)")
        return 0 if argv else 2
    sessions, posargs = argv, []
    if "--" in argv:
        split = argv.index("--")
        sessions, posargs = argv[:split], argv[split:]
    if not NOX.exists():
        print(f"creating {VENV.name} with nox", flush=True)
        venv.create(VENV, with_pip=True)
        subprocess.run([VENV / "bin" / "python", "-m", "pip", "install", "-q", "nox>=2024.10"], check=True)
    os.chdir(ROOT)
    return subprocess.call([str(NOX), "-s", *sessions, *posargs])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
