"""``python -m scale_lib`` reports every framework, whatever one of them does.

A framework that is installed but fails to import or to start is reported on its own line and
the others still run; the exit status is 1 then, as when a call fails, and 0 when every installed
framework ran (a framework that is not installed is listed as skipped). Each run is a subprocess
with the failure set up from outside: ``JAX_PLATFORMS`` naming no platform, and a ``paddle``
package first on ``PYTHONPATH`` whose import raises.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _report(tmp_path: Path | None = None, **env: str) -> tuple[int, list[str]]:
    """The exit status and the lines of ``python -m scale_lib``, with ``tmp_path`` first on
    PYTHONPATH when given."""
    environ = {**os.environ, **env}
    if tmp_path is not None:
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), environ.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-m", "scale_lib"], capture_output=True, text=True, timeout=300, env=environ
    )
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return run.returncode, run.stdout.splitlines()


def _line(lines: list[str], framework: str) -> str:
    found = [line for line in lines if re.match(rf"\s+{re.escape(framework)}\s", line)]
    assert found, f"no line for {framework} in:\n" + "\n".join(lines)
    return found[0]


def _fake_paddle(tmp_path: Path, body: str) -> None:
    package = tmp_path / "paddle"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(body))


def test_a_framework_that_cannot_start_is_reported_and_the_others_run() -> None:
    if not (_installed("jax") and _installed("jax_tvm_ffi")):
        pytest.skip("needs JAX and jax-tvm-ffi")
    status, lines = _report(JAX_PLATFORMS="bogus")
    assert re.search(r"-> RuntimeError: .*bogus", _line(lines, "jax")), lines
    assert _line(lines, "numpy").endswith("ok"), lines
    for framework in ("torch", "paddle"):
        if _installed(framework):
            assert _line(lines, framework).endswith("ok"), lines
    assert status == 1, lines


def test_a_framework_whose_import_raises_is_reported_and_the_others_run(tmp_path: Path) -> None:
    _fake_paddle(tmp_path, 'raise RuntimeError("this paddle is broken")\n')
    status, lines = _report(tmp_path)
    assert _line(lines, "paddle").endswith("-> RuntimeError: this paddle is broken"), lines
    assert _line(lines, "numpy").endswith("ok"), lines
    assert not any("paddle" in line for line in lines if line.startswith("not installed")), lines
    assert status == 1, lines


def test_a_framework_that_is_not_installed_is_skipped(tmp_path: Path) -> None:
    # What importing an absent package raises: the report lists it and the status stays 0.
    _fake_paddle(tmp_path, "raise ModuleNotFoundError(\"No module named 'paddle'\", name='paddle')\n")
    status, lines = _report(tmp_path)
    skipped = [line for line in lines if line.startswith("not installed (skipped):")]
    assert skipped and "paddle" in skipped[0], lines
    assert not any(re.match(r"\s+paddle\s", line) for line in lines), lines
    assert _line(lines, "numpy").endswith("ok"), lines
    assert status == 0, lines
