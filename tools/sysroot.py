#!/usr/bin/env python3
"""Fetch an old-glibc build root (Debian bullseye: glibc 2.31, GCC 10) without a container or a
system install, and print the environment that builds against it.

    python3 tools/sysroot.py --dest .sysroot/bullseye
    SYSROOT=/abs/.sysroot/bullseye/root
    CC=/abs/.sysroot/bullseye/root/usr/bin/gcc-10
    CXX=/abs/.sysroot/bullseye/root/usr/bin/g++-10
    CMAKE_TOOLCHAIN_FILE=/abs/.sysroot/bullseye/toolchain.cmake
    LOADER=/abs/.sysroot/bullseye/root/lib64/ld-linux-x86-64.so.2
    LOADER_LIBRARY_PATH=/abs/.sysroot/bullseye/root/lib/x86_64-linux-gnu:...

Why: a library links against the C and C++ runtimes of the machine that builds it, and asks
for their newest symbol versions it uses (a GCC 12 `std::condition_variable::wait` needs
GLIBCXX_3.4.30, glibc 2.34 moved pthread_* into libc under GLIBC_2.34): built on a new
distribution, the wheel needs that distribution's glibc and libstdc++. Built with the compiler,
headers and libraries of an old one, it needs only what they had. libstdc++ stays shared (never
linked statically): C++ exceptions and type information cross into libtvm_ffi.so, which uses
the process's libstdc++.

What: Debian bullseye's gcc-10, g++-10 and the C/C++ development files (versions and SHA-256
pinned below, so every build gets the same bits), downloaded with `apt-get download` into a
private apt state (the mirror of this machine's apt sources, only the suite changed;
--debian-mirror or $SCALE_LIB_DEBIAN_MIRROR names another; tools/cuda_toolchain.py does the
same), unpacked with `dpkg -x` into DEST/root, and every absolute symlink inside it rewritten to
point inside it (else the linker and loader would reach this machine's libraries). The
compilers run here with --sysroot=DEST/root; the assembler and linker are this machine's
binutils. DEST/toolchain.cmake points CMake at them, for C++ and as nvcc's host compiler (CUDA
flags pass --sysroot through -Xcompiler). LOADER runs a program against the root's glibc and
libstdc++ alone (tools/load_test.cc), so that a newer symbol than the root has fails to load.

Everything is cached in DEST: a second run downloads nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_toolchain import apt_download

SUITE = "bullseye"
# (package, version, SHA-256): the compiler, the C++ headers and libraries, glibc's headers and
# libraries, the kernel headers glibc's headers include.
PACKAGES = [
    ("gcc-10", "10.2.1-6", "07af57b8d276f330830cf67ef144e461817e0ad99ac12c1e9e7e6b6882a4b42a"),
    ("g++-10", "10.2.1-6", "d25a7566c15c63c56eb34fa98e0663805ceb7cfd8054c2b6ae3f09be6982671c"),
    ("cpp-10", "10.2.1-6", "ed2018b8c7ab7006826ccfcc6d306c3a5e1c6dc12595022e4e02913302fdc10e"),
    ("libgcc-10-dev", "10.2.1-6", "3b711374092b84e732c4e73cf33e02cff02e34a5f105eb6467de8d9038e4cd9d"),
    ("libstdc++-10-dev", "10.2.1-6", "20b1f56863dcc5f187d6cb53b2aa6149bd013be4ec67e10c2c31a22fda619a01"),
    ("libstdc++6", "10.2.1-6", "5c155c58935870bf3b4bfe769116841c0d286a74f59eccfd5645693ac23f06b1"),
    ("libgcc-s1", "10.2.1-6", "e478f2709d8474165bb664de42e16950c391f30eaa55bc9b3573281d83a29daf"),
    ("libc6", "2.31-13+deb11u11", "05f7264da867b37f4c5ce49266b558ea1e81e05a9464f623152fca70f3550282"),
    ("libc6-dev", "2.31-13+deb11u11", "e7f7b45d9c5cfcf37609f0b6efd3c645272c812144703af89dfd32218fcb0fd3"),
    ("linux-libc-dev", "5.10.223-1", "e3be603bd12377bb90fcfb0f2048ca3a81c886e49d6f09945b82159d1c54f7b2"),
]
# aarch64 (Arm SBSA servers: Grace, Graviton, Ampere), cross-compiled from x86-64: the same
# suite's cross compiler (amd64 programs) and its runtimes for arm64, packaged by Debian under
# /usr/aarch64-linux-gnu, where the cross compiler looks inside its --sysroot.
CROSS_PACKAGES = [
    (
        "gcc-10-aarch64-linux-gnu",
        "10.2.1-6cross1",
        "05b3b40ef2f54e1852409cd9a59a98d962845ec3f2d1abc7ed40ccd949a7c1cd",
    ),
    (
        "g++-10-aarch64-linux-gnu",
        "10.2.1-6cross1",
        "31360f3bea56e7032107762dbecca228adec19427e58150eebc74a86591bc5f4",
    ),
    (
        "cpp-10-aarch64-linux-gnu",
        "10.2.1-6cross1",
        "d6767f29be8d81fe832e6b8c6d224ed0a95f079bd1d015899db88f592f49b9ba",
    ),
    (
        "binutils-aarch64-linux-gnu",
        "2.35.2-2",
        "b5d852fa469ac600304a7737e4f05a1f32465eb79d362faedeb36856a5b69c45",
    ),
    (
        "libgcc-10-dev-arm64-cross",
        "10.2.1-6cross1",
        "eca208337cfdecc8d625cddb6dbc0bffa00b48cfec2d1cc347bfbac3abcea4f5",
    ),
    (
        "libstdc++-10-dev-arm64-cross",
        "10.2.1-6cross1",
        "ce6e193cfa963ebd894c48ca4bfd21dd7a95a5e74293fea68789abdbf3904b23",
    ),
    (
        "libstdc++6-arm64-cross",
        "10.2.1-6cross1",
        "fe90e9cdf5250a3ea77961223a3953f1fd54bd3c579053b762ba990aa4f61c4f",
    ),
    (
        "libgcc-s1-arm64-cross",
        "10.2.1-6cross1",
        "2966823a38c100f77786a49f734d240c892fc86c473dbf1c862c23424900fd83",
    ),
    ("libc6-arm64-cross", "2.31-9cross4", "ccd237814281910e72422a6e86a6ef7570105fc69119ff8fc82f6a4827a8a015"),
    (
        "libc6-dev-arm64-cross",
        "2.31-9cross4",
        "4b88456f6913474587be547a865c6b42756b2031ca11ddf6285ea6ff4275a48d",
    ),
    (
        "linux-libc-dev-arm64-cross",
        "5.10.13-1cross4",
        "3a5c7920a299c88f69b7d64eb60fb6e65631cd57721a30ed60a2f6b7adf931d3",
    ),
]
GCC_VERSION = "10"
TRIPLET = "x86_64-linux-gnu"
# Per target architecture: its packages, the compiler programs' prefix, where its runtimes lie
# in the root, its dynamic loader, and the default cache directory's name.
ARCHES: dict[str, dict[str, object]] = {
    "x86_64": {
        "packages": PACKAGES,
        "prefix": "",
        "libdirs": [f"lib/{TRIPLET}", f"usr/lib/{TRIPLET}"],
        "loader": "lib64/ld-linux-x86-64.so.2",
        "dest": SUITE,
    },
    "aarch64": {
        "packages": CROSS_PACKAGES,
        "prefix": "aarch64-linux-gnu-",
        "libdirs": ["usr/aarch64-linux-gnu/lib"],
        "loader": "usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1",
        "dest": f"{SUITE}-aarch64",
    },
}


def _log(message: str) -> None:
    print(f"sysroot: {message}", file=sys.stderr, flush=True)


def _relink(root: Path) -> int:
    """Point every absolute symlink under root at its target inside root; returns the count."""
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            link = Path(dirpath) / name
            if not link.is_symlink():
                continue
            target = os.readlink(link)
            if not target.startswith("/"):
                continue
            link.unlink()
            link.symlink_to(os.path.relpath(root / target.lstrip("/"), link.parent))
            count += 1
    return count


# A program of the cross binutils, wrapped: it needs its own libbfd and libopcodes, which lie in
# the root's usr/lib/x86_64-linux-gnu, where this machine's loader does not look.
BINUTILS_WRAPPER = """\
#!/bin/sh
# Written by tools/sysroot.py: runs {name} with the root's libbfd and libopcodes.
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib/x86_64-linux-gnu${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" \\
  exec "$here/../libexec/cross-binutils/{name}" "$@"
"""


def _wrap_binutils(root: Path) -> int:
    """Wrap each program of root/usr/bin that needs the root's private binutils libraries in a
    script that points the loader at them; returns the count."""
    libexec = root / "usr" / "libexec" / "cross-binutils"
    count = 0
    for program in sorted((root / "usr" / "bin").iterdir()):
        if program.is_symlink() or not program.is_file() or b"-arm64.so" not in program.read_bytes():
            continue
        libexec.mkdir(parents=True, exist_ok=True)
        program.rename(libexec / program.name)
        program.write_text(BINUTILS_WRAPPER.format(name=program.name))
        program.chmod(0o755)
        count += 1
    return count


def _compilers(root: Path, arch: str) -> tuple[Path, Path]:
    programs, prefix = root / "usr" / "bin", str(ARCHES[arch]["prefix"])
    return programs / f"{prefix}gcc-{GCC_VERSION}", programs / f"{prefix}g++-{GCC_VERSION}"


def toolchain_file(root: Path, arch: str = "x86_64") -> str:
    """A CMake toolchain file for the root: C++ with its compiler and --sysroot, nvcc with the
    same compiler as host compiler, and libpthread linked (glibc 2.31 keeps pthread_* there).
    For another architecture than this machine's, CMake is told it cross-compiles."""
    gcc, gxx = _compilers(root, arch)
    cross = ""
    if arch != "x86_64":
        cross = f"""\
# Cross-compiling: CMake runs none of the programs it builds.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR {arch})
"""
    return f"""\
# Written by tools/sysroot.py: build against Debian {SUITE}'s glibc and libstdc++ ({arch}).
{cross}set(CMAKE_SYSROOT "{root}")
set(CMAKE_C_COMPILER "{gcc}")
set(CMAKE_CXX_COMPILER "{gxx}")
set(CMAKE_CUDA_HOST_COMPILER "{gxx}")
set(CMAKE_CUDA_FLAGS_INIT "-Xcompiler=--sysroot={root}")
# CMake links CUDA targets with the host compiler, without the CUDA flags: the sysroot again.
# glibc before 2.34 keeps pthread_* in libpthread: std::thread needs it linked.
set(CMAKE_EXE_LINKER_FLAGS_INIT "--sysroot={root}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "--sysroot={root} -Wl,--no-as-needed -lpthread")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "--sysroot={root}")
# Programs and packages (Python, TVM-FFI, the CUDA toolkit) come from this machine; only
# headers and libraries the compiler finds by itself come from the root.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
"""


def make_sysroot(dest: Path, debian_mirror: str | None = None, arch: str = "x86_64") -> dict[str, str]:
    """Fetch (or reuse) the root under dest; return the environment that builds against it."""
    if arch not in ARCHES:
        sys.exit(f"sysroot: no recipe for {arch}; known: {', '.join(ARCHES)}")
    spec = ARCHES[arch]
    packages: list[tuple[str, str, str]] = spec["packages"]  # type: ignore[assignment]
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    root = dest / "root"
    stamp = dest / ".packages"
    wanted = "\n".join(f"{name}={version} {sha256}" for name, version, sha256 in packages)
    if not (stamp.exists() and stamp.read_text() == wanted and root.is_dir()):
        debs = apt_download(packages, SUITE, "main", dest, debian_mirror)
        shutil.rmtree(root, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            unpacked = Path(tmp) / "root"
            for deb in debs:
                subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
            _log(f"{_relink(unpacked)} absolute symlinks now point inside the root")
            if arch != "x86_64":
                _log(f"{_wrap_binutils(unpacked)} cross binutils programs wrapped")
            unpacked.rename(root)
        for deb in debs:  # unpacked: the archives are not kept
            deb.unlink()
        stamp.write_text(wanted)
    (dest / "toolchain.cmake").write_text(toolchain_file(root, arch))
    gcc, gxx = _compilers(root, arch)
    version = subprocess.run([str(gxx), "-dumpfullversion"], capture_output=True, text=True)
    if version.returncode != 0 or not version.stdout.startswith(GCC_VERSION + "."):
        sys.exit(f"sysroot: {gxx} does not run here:\n{version.stderr}")
    libdirs: list[str] = spec["libdirs"]  # type: ignore[assignment]
    return {
        "SYSROOT": str(root),
        "CC": str(gcc),
        "CXX": str(gxx),
        "CMAKE_TOOLCHAIN_FILE": str(dest / "toolchain.cmake"),
        "LOADER": str(root / str(spec["loader"])),
        "LOADER_LIBRARY_PATH": ":".join(f"{root}/{d}" for d in libdirs),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument(
        "--arch",
        choices=sorted(ARCHES),
        default="x86_64",
        help="the architecture to build for (aarch64: cross-compiled from x86-64)",
    )
    parser.add_argument(
        "--dest", type=Path, help=f"cache directory (default: .sysroot/{SUITE}, .sysroot/{SUITE}-aarch64)"
    )
    parser.add_argument(
        "--debian-mirror",
        default=os.environ.get("SCALE_LIB_DEBIAN_MIRROR"),
        help="the Debian mirror to fetch the packages from (default: the apt sources')",
    )
    args = parser.parse_args(argv)
    dest = args.dest or Path(__file__).resolve().parent.parent / ".sysroot" / str(ARCHES[args.arch]["dest"])
    for key, value in make_sysroot(dest, args.debian_mirror, args.arch).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
