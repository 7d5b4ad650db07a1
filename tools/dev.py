#!/usr/bin/env python3
"""Run a nox session on a machine with nothing but Python: python3 tools/dev.py tests

Creates .venv-nox (once per Python version) with nox in it, then runs `nox -s <session> ...`.
Arguments after `--` go to the session (for tests: to pytest), e.g.
python3 tools/dev.py tests -- -k scale -x

The sessions use the Python that runs this script when it is 3.11 or newer; else the newest of
python3.13, python3.12, python3.11 found on PATH; else this script stops with an error. Any
failure, a missing interpreter, or a test run in which no test passed exits non-zero.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-nox"
NOX = VENV / "bin" / "nox"
SUPPORTED = ((3, 13), (3, 12), (3, 11))


def interpreter() -> tuple[str, str]:
    """(path, "3.x") of the Python for the sessions."""
    if sys.version_info[:2] >= SUPPORTED[-1]:
        return sys.executable, f"{sys.version_info[0]}.{sys.version_info[1]}"
    for major, minor in SUPPORTED:
        found = shutil.which(f"python{major}.{minor}")
        if found:
            return found, f"{major}.{minor}"
    wanted = ", ".join(f"python{a}.{b}" for a, b in SUPPORTED)
    sys.exit(
        f"error: this project needs Python 3.11 or newer; this is {sys.version.split()[0]} and none of "
        f"{wanted} is on PATH. Install one, or run this script with it."
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print("\nsessions: demo, tests, tests_cpu_only, lint, docs, ... (see noxfile.py)")
        return 0 if argv else 2
    sessions, posargs = argv, []
    if "--" in argv:
        split = argv.index("--")
        sessions, posargs = argv[:split], argv[split:]
    python, version = interpreter()
    marker = VENV / "python-version"
    if not NOX.exists() or not marker.is_file() or marker.read_text().strip() != version:
        print(f"creating {VENV.name} (Python {version}) with nox", flush=True)
        subprocess.run([python, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([VENV / "bin" / "python", "-m", "pip", "install", "-q", "nox>=2024.10"], check=True)
        marker.write_text(version + "\n")
    os.chdir(ROOT)
    env = {**os.environ, "NOX_PYTHON": os.environ.get("NOX_PYTHON", str(VENV / "bin" / "python"))}
    code = subprocess.call([str(NOX), "-s", *sessions, *posargs], env=env)
    if code != 0:
        print(f"\ntools/dev.py: nox -s {' '.join(sessions)} failed (exit code {code})", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
