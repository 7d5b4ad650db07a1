"""Developer sessions. Without nox installed: python3 tools/dev.py <session> [-- args].

  demo              build + install, then call scale from every installed framework
  tests             build + install with every framework, run the test suite
  tests_numpy       ... with NumPy only (likewise tests_torch, tests_jax, tests_paddle)
  tests_cpu_only    a CPU-only build (SCALE_LIB_CUDA=OFF), tested with NumPy
  sanitize          the CPU code built with AddressSanitizer + UBSan, tested with NumPy
  lint              pre-commit: ruff, ruff-format, clang-format, mypy, file hygiene
  docs              the Sphinx site, warnings as errors (docs/_build/html)
  build             wheel + sdist into dist/, then checks of the wheel's tag and contents
  bench             every benchmark in --quick mode (seconds, CPU)
  # template-only:begin
  template          generate libraries from the template, remove an op, update one; check each
  # template-only:end

Sessions run on the Python that runs nox (3.11 or newer; NOX_PYTHON=3.13 picks another). The
frameworks are the newest releases pip finds; TORCH_SPEC overrides the torch requirement (e.g.
a CPU-only build, or the one CI pins).

The CUDA architectures default to every one CUDA 13 supports (slow to build; CI builds them
all so that any compile error fails). For a quick local build: CUDAARCHS=native (or e.g. 90).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True  # a session that cannot run fails, loudly

ROOT = Path(__file__).resolve().parent
MIN_PYTHON = (3, 11)


def _python() -> str:
    """The sessions' interpreter: NOX_PYTHON, else the one running nox (if new enough)."""
    chosen = os.environ.get("NOX_PYTHON")
    if chosen:
        return chosen
    if sys.version_info < MIN_PYTHON:
        sys.exit(
            f"noxfile.py: Python {'.'.join(map(str, MIN_PYTHON))} or newer is needed; nox runs on "
            f"{sys.version.split()[0]} (set NOX_PYTHON=3.12, or run tools/dev.py with a newer python3)"
        )
    return sys.executable


PYTHON = _python()
TORCH = os.environ.get("TORCH_SPEC", "torch")
FRAMEWORKS = {
    "numpy": [".[test]"],
    "torch": [TORCH, ".[test]"],
    "jax": [".[test,jax]"],
    "paddle": [".[test,paddle]"],
}
CPU_ONLY = {"SCALE_LIB_CUDA": "OFF"}


def _install_all(session: nox.Session, env: dict[str, str] | None = None) -> None:
    session.install(TORCH)
    session.install(".[test,numpy,jax,paddle]", env=env)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """Build and install scale_lib with every framework, then run python -m scale_lib."""
    _install_all(session)
    session.run("python", "-m", "scale_lib")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Build and install scale_lib with every framework, then run the test suite."""
    _install_all(session)
    session.run("pytest", *session.posargs)


def _framework_session(framework: str) -> None:
    @nox.session(python=PYTHON, name=f"tests_{framework}")
    def tests_one_framework(session: nox.Session) -> None:
        """The suite with one framework installed: the others' tests skip, and nothing may
        depend on a framework that is absent."""
        for requirement in FRAMEWORKS[framework]:
            session.install(requirement)
        session.run("pytest", *session.posargs)


for _framework in FRAMEWORKS:
    _framework_session(_framework)


@nox.session(python=PYTHON)
def tests_cpu_only(session: nox.Session) -> None:
    """A CPU-only build (no CUDA even where nvcc exists), tested with NumPy."""
    session.install(".[test]", env=CPU_ONLY)
    session.run("python", "-c", "import scale_lib; assert not scale_lib.cuda_available()")
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def sanitize(session: nox.Session) -> None:
    """The CPU kernels built with AddressSanitizer and UndefinedBehaviorSanitizer (any report
    aborts), tested with NumPy. The interpreter is not instrumented, so libasan is preloaded
    and leak checking (the interpreter's, not ours) is off."""
    flags = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
    env = {
        **CPU_ONLY,
        "SKBUILD_BUILD_DIR": "build/sanitize",
        "SKBUILD_CMAKE_BUILD_TYPE": "RelWithDebInfo",
        "CMAKE_ARGS": (
            f"-DCMAKE_CXX_FLAGS='{flags}' -DCMAKE_SHARED_LINKER_FLAGS='-fsanitize=address,undefined'"
        ),
    }
    session.install(".[test]", env=env)
    # libstdc++ right after libasan: the interpreter does not link it, and ASan's __cxa_throw
    # interceptor must find the real one when it starts (else the first C++ exception aborts).
    preload = " ".join(
        subprocess.run(
            ["gcc", f"-print-file-name={lib}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for lib in ("libasan.so", "libstdc++.so")
    )
    session.run(
        "pytest",
        *(session.posargs or ["-x", "-q"]),
        env={
            "LD_PRELOAD": preload,
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        },
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Every pre-commit hook over every file."""
    session.install("pre-commit>=3")
    session.run("pre-commit", "run", "--all-files", "--show-diff-on-failure", *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the Sphinx site with warnings as errors (the API reference imports scale_lib)."""
    session.install(".[docs]", env=CPU_ONLY)
    shutil.rmtree(ROOT / "docs" / "_build", ignore_errors=True)
    session.run(
        "sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html", *session.posargs
    )


@nox.session(python=PYTHON)
def build(session: nox.Session) -> None:
    """Build the sdist and the wheel into dist/, then check the wheel."""
    session.install("build", "twine")
    shutil.rmtree(ROOT / "dist", ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", "dist")
    session.run("twine", "check", "--strict", *map(str, (ROOT / "dist").glob("*")))
    session.run("python", "tools/check_wheel.py", *map(str, (ROOT / "dist").glob("*.whl")))


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Every benchmark in --quick mode: seconds on a CPU, a smoke test that they run."""
    session.install(TORCH)
    session.install(".[test]", env=CPU_ONLY)  # --quick runs on the CPU: skip the CUDA build
    out = session.create_tmp()
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        session.run("python", str(script), "--quick", "--out-dir", out)


# template-only:begin
@nox.session(python=PYTHON)
def template(session: nox.Session) -> None:
    """Generate libraries from this template (minimal, and with two example ops), remove an op
    from one, update one from an older template commit; lint, test and build the docs of each
    (tools/check_template.py; pass e.g. `-- --only update`)."""
    import re

    # The formatters at the versions the lint pins: generated libraries are formatted with them.
    pins = re.findall(r"\b(?:ruff|clang-format)==[\w.]+", (ROOT / ".pre-commit-config.yaml").read_text())
    session.install("copier>=9.4,<10", "pre-commit>=3", *sorted(set(pins)))
    session.run("python", "tools/check_template.py", session.create_tmp(), *session.posargs)


# template-only:end
