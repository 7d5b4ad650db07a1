#!/usr/bin/env python3
"""Check built wheels: one py3-none wheel per platform, holding the package and its library,
with apache-tvm-ffi as the only required dependency, and nothing that must not ship.

    python3 tools/check_wheel.py dist/*.whl
    python3 tools/check_wheel.py --cuda 12.9 --archs default dist-cu12/*.whl
    python3 tools/check_wheel.py --library scale_lib_cu12=12.4 --library scale_lib_cu13=13.0 dist/*.whl

No CUDA symbol may be left undefined in the library (it links neither libcuda nor libcudart: an
undefined one kills the process at its first call). With --cuda, the library must embed that
CUDA runtime (statically), and every cubin and PTX it embeds (in any fatbin, or stored bare) is
read and listed, fatbin by fatbin (its entry points: the embedded CUBIN and Triton kernels by
name): its architecture, ELF ABI version and OS/ABI, PTX ISA version. Machine code must load on
the oldest driver the wheel declares (--min-driver, default CUDA <major>.0); PTX may need a
driver up to the --cuda version, never newer. With --archs (a CMake
architecture list such as "75-real;90-real;120-virtual", or "default": the CMakeLists.txt
default for that CUDA major), every fatbin in the library must hold machine code (SASS) for
each -real architecture (Triton's sm_90a-style code counts for its generation) and PTX for
each -virtual one, and the library exactly what this tree builds for the list (a Triton
kernel's code for each GPU of a family target too: expected_architectures); this needs cuobjdump
(--cuobjdump, $CUOBJDUMP, or on PATH; tools/cuda_toolchain.py fetches one). The wheel's size is
printed and, with --max-mib, bounded.

Reproducible builds: the library (and, with --cuda, every cubin and PTX it embeds, decompressed)
must not name the source directory this script is in, any --forbid-path (the build directory,
the toolchains), or a temporary directory of `python -m build` (build-env-*, build-via-sdist-*).
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(ROOT / "tools"))
from remove_op import triton_kernels  # noqa: E402 (the tools' folder first)
from triton_aot import parse_architectures  # noqa: E402

# The temporary directories of `python -m build`: its isolated environment, the unpacked sdist.
BUILD_TEMPORARIES = re.compile(rb"/build-(?:env|via-sdist)-\w+")
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)


def default_architectures(cuda: str) -> str:
    """The CMakeLists.txt default architecture list for a CUDA version, e.g. "75-real;..."."""
    major = cuda.split(".")[0]
    # CUDA 12.0-12.7 know no Blackwell: CMakeLists.txt has a list of their own for them.
    name = f"CUDA{major}_0" if major == "12" and _version(cuda) < (12, 8) else f"CUDA{major}"
    cmake = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(rf"set\(SCALE_LIB_{name}_ARCHITECTURES\s+([^)]*)\)", cmake)
    if not match:
        raise SystemExit(f"CMakeLists.txt has no SCALE_LIB_{name}_ARCHITECTURES")
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


def sorted_architectures(archs: set[str]) -> list[str]:
    """GPU architectures in the order of their numbers (75, 80, ..., 100, 120)."""
    return sorted(archs, key=lambda a: int(re.sub(r"\D", "", a) or 0))


def _archs(archs: set[str]) -> str:
    return " ".join(sorted_architectures(archs)) or "none"


def nvcc_architectures(archs: str) -> tuple[set[str], set[str]]:
    """(SASS, PTX) nvcc compiles for a CMake architecture list: machine code for each -real
    architecture (a family target's, 100f-real, is listed as sm_100), PTX for each -virtual one."""
    items = [a for a in archs.split(";") if a]
    sass = {a.split("-")[0].rstrip("f") for a in items if not a.endswith("-virtual")}
    return sass, {a.split("-")[0] for a in items if not a.endswith("-real")}


def expected_architectures(archs: str) -> tuple[set[str], set[str]]:
    """(SASS, PTX) a library built from this tree for a CMake architecture list holds, over all its
    fatbins: nvcc's, and with a Triton kernel in kernels/ (as CMakeLists.txt finds them) Triton's,
    which compiles a family target for each of its GPUs (tools/triton_aot.py). The README's GPU
    rows are rendered from this (tools/render_docs.py: archs); the checks require it exactly."""
    sass, ptx = nvcc_architectures(archs)
    if triton_kernels():
        real, virtual = parse_architectures(archs)
        sass |= {str(a) for a in real}
        ptx |= {str(a) for a in virtual}
    return sass, ptx


def check_architectures(library: bytes, archs: str, cuobjdump: str) -> list[str]:
    """Each fatbin holds SASS for every -real architecture and PTX for every -virtual one (a
    Triton kernel's: for each GPU of a family target, PTX for the family, too), and the library
    as a whole exactly what ``expected_architectures`` says."""
    want_sass, want_ptx = nvcc_architectures(archs)
    all_sass, all_ptx = expected_architectures(archs)
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
            # sm_90a-style code (Triton's, from Hopper on) is the -real code of its generation.
            sass = {a.rstrip("af") for a in re.findall(r"ELF file .*\.sm_(\w+)\.cubin", listing.stdout)}
            ptx = set(re.findall(r"PTX file .*\.sm_(\w+)\.ptx", listing.stdout))
            names = sorted(set(re.findall(r"file\s+\d+: (\w+)\.", listing.stdout)))
            if not (want_sass <= sass <= all_sass and want_ptx <= ptx <= all_ptx):
                problems.append(
                    f"fatbin {index} ({', '.join(names)}): SASS for {_archs(sass)}, PTX for "
                    f"{_archs(ptx)}; expected SASS for {_archs(want_sass)}, PTX for {_archs(want_ptx)}"
                )
            seen_sass |= sass
            seen_ptx |= ptx
    print(f"  {len(blobs)} fatbins; SASS for {_archs(seen_sass)}; PTX for {_archs(seen_ptx)}")
    if not problems and (seen_sass, seen_ptx) != (all_sass, all_ptx):
        problems.append(
            f"the library holds SASS for {_archs(seen_sass)}, PTX for {_archs(seen_ptx)}; this tree "
            f"builds SASS for {_archs(all_sass)}, PTX for {_archs(all_ptx)} (a Triton kernel not compiled?)"
        )
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


# The CUDA driver each PTX ISA version needs (the PTX ISA notes' release table): a driver JIT-
# compiles PTX only of an ISA version its own CUDA release knows.
PTX_ISA_DRIVER = {
    (7, 8): "12.0", (8, 0): "12.0", (8, 1): "12.1", (8, 2): "12.2", (8, 3): "12.3", (8, 4): "12.4",
    (8, 5): "12.5", (8, 6): "12.7", (8, 7): "12.8", (8, 8): "12.9", (9, 0): "13.0", (9, 1): "13.1",
}  # fmt: skip
EM_CUDA = 190
ELFOSABI_CUDA = 0x41  # set by ptxas 13: the cubin loads only on CUDA 13 (R580+) drivers


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def cubin_abi(elf: bytes) -> str:
    """The ELF ABI version and OS/ABI of a CUDA ELF (cubin), as check_wheel lists them."""
    return f"ELF ABI v{elf[8]}, OS/ABI 0x{elf[7]:02x}"


def cubin_driver(elf: bytes) -> tuple[str, str]:
    """(architecture, the oldest CUDA driver that loads it) of a CUDA ELF (cubin)."""
    os_abi, abi_version = elf[7], elf[8]
    flags = struct.unpack_from("<I", elf, 48)[0]  # e_flags of a 64-bit ELF
    # ELF ABI version 8 (with OS/ABI 0x41: ptxas 13) keeps the architecture in bits 8-15;
    # older cubins in bits 0-7.
    arch = (flags >> 8) & 0xFF if abi_version >= 8 else flags & 0xFF
    if os_abi == ELFOSABI_CUDA:
        driver = "13.0"
    elif abi_version >= 8:
        driver = "12.8"
    else:
        driver = "12.0"
    return f"sm_{arch}", driver


def ptx_driver(ptx: str) -> tuple[str, str]:
    """(target, the oldest CUDA driver that JIT-compiles it) of a PTX text."""
    version = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", ptx, re.M)
    target = re.search(r"^\s*\.target\s+(\w+)", ptx, re.M)
    isa = (int(version.group(1)), int(version.group(2))) if version else (0, 0)
    name = f"PTX ISA {isa[0]}.{isa[1]} for {target.group(1) if target else '?'}"
    return name, PTX_ISA_DRIVER.get(isa, "99.0" if isa > max(PTX_ISA_DRIVER) else "12.0")


def _cubin_arch(file_name: str, arch: str) -> str:
    """The architecture as cuobjdump names the extracted file (keeps sm_90a's suffix)."""
    match = re.search(r"\.(sm_\w+)\.cubin$", file_name)
    return match.group(1) if match else arch


def _entry_names(folder: Path) -> str:
    """The kernel names of an extracted fatbin's first cubin (its entry points)."""
    cubin = next((p for p in sorted(folder.iterdir()) if p.suffix == ".cubin"), None)
    if cubin is None:
        return "PTX only"
    names = sorted({n.decode() for n in re.findall(rb"\.text\.([A-Za-z_]\w*)", cubin.read_bytes())})
    plain = [n for n in names if not n.startswith("_Z")]  # extern "C" entry points by name
    shown = ", ".join(plain[:2]) + (f" and {len(plain) - 2} more" if len(plain) > 2 else "")
    mangled = len(names) - len(plain)
    return "; ".join(filter(None, [shown, f"{mangled} C++ kernels" if mangled else ""])) or "no kernels"


def _raw_cubins(library: bytes) -> list[bytes]:
    """CUDA ELF images stored directly in the library (not inside a fatbin), e.g. embedded
    cubins written by another compiler; their headers say where they end."""
    found = []
    spans, start = [], library.find(FATBIN_MAGIC)
    for blob in fatbins(library):
        spans.append((start, start + len(blob)))
        start = library.find(FATBIN_MAGIC, start + len(blob))
    start = library.find(b"\x7fELF", 1)
    while start >= 0:
        header = library[start : start + 64]
        if any(begin <= start < end for begin, end in spans):
            pass  # inside a fatbin: cuobjdump extracts it
        elif len(header) == 64 and header[4] == 2 and struct.unpack_from("<H", header, 18)[0] == EM_CUDA:
            (shoff,) = struct.unpack_from("<Q", header, 40)
            shentsize, shnum = struct.unpack_from("<HH", header, 58)
            found.append(library[start : start + shoff + shentsize * shnum])
        start = library.find(b"\x7fELF", start + 4)
    return found


def build_paths(data: bytes, forbidden: list[str], where: str) -> list[str]:
    """The build machine's paths that `data` names: any of `forbidden`, or a temporary
    directory of `python -m build`."""
    found = sorted({path for path in forbidden if path.encode() in data})
    found += sorted({m.decode(errors="replace") for m in BUILD_TEMPORARIES.findall(data)})
    return [f"{where} names {path} (a build machine's path: not reproducible)" for path in found]


def check_device_code(
    library: bytes,
    cuobjdump: str,
    sass_driver: str,
    ptx_driver_max: str,
    forbidden: list[str] | None = None,
    facts: dict | None = None,
) -> list[str]:
    """Every cubin and PTX embedded in the library (in any fatbin, or stored bare): what it
    needs of the driver. Machine code must load on `sass_driver` (the oldest driver the wheel
    declares); PTX must not need a driver newer than `ptx_driver_max`. None may name a path in
    `forbidden`. Recorded in ``facts``: "sass_driver" and "ptx_driver", the newest CUDA driver
    version its machine code and its PTX need."""
    problems = []
    needs: dict[str, set[str]] = {}
    kinds: dict[str, set[str]] = {"sass": set(), "ptx": set()}
    with tempfile.TemporaryDirectory() as tmp:
        for index, blob in enumerate(fatbins(library)):
            out = Path(tmp) / str(index)
            out.mkdir()
            (out / "fatbin").write_bytes(blob)
            extract = subprocess.run(
                [cuobjdump, "-xelf", "all", "-xptx", "all", "fatbin"], cwd=out, capture_output=True, text=True
            )
            if extract.returncode != 0:
                problems.append(f"cuobjdump cannot extract fatbin {index}: {extract.stderr.strip()}")
            listed = []
            for item in sorted(out.iterdir()):
                if item.suffix in (".cubin", ".ptx"):
                    problems += build_paths(
                        item.read_bytes(), forbidden or [], f"fatbin {index}: {item.name}"
                    )
                if item.suffix == ".cubin":
                    elf = item.read_bytes()
                    arch, driver = cubin_driver(elf)
                    listed.append(f"{_cubin_arch(item.name, arch)} ({cubin_abi(elf)})")
                    needs.setdefault(driver, set()).add(arch)
                    kinds["sass"].add(driver)
                    if _version(driver) > _version(sass_driver):
                        problems.append(
                            f"{item.name}: {arch} machine code needs a CUDA {driver} driver; "
                            f"the wheel declares {sass_driver}"
                        )
                elif item.suffix == ".ptx":
                    name, driver = ptx_driver(item.read_text(errors="replace"))
                    listed.append(name)
                    needs.setdefault(driver, set()).add(name)
                    kinds["ptx"].add(driver)
                    if _version(driver) > _version(ptx_driver_max):
                        problems.append(
                            f"{item.name}: {name} needs a CUDA {driver} driver; the wheel "
                            f"declares {ptx_driver_max} for PTX"
                        )
            print(f"  fatbin {index} ({_entry_names(out)}): {'; '.join(listed)}")
    for index, elf in enumerate(_raw_cubins(library)):
        arch, driver = cubin_driver(elf)
        needs.setdefault(driver, set()).add(f"bare {arch}")
        kinds["sass"].add(driver)
        if _version(driver) > _version(sass_driver):
            problems.append(
                f"bare cubin {index}: {arch} needs a CUDA {driver} driver; the wheel declares {sass_driver}"
            )
    for driver in sorted(needs, key=_version):
        print(f"  needs a CUDA {driver} driver: {', '.join(sorted(needs[driver]))}")
    if facts is not None:
        facts |= {f"{kind}_driver": max(found, key=_version) for kind, found in kinds.items() if found}
    return problems


def check_undefined_cuda_symbols(library: Path) -> list[str]:
    """No CUDA driver or runtime symbol may stay undefined: the library links no libcuda or
    libcudart, so the dynamic loader would fail the first call with "symbol lookup error",
    killing the process."""
    if not shutil.which("nm"):
        return ["cannot check undefined symbols: no nm"]
    listing = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True)
    if listing.returncode != 0:
        return [f"nm failed: {listing.stderr.strip()}"]
    undefined = sorted(
        name for name in re.findall(r"\bU (\S+)", listing.stdout) if re.match(r"_*cu[A-Z]|_*cuda[A-Z]", name)
    )
    return (
        [f"undefined CUDA symbols (the first call would kill the process): {' '.join(undefined)}"]
        if undefined
        else []
    )


