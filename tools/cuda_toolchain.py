#!/usr/bin/env python3
"""Fetch a CUDA toolchain (nvcc, the static CUDA runtime, CCCL) without a system install, lay it
out as a CUDA toolkit, and print the environment that points CMake at it.

    python3 tools/cuda_toolchain.py 12.9 --dest .cuda/12.9
    CUDACXX=/abs/.cuda/12.9/toolkit/bin/nvcc
    CUDAToolkit_ROOT=/abs/.cuda/12.9/toolkit
    CUOBJDUMP=/abs/.cuda/12.9/tools/nvidia/cu13/bin/cuobjdump

Where the pieces come from (versions pinned below, so every build gets the same bits):

- CUDA 13: NVIDIA's PyPI wheels hold the whole toolchain (nvidia-cuda-nvcc, nvidia-nvvm,
  nvidia-cuda-crt, nvidia-cuda-runtime, nvidia-cuda-cccl); they install into one
  toolkit-shaped directory, nvidia/cu13.
- CUDA 12: the PyPI wheels hold the CUDA runtime (nvidia-cuda-runtime-cu12: headers,
  libcudart_static.a) and CCCL (nvidia-cuda-cccl-cu12), but nvidia-cuda-nvcc-cu12 holds only
  ptxas and libnvvm (for JIT users such as JAX), not the nvcc driver, cicc, cudafe++, fatbinary
  or nvlink. The compiler therefore comes from NVIDIA's redistributable archive of the same
  release (cuda_nvcc-<platform>-<version>-archive.tar.xz, checked against the SHA-256 in
  NVIDIA's release manifest), downloaded here or given with --nvcc-archive (a file or URL).

The files land under site-packages-style directories (nvidia/...), not a toolkit layout, so
DEST/toolkit is synthesized: a directory of symlinks merging the pieces (bin/ holds copies,
because nvcc finds its toolkit relative to its own real path). cuobjdump comes from the
nvidia-cuda-cuobjdump wheel (CUDA 13; it reads CUDA 12 binaries too) for tools/check_wheel.py.

Everything is cached in DEST: a second run with the same versions downloads nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

REDIST = "https://developer.download.nvidia.com/compute/cuda/redist"

# CUDA version -> where its pieces come from. "wheels": pinned PyPI requirements; "roots": the
# directories (relative to the install target) merged into the toolkit, in order; "redist": the
# NVIDIA release manifest the nvcc archive comes from, when PyPI has no nvcc for that version.
TOOLCHAINS: dict[str, dict[str, object]] = {
    "12.9": {
        "wheels": ["nvidia-cuda-runtime-cu12==12.9.79", "nvidia-cuda-cccl-cu12==12.9.27"],
        "roots": ["nvidia/cuda_runtime", "nvidia/cuda_cccl"],
        "redist": "12.9.1",
        "nvcc": "12.9.86",
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


def _log(message: str) -> None:
    print(f"cuda_toolchain: {message}", file=sys.stderr, flush=True)


def _pip_install(requirements: list[str], target: Path) -> None:
    """pip install --target, once per requirement list (a stamp file records it)."""
    stamp = target / ".requirements"
    wanted = "\n".join(requirements)
    if stamp.exists() and stamp.read_text() == wanted:
        return
    shutil.rmtree(target, ignore_errors=True)
    _log(f"pip install {' '.join(requirements)} -> {target}")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    subprocess.run([*pip, *requirements], check=True)
    stamp.write_text(wanted)


def _redist_platform() -> str:
    machine = platform.machine()
    return {"x86_64": "linux-x86_64", "aarch64": "linux-sbsa"}.get(machine, f"linux-{machine}")


def _fetch_nvcc_archive(spec: dict[str, object], dest: Path, archive: str | None) -> Path:
    """The cuda_nvcc redistributable archive, extracted under dest; returns its root."""
    version = str(spec["nvcc"])
    root = dest / f"cuda_nvcc-{version}"
    if (root / "bin" / "nvcc").exists():
        return root
    plat = _redist_platform()
    expected_sha256 = None
    if archive is None:
        manifest_url = f"{REDIST}/redistrib_{spec['redist']}.json"
        _log(f"reading {manifest_url}")
        try:
            with urllib.request.urlopen(manifest_url, timeout=60) as response:
                entry = json.load(response)["cuda_nvcc"]
        except OSError as error:
            sys.exit(
                f"cuda_toolchain: cannot read {manifest_url} ({error}).\nPyPI has no CUDA "
                f"{version} nvcc (nvidia-cuda-nvcc-cu12 holds only ptxas and libnvvm); download "
                f"cuda_nvcc-{plat}-{version}-archive.tar.xz from {REDIST}/cuda_nvcc/{plat}/ and "
                "pass it with --nvcc-archive (or set SCALE_LIB_NVCC_ARCHIVE)."
            )
        if entry["version"] != version:
            sys.exit(f"cuda_toolchain: the manifest lists cuda_nvcc {entry['version']}, not {version}")
        archive = f"{REDIST}/{entry[plat]['relative_path']}"
        expected_sha256 = entry[plat]["sha256"]
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        local = Path(archive)
        if not local.exists():
            local = Path(tmp) / Path(archive).name
            _log(f"downloading {archive}")
            with urllib.request.urlopen(archive, timeout=600) as response, local.open("wb") as f:
                shutil.copyfileobj(response, f)
        digest = hashlib.sha256(local.read_bytes()).hexdigest()
        if expected_sha256 and digest != expected_sha256:
            sys.exit(f"cuda_toolchain: {archive} has SHA-256 {digest}, expected {expected_sha256}")
        _log(f"extracting {local.name} (sha256 {digest})")
        with tarfile.open(local) as tar:
            tar.extractall(tmp, filter="data")
        (extracted,) = [p for p in Path(tmp).iterdir() if p.is_dir() and p.name.startswith("cuda_nvcc")]
        if not (extracted / "bin" / "nvcc").exists():
            sys.exit(f"cuda_toolchain: {archive} holds no bin/nvcc")
        shutil.rmtree(root, ignore_errors=True)
        extracted.rename(root)
    return root


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


def make_toolkit(cuda: str, dest: Path, nvcc_archive: str | None = None) -> dict[str, str]:
    """Fetch (or reuse) the toolchain for CUDA `cuda` under dest; return the environment for CMake."""
    if cuda not in TOOLCHAINS:
        sys.exit(f"cuda_toolchain: no recipe for CUDA {cuda}; known: {', '.join(TOOLCHAINS)}")
    spec = TOOLCHAINS[cuda]
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    wheels = dest / "wheels"
    _pip_install(list(spec["wheels"]), wheels)  # type: ignore[call-overload]
    _pip_install([CUOBJDUMP_WHEEL], dest / "tools")
    roots = [wheels / r for r in spec["roots"]]  # type: ignore[attr-defined]
    if "nvcc" in spec:
        roots.insert(0, _fetch_nvcc_archive(spec, dest, nvcc_archive))

    toolkit = dest / "toolkit"
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
        "--nvcc-archive",
        default=os.environ.get("SCALE_LIB_NVCC_ARCHIVE"),
        help="CUDA 12: the cuda_nvcc redistributable archive (file or URL) instead of NVIDIA's server",
    )
    args = parser.parse_args(argv)
    dest = args.dest or Path(__file__).resolve().parent.parent / ".cuda" / args.cuda
    for key, value in make_toolkit(args.cuda, dest, args.nvcc_archive).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
