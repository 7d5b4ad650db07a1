#!/usr/bin/env python3
"""Check built wheels: one py3-none wheel per platform, holding the package and its library,
with apache-tvm-ffi as the only required dependency, and nothing that must not ship.

    python3 tools/check_wheel.py dist/*.whl
    python3 tools/check_wheel.py --cuda 12.9 --archs default dist-cu12/*.whl

With --cuda, the library must embed that CUDA runtime (statically). With --archs (a CMake
architecture list such as "75-real;90-real;120-virtual", or "default": the CMakeLists.txt
default for that CUDA major), every fatbin in the library must hold machine code (SASS) for
each -real architecture and PTX for each -virtual one, and nothing else; this needs cuobjdump
(--cuobjdump, $CUOBJDUMP, or on PATH; tools/cuda_toolchain.py fetches one). The wheel's size is
printed and, with --max-mib, bounded.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)


def default_architectures(cuda: str) -> str:
    """The CMakeLists.txt default architecture list for a CUDA version, e.g. "75-real;..."."""
    major = cuda.split(".")[0]
    cmake = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(rf"set\(SCALE_LIB_CUDA{major}_ARCHITECTURES\s+([^)]*)\)", cmake)
    if not match:
        raise SystemExit(f"CMakeLists.txt has no SCALE_LIB_CUDA{major}_ARCHITECTURES")
    return ";".join(match.group(1).split())


def fatbins(library: bytes) -> list[bytes]:
    """Every CUDA fatbin in the library: nvcc's per-file ones and the embedded CUBIN kernels."""
    found = []
    start = library.find(FATBIN_MAGIC)
    while start >= 0:
        header_size, body_size = struct.unpack_from("<HQ", library, start + 6)
        found.append(library[start : start + header_size + body_size])
        start = library.find(FATBIN_MAGIC, start + header_size + body_size)
    return found


def _archs(archs: set[str]) -> str:
    return " ".join(sorted(archs, key=lambda a: int(re.sub(r"\D", "", a) or 0))) or "none"


def check_architectures(library: bytes, archs: str, cuobjdump: str) -> list[str]:
    """Each fatbin holds SASS for every -real architecture and PTX for every -virtual one."""
    want_sass = {a.split("-")[0] for a in archs.split(";") if not a.endswith("-virtual")}
    want_ptx = {a.split("-")[0] for a in archs.split(";") if not a.endswith("-real")}
    blobs = fatbins(library)
    if not blobs:
        return ["the library holds no CUDA fatbin"]
    problems = []
    seen_sass: set[str] = set()
    seen_ptx: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for index, blob in enumerate(blobs):
            path = Path(tmp) / f"{index}.fatbin"
            path.write_bytes(blob)
            listing = subprocess.run(
                [cuobjdump, "--list-elf", "--list-ptx", str(path)], capture_output=True, text=True
            )
            if listing.returncode != 0:
                problems.append(f"cuobjdump failed on fatbin {index}: {listing.stderr.strip()}")
                continue
            sass = set(re.findall(r"ELF file .*\.sm_(\w+)\.cubin", listing.stdout))
            ptx = set(re.findall(r"PTX file .*\.sm_(\w+)\.ptx", listing.stdout))
            names = sorted(set(re.findall(r"file\s+\d+: (\w+)\.", listing.stdout)))
            if sass != want_sass or ptx != want_ptx:
                problems.append(
                    f"fatbin {index} ({', '.join(names)}): SASS for {_archs(sass)}, PTX for "
                    f"{_archs(ptx)}; expected SASS for {_archs(want_sass)}, PTX for {_archs(want_ptx)}"
                )
            seen_sass |= sass
            seen_ptx |= ptx
    print(f"  {len(blobs)} fatbins; SASS for {_archs(seen_sass)}; PTX for {_archs(seen_ptx)}")
    return problems


def check_cuda_runtime(library: bytes, cuda: str) -> list[str]:
    """The CUDA runtime linked in, from the tag kernels/cuda_driver.cu compiles in."""
    tag = re.search(rb"scale_lib:cudart=(\d+)", library)
    if not tag:
        return ["no CUDA runtime tag: a CPU-only library, or one built without kernels/cuda_driver.cu"]
    version = int(tag.group(1))
    found = f"{version // 1000}.{version % 1000 // 10}"
    print(f"  CUDA runtime {found} (statically linked)")
    return [] if found == cuda else [f"embeds CUDA runtime {found}, expected {cuda}"]