def check_exported_symbols(library: Path) -> list[str]:
    """What docs/building.md promises the library exports: the ``__tvm_ffi_<name>`` functions
    and, besides them, only C++ vague-linkage symbols (weak or unique: typeinfo and vtables of
    types shared with libtvm_ffi, template instances), which must stay visible for exceptions
    and ``dynamic_cast`` across libraries. Prints the counts."""
    if not shutil.which("nm"):
        return ["cannot check exported symbols: no nm"]
    listing = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True)
    if listing.returncode != 0:
        return [f"nm failed: {listing.stderr.strip()}"]
    symbols = [line.split()[-2:] for line in listing.stdout.splitlines() if len(line.split()) >= 2]
    functions = [name for kind, name in symbols if name.startswith("__tvm_ffi_")]
    vague = [name for kind, name in symbols if not name.startswith("__tvm_ffi_") and kind in "VWu"]
    other = [name for kind, name in symbols if not name.startswith("__tvm_ffi_") and kind not in "VWu"]
    print(f"  exports {len(functions)} __tvm_ffi_ symbols and {len(vague)} C++ vague-linkage symbols")
    if not functions:
        return ["exports no __tvm_ffi_ function"]
    if other:
        return [f"exported symbols beyond __tvm_ffi_ and vague linkage: {' '.join(sorted(other))}"]
    return []


