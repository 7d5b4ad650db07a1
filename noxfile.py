"""Developer sessions. Without nox installed: python3 tools/dev.py <session> [-- pytest args].

  demo            build + install, then call scale from every installed framework
  tests           build + install with every framework, run the test suite
  tests_cpu_only  build a CPU-only library (SCALE_LIB_CUDA=OFF) and run the suite against it

The CUDA architectures default to every one CUDA 13 supports (slow to build; CI builds them
all so that any compile error fails). For a quick local build: CUDAARCHS=native (or e.g. 90).
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests"]

PYTHON = "3.11"
# torch==2.13.0 is the CPU build this project's machines keep on disk; any other spec would
# download a multi-GB CUDA build. Elsewhere, install the torch you use before running.
TORCH = "torch==2.13.0"
FRAMEWORK_EXTRAS = ".[test,numpy,jax,paddle]"


def _install_frameworks(session: nox.Session) -> None:
    session.install(TORCH)
    session.install(FRAMEWORK_EXTRAS)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """Build and install scale_lib with every framework, then run python -m scale_lib."""
    _install_frameworks(session)
    session.run("python", "-m", "scale_lib")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Build and install scale_lib with every framework, then run the test suite."""
    _install_frameworks(session)
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def tests_cpu_only(session: nox.Session) -> None:
    """A CPU-only build (no CUDA even where nvcc exists), tested with NumPy."""
    session.install(".[test]", env={"SCALE_LIB_CUDA": "OFF"})
    session.run("python", "-c", "import scale_lib; assert not scale_lib.cuda_available()")
    session.run("pytest", *session.posargs)
