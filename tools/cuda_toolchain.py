#!/usr/bin/env python3
"""Fetch a CUDA toolchain (nvcc, the static CUDA runtime, CCCL) without a system install, lay it
out as a CUDA toolkit, and print the environment that points CMake at it.

    python3 tools/cuda_toolchain.py 12.4 --dest .cuda/12.4
    CUDACXX=/abs/.cuda/12.4/toolkit/bin/nvcc
    CUDAToolkit_ROOT=/abs/.cuda/12.4/toolkit
    CUOBJDUMP=/abs/.cuda/12.4/tools/nvidia/cu13/bin/cuobjdump

Where the pieces come from (versions and digests pinned below, so every build gets the same bits):

- CUDA 13: NVIDIA's PyPI wheels hold the whole toolchain (nvidia-cuda-nvcc, nvidia-nvvm,
  nvidia-cuda-crt, nvidia-cuda-runtime, nvidia-cuda-cccl); they install into one
  toolkit-shaped directory, nvidia/cu13.
- CUDA 12: NVIDIA's PyPI wheels hold no nvcc driver, cicc, cudafe++, fatbinary or nvlink
  (nvidia-cuda-nvcc-cu12 has only ptxas, libnvvm and the crt headers). Those come from Debian's
  nvidia-cuda-toolkit package (CUDA 12.4.131, suite trixie, section non-free), fetched with
  `apt-get download` from the Debian mirror this machine's apt sources name (only the suite
  changes; --debian-mirror or $SCALE_LIB_DEBIAN_MIRROR names another) into a private apt state
  directory, checked against the SHA-256 pinned here and unpacked with `dpkg -x`: nothing is
  installed system-wide. The headers come from the 12.4 PyPI wheels (nvidia-cuda-runtime-cu12,
  nvidia-cuda-nvcc-cu12: crt/ and libdevice), CCCL 2.8 from nvidia-cuda-cccl-cu12 12.9 (CUDA
  12.4's own CCCL 2.3 lacks <cuda/cmath>), and libcudart_static.a from nvidia-cuda-runtime-cu12
  12.9 (the 12.4 wheel has none; the 12.9 static runtime runs on every CUDA 12 driver). The
  library relocates no device code, so libcudadevrt.a is an empty archive (CMake's compiler check
  links it; nvlink 12.4 rejects the 12.9 one).

The files land under site-packages-style directories (nvidia/...) and /usr/..., not a toolkit
layout, so DEST/toolkit is synthesized: a directory of symlinks merging the pieces (bin/ holds
copies, because nvcc finds its toolkit relative to its own real path). cuobjdump comes from the
nvidia-cuda-cuobjdump wheel (CUDA 13; it reads CUDA 12 binaries too) for tools/check_wheel.py.

Everything is cached in DEST: a second run with the same versions downloads nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# CUDA version -> where its pieces come from. "wheels": pinned PyPI requirements; "roots": the
# directories (relative to the install target) merged into the toolkit, in order; "debian": the
# Debian package holding the compiler, when PyPI has none for that version.
TOOLCHAINS: dict[str, dict[str, object]] = {
    "12.4": {
        "wheels": [
            "nvidia-cuda-runtime-cu12==12.4.127",
            "nvidia-cuda-nvcc-cu12==12.4.131",
            "nvidia-cuda-cccl-cu12==12.9.27",
        ],
        # CCCL first: its cuda/, cub/ and thrust/ win over anything older.
        "roots": ["nvidia/cuda_cccl", "nvidia/cuda_runtime", "nvidia/cuda_nvcc"],
        "static_runtime": "nvidia-cuda-runtime-cu12==12.9.79",
        "debian": {
            "suite": "trixie",
            "component": "non-free",
            "package": "nvidia-cuda-toolkit",
            "version": "12.4.131~12.4.1-2",
            "sha256": "cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319",
        },
    },
    "13.0": {
        "wheels": [
            "nvidia-cuda-nvcc==13.0.88",
            "nvidia-nvvm==13.0.88",
            "nvidia-cuda-crt==13.0.88",
            "nvidia-cuda-runtime==13.0.96",
            "nvidia-cuda-cccl==13.0.85",
        ],
        "roots": ["nvidia/cu13"],
    },
}
# The oldest cuobjdump on PyPI; it lists CUDA 12 and 13 fatbins alike.
CUOBJDUMP_WHEEL = "nvidia-cuda-cuobjdump==13.2.86"
# The Debian package's programs that make up the nvcc toolchain (usr/bin and its private bin/).
DEBIAN_PROGRAMS = ["nvcc", "cicc", "cudafe++", "ptxas", "fatbinary", "nvlink", "bin2c", "nvprune"]
# nvcc.profile for the synthesized layout (the Debian one points at /usr).
NVCC_PROFILE = """\
TOP = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH += $(_HERE_):
INCLUDES += "-I$(TOP)/include" $(_SPACE_)
LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS +=
PTXAS_FLAGS +=
"""


def _log(message: str) -> None:
    print(f"cuda_toolchain: {message}", file=sys.stderr, flush=True)


# The pip platform tags of each target architecture's wheels (NVIDIA's are manylinux2014).
TARGETS = {"x86_64": [], "aarch64": ["--platform", "manylinux2014_aarch64", "--only-binary=:all:"]}


def _pip_install(requirements: list[str], target: Path, platform: list[str] | None = None) -> None:
    """pip install --target, once per requirement list (a stamp file records it); `platform`:
    pip's options that choose another architecture's wheels."""
    stamp = target / ".requirements"
    wanted = "\n".join([*(platform or []), *requirements])
    if stamp.exists() and stamp.read_text() == wanted:
        return
    shutil.rmtree(target, ignore_errors=True)
    _log(f"pip install {' '.join(requirements)} -> {target}")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    subprocess.run([*pip, *(platform or []), *requirements], check=True)
    if platform:  # another architecture's programs cannot run here: the compiler is this machine's
        for programs in [*target.glob("nvidia/*/bin"), *target.glob("nvidia/*/nvvm/bin")]:
            shutil.rmtree(programs)
    stamp.write_text(wanted)


def _debian_mirror(given: str | None) -> str:
    """The Debian mirror: the one given, else the first Debian URI in the apt sources."""
    if given:
        return given.rstrip("/")
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        if not source.is_file() or not source.name.endswith((".list", ".sources")):
            continue
        for uri in re.findall(r"(?:^deb\s+(?:\[[^]]*\]\s+)?|^URIs:\s*)(\S+)", source.read_text(), re.M):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    sys.exit(
        "cuda_toolchain: no Debian mirror in the apt sources: pass --debian-mirror URL (or set "
        "SCALE_LIB_DEBIAN_MIRROR), a Debian archive holding the suite's non-free section"
    )


def apt_download(
    packages: list[tuple[str, str, str]],
    suite: str,
    component: str,
    dest: Path,
    mirror: str | None,
    arch: str = "amd64",
) -> list[Path]:
    """Download Debian packages, each (name, version, SHA-256), of `suite` and Debian
    architecture `arch` into dest/debs with a private apt state (dest/apt: nothing of the
    machine's apt state is read or changed), each checked against its digest. Packages already
    there with the right digest are kept."""
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        sys.exit("apt-get and dpkg are needed to fetch Debian packages (a Debian or Ubuntu machine)")
    debs = dest / "debs"
    debs.mkdir(parents=True, exist_ok=True)

    def path(name: str, version: str) -> Path:
        return debs / f"{name}_{version.replace(':', '%3a')}_{arch}.deb"

    def digest(deb: Path) -> str:
        return hashlib.sha256(deb.read_bytes()).hexdigest()

    wanted = [(n, v, h) for n, v, h in packages if not (path(n, v).exists() and digest(path(n, v)) == h)]
    if wanted:
        url = _debian_mirror(mirror)
        apt = dest / "apt"
        for sub in ("lists/partial", "archives/partial", "etc"):
            (apt / sub).mkdir(parents=True, exist_ok=True)
        source_list = apt / "etc" / "debian.sources"
        source_list.write_text(
            f"Types: deb\nURIs: {url}\nSuites: {suite}\nComponents: {component}\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
        options = [
            f"-oDir::Etc::SourceList={source_list}",
            "-oDir::Etc::SourceParts=/nonexistent",
            f"-oDir::State::Lists={apt / 'lists'}",
            "-oDir::State::Status=/dev/null",  # versions from this suite, not the machine's
            f"-oDir::Cache={apt}",
            f"-oAPT::Architecture={arch}",
            "-oAcquire::Languages=none",
            "-oDebug::NoLocking=1",
        ]
        if os.geteuid() == 0:  # apt's sandbox user could not write to a private directory
            options.append("-oAPT::Sandbox::User=root")
        _log(f"apt-get update ({url} {suite} {component})")
        subprocess.run(["apt-get", *options, "-qq", "update"], check=True)
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            specs = [f"{name}={version}" for name, version, _ in wanted]
            _log(f"apt-get download {' '.join(specs)}")
            subprocess.run(["apt-get", *options, "-qq", "download", *specs], cwd=tmp, check=True)
            for name, version, sha256 in wanted:
                (deb,) = Path(tmp).glob(f"{name}_*.deb")
                found = digest(deb)
                if found != sha256:
                    sys.exit(f"{deb.name} has SHA-256 {found}, expected {sha256}")
                deb.rename(path(name, version))
    return [path(name, version) for name, version, _ in packages]


def _fetch_debian_package(spec: dict[str, str], dest: Path, mirror: str | None) -> Path:
    """The Debian package, downloaded with a private apt state and unpacked under dest."""
    name, version = spec["package"], spec["version"]
    root = dest / f"{name}_{version}"
    if (root / "usr" / "bin" / "nvcc").exists():
        return root
    (deb,) = apt_download([(name, version, spec["sha256"])], spec["suite"], spec["component"], dest, mirror)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        unpacked = Path(tmp) / "root"
        subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
        shutil.rmtree(root, ignore_errors=True)
        unpacked.rename(root)
    deb.unlink()  # unpacked: the archive is not kept
    return root


def _debian_compiler(package: Path, dest: Path) -> Path:
    """A toolkit-shaped directory holding the Debian package's compiler programs."""
    compiler = dest / "compiler"
    shutil.rmtree(compiler, ignore_errors=True)
    bin_dir = compiler / "bin"
    bin_dir.mkdir(parents=True)
    private = package / "usr" / "lib" / "nvidia-cuda-toolkit" / "bin"
    for program in DEBIAN_PROGRAMS:
        found = private / program if (private / program).exists() else package / "usr" / "bin" / program
        shutil.copy2(found, bin_dir / program)
    shutil.copytree(private / "crt", bin_dir / "crt")
    (bin_dir / "nvcc.profile").write_text(NVCC_PROFILE)
    return compiler


def _merge(source: Path, dest: Path, copy: bool) -> None:
    """Overlay source onto dest: symlinks to source's entries (copies when `copy`); directories
    present in both are merged entry by entry. The first source to provide a file wins."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        target = dest / entry.name
        if entry.name.startswith((".", "__")) or entry.name.endswith(".dist-info"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            if target.is_symlink():  # a directory linked by an earlier source: make it real
                previous = target.resolve()
                target.unlink()
                _merge(previous, target, copy)
            if target.exists():
                _merge(entry, target, copy or entry.name == "bin")
            elif copy or entry.name == "bin":
                _merge(entry, target, True)
            else:
                target.symlink_to(entry.resolve())
        elif not target.exists() and not target.is_symlink():
            if copy:
                shutil.copy2(entry, target)
            else:
                target.symlink_to(entry.resolve())


def make_toolkit(
    cuda: str, dest: Path, debian_mirror: str | None = None, target: str = "x86_64"
) -> dict[str, str]:
    """Fetch (or reuse) the toolchain for CUDA `cuda` under dest; return the environment for
    CMake. With another `target` architecture (aarch64), the compiler is still this machine's
    and the headers and the static runtime come from that architecture's wheels (DEST/toolkit-
    <target>, DEST/wheels-<target>, ...)."""
    if cuda not in TOOLCHAINS:
        sys.exit(f"cuda_toolchain: no recipe for CUDA {cuda}; known: {', '.join(TOOLCHAINS)}")
    if target != "x86_64" and "debian" not in TOOLCHAINS[cuda]:
        sys.exit(f"cuda_toolchain: no {target} recipe for CUDA {cuda}; only for CUDA 12.4")
    spec = TOOLCHAINS[cuda]
    platform = TARGETS[target]
    suffix = "" if target == "x86_64" else f"-{target}"
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    wheels = dest / f"wheels{suffix}"
    _pip_install(list(spec["wheels"]), wheels, platform)  # type: ignore[call-overload]
    _pip_install([CUOBJDUMP_WHEEL], dest / "tools")
    roots = [wheels / r for r in spec["roots"]]  # type: ignore[attr-defined]
    if "debian" in spec:
        package = _fetch_debian_package(spec["debian"], dest, debian_mirror)  # type: ignore[arg-type]
        _pip_install([str(spec["static_runtime"])], dest / f"static_runtime{suffix}", platform)
        extra = dest / f"extra{suffix}"
        shutil.rmtree(extra, ignore_errors=True)
        (extra / "lib64").mkdir(parents=True)
        static = next((dest / f"static_runtime{suffix}").glob("nvidia/*/lib/libcudart_static.a"))
        shutil.copy2(static, extra / "lib64")
        (extra / "lib64" / "libcudadevrt.a").write_bytes(b"!<arch>\n")  # an empty archive
        roots = [_debian_compiler(package, dest), *roots, extra]

    toolkit = dest / f"toolkit{suffix}"
    stamp = toolkit / ".sources"
    sources = "\n".join(map(str, roots))
    if not (stamp.exists() and stamp.read_text() == sources):
        shutil.rmtree(toolkit, ignore_errors=True)
        for root in roots:
            _merge(root, toolkit, copy=False)
        if (toolkit / "lib").exists() and not (toolkit / "lib64").exists():
            (toolkit / "lib64").symlink_to("lib")  # FindCUDAToolkit and nvcc look in lib64
        stamp.write_text(sources)
    nvcc = toolkit / "bin" / "nvcc"
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    if f"release {cuda}," not in version:
        sys.exit(f"cuda_toolchain: {nvcc} is not CUDA {cuda}:\n{version}")
    cuobjdump = next((dest / "tools").glob("nvidia/*/bin/cuobjdump"))
    return {"CUDACXX": str(nvcc), "CUDAToolkit_ROOT": str(toolkit), "CUOBJDUMP": str(cuobjdump)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("cuda", choices=sorted(TOOLCHAINS), help="CUDA version")
    parser.add_argument("--dest", type=Path, help="cache directory (default: .cuda/<version>)")
    parser.add_argument(
        "--debian-mirror",
        default=os.environ.get("SCALE_LIB_DEBIAN_MIRROR"),
        help="CUDA 12: the Debian mirror to fetch the compiler from (default: the apt sources')",
    )
    parser.add_argument(
        "--target",
        choices=sorted(TARGETS),
        default="x86_64",
        help="the architecture the code runs on (aarch64: headers and runtime of NVIDIA's aarch64 "
        "(SBSA) wheels, compiled by this machine's nvcc)",
    )
    args = parser.parse_args(argv)
    dest = args.dest or Path(__file__).resolve().parent.parent / ".cuda" / args.cuda
    for key, value in make_toolkit(args.cuda, dest, args.debian_mirror, args.target).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