def check_library(
    zf: zipfile.ZipFile,
    member: str,
    cuda: str | None,
    archs: str | None,
    cuobjdump: str | None,
    min_driver: str | None,
    forbidden: list[str],
    facts: dict | None = None,
) -> tuple[list[str], float]:
    """The checks of one library in the wheel: (problems, its size in MiB); what they find is
    recorded in ``facts``."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        library = Path(zf.extract(member, tmp))
        if shutil.which("readelf"):
            dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
            needed = re.findall(r"\(NEEDED\).*\[(.+)\]", dynamic)
            for lib in needed:
                if lib.startswith(("libcudart", "libpython")):
                    problems.append(
                        f"{Path(member).name} needs {lib}: cudart must be static, libpython absent"
                    )
        binary = library.read_bytes()
        library_mib = len(binary) / 2**20
        named = build_paths(binary, forbidden, Path(member).name)
        checked = ", ".join([*forbidden, "build-env-*", "build-via-sdist-*"])
        print(f"  build machine paths: {'FOUND' if named else 'none'} (looked for {checked})")
        problems += named
        problems += check_undefined_cuda_symbols(library)
        problems += check_exported_symbols(library)
        if cuda:
            problems += check_cuda_runtime(binary, cuda)
            if not cuobjdump:
                problems.append("cannot read the device code: no cuobjdump (--cuobjdump or $CUOBJDUMP)")
            else:
                sass_driver = min_driver or f"{cuda.split('.')[0]}.0"
                problems += check_device_code(binary, cuobjdump, sass_driver, cuda, forbidden, facts)
                if facts is not None:
                    facts["cuda"] = cuda
        if archs:
            if not cuobjdump:
                problems.append("cannot check architectures: no cuobjdump (--cuobjdump or $CUOBJDUMP)")
            else:
                problems += check_architectures(binary, archs, cuobjdump)
    return problems, library_mib


def check(
    wheel: Path,
    cuda: str | None = None,
    archs: str | None = None,
    cuobjdump: str | None = None,
    max_mib: float | None = None,
    min_driver: str | None = None,
    forbidden: list[str] | None = None,
    libraries: dict[str, str] | None = None,
    facts: dict | None = None,
) -> list[str]:
    """The checks of one wheel; what they find (its platform tag, glibc floor and each library's
    code and driver needs) is recorded in ``facts`` under the wheel's CPU architecture."""
    problems = []
    forbidden = sorted({str(ROOT), *(forbidden or [])})
    match = re.fullmatch(r"(?P<dist>[A-Za-z0-9_]+)-(?P<version>[^-]+)-(?P<tags>.+)\.whl", wheel.name)
    if not match:
        return [f"{wheel.name}: not a wheel file name"]
    package = match["dist"].lower()
    python_tag, abi_tag, platform = match["tags"].split("-", 2)
    if (python_tag, abi_tag) != ("py3", "none"):
        problems.append(f"tag {python_tag}-{abi_tag}: expected py3-none (one wheel for every Python 3)")
    if not re.match(r"(linux|manylinux|musllinux)", platform):
        problems.append(f"platform tag {platform}: expected a Linux platform")

    # The libraries to check: lib<package>.so, or those --library names (the release wheel's
    # CUDA 12 and CUDA 13 ones), each with its CUDA version.
    targets = libraries or {package: cuda}
    cpu = "x86_64" if platform.endswith("x86_64") else platform.rsplit("_", 1)[-1]
    wheel_facts: dict = {"tag": platform, "libraries": {}}
    glibc = re.match(r"manylinux_(\d+)_(\d+)_", platform)
    if glibc:
        wheel_facts["glibc"] = f"{glibc[1]}.{glibc[2]}"
    if facts is not None:
        facts[cpu] = wheel_facts
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        required_files = [f"{package}/__init__.py", f"{package}/py.typed"]
        for required in [*required_files, *(f"{package}/lib{name}.so" for name in targets)]:
            if required not in names:
                problems.append(f"missing {required}")
        shipped = sorted(n for n in names if re.fullmatch(rf"{package}/lib\w+\.so", n))
        if shipped != sorted(f"{package}/lib{name}.so" for name in targets):
            problems.append(f"libraries {shipped}: expected {sorted(targets)}")
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

        library_mib = 0.0
        for name, library_cuda in targets.items():
            if f"{package}/lib{name}.so" not in names:
                continue
            if libraries:
                print(f"  lib{name}.so (CUDA {library_cuda}):")
            library_archs = default_architectures(library_cuda) if libraries and library_cuda else archs
            library_min_driver = None if libraries else min_driver
            found, mib = check_library(
                zf,
                f"{package}/lib{name}.so",
                library_cuda,
                library_archs,
                cuobjdump,
                library_min_driver,
                forbidden,
                wheel_facts["libraries"].setdefault(name, {}),
            )
            problems += found
            library_mib += mib
    size_mb = wheel.stat().st_size / 2**20
    if max_mib is not None and size_mb > max_mib:
        problems.append(f"{size_mb:.1f} MiB: larger than the --max-mib {max_mib} bound")
    print(
        f"{wheel.name}: {size_mb:.1f} MiB ({library_mib:.1f} MiB of "
        f"{'libraries' if len(targets) > 1 else 'library'} unpacked), {len(names)} files, "
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
    parser.add_argument(
        "--min-driver",
        help="the oldest CUDA driver the wheel declares (default: CUDA <major>.0): all machine "
        "code must load on it; PTX may need up to the --cuda version",
    )
    parser.add_argument(
        "--forbid-path",
        action="append",
        default=[],
        help="a directory of the build machine the library must not name (repeatable; this "
        "source tree always)",
    )
    parser.add_argument(
        "--library",
        action="append",
        default=[],
        metavar="NAME=CUDA",
        help="a library the wheel holds, lib<NAME>.so, built with CUDA (e.g. scale_lib_cu13=13.0): "
        "checked as --cuda CUDA --archs default with the driver floor CUDA <major>.0 "
        "(repeatable: the release wheel's CUDA 12 and CUDA 13 libraries; then exactly these)",
    )
    parser.add_argument(
        "--summary",
        type=Path,
        metavar="JSON",
        help="record what the checks found (each wheel's tag and glibc floor, each library's CUDA, "
        "architectures and driver needs) in this file, under the wheel's CPU architecture, keeping "
        "the other architectures' entries: the README's platform rows are rendered from it",
    )
    args = parser.parse_args(argv)
    libraries = dict(item.split("=", 1) for item in args.library)
    if libraries and (args.cuda or args.archs or args.min_driver):
        parser.error("--library gives each library's CUDA version: no --cuda, --archs or --min-driver")
    if not args.wheels:
        print(__doc__)
        return 2
    archs = args.archs
    if archs == "default":
        if not args.cuda:
            parser.error("--archs default needs --cuda")
        archs = default_architectures(args.cuda)
    facts: dict = {}
    problems = [
        f"{wheel.name}: {issue}"
        for wheel in args.wheels
        for issue in check(
            wheel,
            args.cuda,
            archs,
            args.cuobjdump,
            args.max_mib,
            args.min_driver,
            args.forbid_path,
            libraries or None,
            facts,
        )
    ]
    for problem in problems:
        print("  " + problem)
    if args.summary and not problems:
        write_summary(args.summary, facts)
    return 1 if problems else 0


def write_summary(path: Path, facts: dict) -> None:
    """``facts`` merged into the JSON file at ``path`` (one entry per CPU architecture)."""
    summary = json.loads(path.read_text()) if path.is_file() else {}
    summary |= facts
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(summary.items())), indent=2) + "\n")
    print(f"recorded in {path}: {', '.join(sorted(facts))}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