def check(
    wheel: Path,
    cuda: str | None = None,
    archs: str | None = None,
    cuobjdump: str | None = None,
    max_mib: float | None = None,
) -> list[str]:
    problems = []
    match = re.fullmatch(r"(?P<dist>[A-Za-z0-9_]+)-(?P<version>[^-]+)-(?P<tags>.+)\.whl", wheel.name)
    if not match:
        return [f"{wheel.name}: not a wheel file name"]
    package = match["dist"].lower()
    python_tag, abi_tag, platform = match["tags"].split("-", 2)
    if (python_tag, abi_tag) != ("py3", "none"):
        problems.append(f"tag {python_tag}-{abi_tag}: expected py3-none (one wheel for every Python 3)")
    if not re.match(r"(linux|manylinux|musllinux)", platform):
        problems.append(f"platform tag {platform}: expected a Linux platform")

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        for required in (f"{package}/__init__.py", f"{package}/py.typed", f"{package}/lib{package}.so"):
            if required not in names:
                problems.append(f"missing {required}")
        for name in names:
            if "__pycache__" in name or name.endswith(".pyc"):
                problems.append(f"bytecode shipped: {name}")
            if Path(name).name.startswith("libtvm_ffi"):
                problems.append(f"{name}: libtvm_ffi comes from the apache-tvm-ffi wheel, never vendored")
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(zf.read(metadata_name).decode())
        required = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
        if [re.split(r"[<>=!~ ;]", r, maxsplit=1)[0] for r in required] != ["apache-tvm-ffi"]:
            problems.append(f"required dependencies {required}: expected apache-tvm-ffi alone")

        with tempfile.TemporaryDirectory() as tmp:
            library = Path(zf.extract(f"{package}/lib{package}.so", tmp))
            if shutil.which("readelf"):
                dynamic = subprocess.run(
                    ["readelf", "-d", str(library)], capture_output=True, text=True
                ).stdout
                needed = re.findall(r"\(NEEDED\).*\[(.+)\]", dynamic)
                for lib in needed:
                    if lib.startswith(("libcudart", "libpython")):
                        problems.append(
                            f"lib{package}.so needs {lib}: cudart must be static, libpython absent"
                        )
            binary = library.read_bytes()
            library_mib = len(binary) / 2**20
            if cuda:
                problems += check_cuda_runtime(binary, cuda)
            if archs:
                if not cuobjdump:
                    problems.append("cannot check architectures: no cuobjdump (--cuobjdump or $CUOBJDUMP)")
                else:
                    problems += check_architectures(binary, archs, cuobjdump)
    size_mb = wheel.stat().st_size / 2**20
    if max_mib is not None and size_mb > max_mib:
        problems.append(f"{size_mb:.1f} MiB: larger than the --max-mib {max_mib} bound")
    print(
        f"{wheel.name}: {size_mb:.1f} MiB ({library_mib:.1f} MiB library unpacked), {len(names)} files, "
        + ("ok" if not problems else "PROBLEMS")
    )
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("wheels", nargs="*", type=Path)
    parser.add_argument("--cuda", help="the CUDA runtime version the library must embed, e.g. 12.9")
    parser.add_argument("--archs", help='CMake architecture list the fatbins must hold, or "default"')
    parser.add_argument("--cuobjdump", default=os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump"))
    parser.add_argument("--max-mib", type=float, help="fail if a wheel is larger")
    args = parser.parse_args(argv)
    if not args.wheels:
        print(__doc__)
        return 2
    archs = args.archs
    if archs == "default":
        if not args.cuda:
            parser.error("--archs default needs --cuda")
        archs = default_architectures(args.cuda)
    problems = [
        f"{wheel.name}: {issue}"
        for wheel in args.wheels
        for issue in check(wheel, args.cuda, archs, args.cuobjdump, args.max_mib)
    ]
    for problem in problems:
        print("  " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
