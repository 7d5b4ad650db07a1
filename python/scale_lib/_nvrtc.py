# SPDX-License-Identifier: Apache-2.0
"""Kernels compiled at run time: NVRTC (loaded lazily through ctypes) compiles a CUDA source to a
CUBIN specialised on values known only at the call, cached in memory and on disk.

The C++ side (kernels/runtime_kernel.cu) calls :func:`cubin` through the global function
``scale_lib.nvrtc_cubin`` the first time a process needs a specialisation, then keeps the loaded
module. Without NVRTC, :func:`cubin` returns ``None`` and the op runs its ahead-of-time kernel.

Environment:

- ``SCALE_LIB_NVRTC``: the path of a ``libnvrtc.so`` to use, or ``0`` for none (no runtime
  compilation: every op runs its ahead-of-time kernel).
- ``SCALE_LIB_CACHE_DIR``: the on-disk cache (default ``$XDG_CACHE_HOME/scale_lib/nvrtc``, else
  ``~/.cache/scale_lib/nvrtc``); ``0`` keeps the cache in memory only.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import struct
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import tvm_ffi

from ._lib import BUILD_INFO

SOURCES = Path(__file__).resolve().parent / "nvrtc_kernels"
"""The runtime-compiled kernels: ``<op>.cu``, compiled with one ``-D`` per specialisation value."""

EXTRA = "scale-lib[nvrtc]"
"""The optional dependency that brings NVRTC (NVIDIA's PyPI wheel for the library's CUDA major)."""


class NvrtcError(RuntimeError):
    """NVRTC failed to compile a kernel; the message carries NVRTC's log."""


tvm_ffi.register_error("NvrtcError", NvrtcError)


# [nvrtc_loader.begin]
def _cuda_major() -> int | None:
    """The CUDA major version the library was built with (None for a CPU-only build)."""
    version = BUILD_INFO.get("cuda_version") if BUILD_INFO.get("cuda") else None
    return int(str(version).split(".")[0]) if version else None


def _candidates(cuda_major: int | None) -> list[str]:
    """Where to look for libnvrtc, best first: NVIDIA's PyPI wheel of the library's CUDA major
    (its cubins need the driver that major needs, which the library needs anyway), then the
    system's. A CPU-only build (which launches nothing) takes the newest it finds."""
    wheel_dirs = {13: ("nvidia", "cu13", "lib"), 12: ("nvidia", "cuda_nvrtc", "lib")}
    majors = [cuda_major] if cuda_major in wheel_dirs else [13, 12]
    found = []
    for major in majors:
        for root in sys.path:
            path = Path(root or ".", *wheel_dirs[major], f"libnvrtc.so.{major}")
            if path.is_file():
                found.append(str(path))
        found.append(f"libnvrtc.so.{major}")  # the system's (ld.so's search path)
    return found


class Nvrtc:
    """The functions of one loaded libnvrtc."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path)
        for name in ("nvrtcGetErrorString",):
            getattr(self.lib, name).restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)
        count = ctypes.c_int()
        self._check(self.lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "archs")
        archs = (ctypes.c_int * count.value)()
        self._check(self.lib.nvrtcGetSupportedArchs(archs), "archs")
        self.archs = tuple(archs)

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            message = self.lib.nvrtcGetErrorString(status).decode()
            raise NvrtcError(f"NVRTC ({self.path}): {what} failed: {message}")

    def compile(self, source: str, name: str, options: list[str]) -> bytes:
        """The CUBIN of ``source``; NvrtcError with NVRTC's log if it does not compile."""
        program = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            encoded = [o.encode() for o in options]
            status = self.lib.nvrtcCompileProgram(
                program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded)
            )
            if status != 0:
                size = ctypes.c_size_t()
                self.lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
                log = ctypes.create_string_buffer(size.value)
                self.lib.nvrtcGetProgramLog(program, log)
                message = self.lib.nvrtcGetErrorString(status).decode()
                raise NvrtcError(
                    f"NVRTC {self.version[0]}.{self.version[1]} could not compile {name} "
                    f"({' '.join(options)}): {message}\n{log.value.decode(errors='replace')}"
                )
            size = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
            cubin = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
            return cubin.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(program))


_lock = threading.Lock()
_loaded: list[Nvrtc | None] = []  # empty until the first look


def nvrtc() -> Nvrtc | None:
    """The libnvrtc this process uses, loaded at the first call; None where there is none (or
    ``SCALE_LIB_NVRTC=0``)."""
    with _lock:
        if not _loaded:
            chosen = os.environ.get("SCALE_LIB_NVRTC", "")
            if chosen == "0":
                _loaded.append(None)
            else:
                found = None
                for path in [chosen] if chosen else _candidates(_cuda_major()):
                    try:
                        found = Nvrtc(path)
                        break
                    except (OSError, AttributeError, NvrtcError):
                        continue
                _loaded.append(found)
        return _loaded[0]


# [nvrtc_loader.end]


def reset() -> None:
    """Forget the loaded NVRTC and the in-memory cache (the environment is read again)."""
    with _lock:
        _loaded.clear()
        _memory.clear()
        _warned.clear()


# [nvrtc_cache.begin]
MAGIC = b"SCLBCUBN"
_HEADER = struct.Struct("<8sQ32s")  # magic, CUBIN length, sha256 of the CUBIN
_memory: dict[str, bytes] = {}
_warned: set[str] = set()


def cache_dir() -> Path | None:
    """The on-disk cache directory (None: ``SCALE_LIB_CACHE_DIR=0``, memory only)."""
    chosen = os.environ.get("SCALE_LIB_CACHE_DIR")
    if chosen == "0":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "scale_lib", "nvrtc")


def cache_key(source: str, defines: dict[str, str], arch: int, nvrtc_version: tuple[int, int]) -> str:
    """The cache key: a hash of everything the CUBIN depends on."""
    what = {
        "source": hashlib.sha256(source.encode()).hexdigest(),
        "defines": sorted(defines.items()),
        "arch": arch,
        "nvrtc": list(nvrtc_version),
        "scale_lib": BUILD_INFO["version"],
        "format": MAGIC.decode(),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _usable_dir(directory: Path) -> bool:
    """Creates the directory (0700) if needed; True if it is the user's own and not writable by
    others (its files are code the process runs)."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def read_cached(path: Path) -> bytes | None:
    """The CUBIN in ``path`` if the file is whole and unaltered (magic, length, sha256), else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < _HEADER.size:
        return None
    magic, length, digest = _HEADER.unpack_from(data)
    cubin = data[_HEADER.size :]
    if magic != MAGIC or length != len(cubin) or hashlib.sha256(cubin).digest() != digest:
        return None
    return cubin


def write_cached(path: Path, cubin: bytes) -> bool:
    """Writes atomically: a private temporary file in the same directory, then os.replace, so
    a reader sees the old file, no file or the whole new one. False if it could not."""
    data = _HEADER.pack(MAGIC, len(cubin), hashlib.sha256(cubin).digest()) + cubin
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return False


def compile_cached(op: str, source: str, defines: dict[str, str], arch: int) -> bytes | None:
    """The CUBIN of ``source`` specialised by ``defines`` for ``sm_<arch>``: from memory, else
    from a verified cache file, else compiled (and stored). None without NVRTC, or when NVRTC
    does not know the architecture (the caller then runs its ahead-of-time kernel)."""
    compiler = nvrtc()
    if compiler is None or arch not in compiler.archs:
        return None
    key = cache_key(source, defines, arch, compiler.version)
    cubin = _memory.get(key)
    if cubin is not None:
        return cubin
    directory = cache_dir()
    path = None
    if directory is not None:
        if _usable_dir(directory):
            path = directory / f"{op}-sm{arch}-{key[:32]}.cubin"
            cubin = read_cached(path)  # None also for a torn or altered file: rebuilt below
        else:
            _warn_once(
                str(directory),
                f"scale_lib: the kernel cache {directory} cannot be used (not creatable, not "
                "owned by this user, or writable by others); kernels are compiled in memory "
                "for this process only. Set SCALE_LIB_CACHE_DIR to another directory.",
            )
    if cubin is None:
        options = ["-std=c++17", f"--gpu-architecture=sm_{arch}"]
        options += [f"-D{name}={value}" for name, value in sorted(defines.items())]
        cubin = compiler.compile(source, f"{op}.cu", options)
        if path is not None and not write_cached(path, cubin):
            _warn_once(
                str(directory),
                f"scale_lib: cannot write to the kernel cache {directory}; kernels are compiled "
                "in memory for this process only. Set SCALE_LIB_CACHE_DIR to a writable directory.",
            )
    _memory[key] = cubin
    return cubin


def clear_cache() -> None:
    """Empties the kernel cache: this process's memory and the files of the cache directory."""
    _memory.clear()
    directory = cache_dir()
    if directory is None or not directory.is_dir():
        return
    for path in directory.glob("*.cubin"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# [nvrtc_cache.end]


def cubin(op: str, defines: Any, arch: int) -> bytes | None:
    """What the C++ side calls (``scale_lib.nvrtc_cubin``): ``defines`` are ``NAME=VALUE``."""
    source = (SOURCES / f"{op}.cu").read_text()
    values = dict(str(d).split("=", 1) for d in defines)
    return compile_cached(op, source, values, int(arch))


tvm_ffi.register_global_func("scale_lib.nvrtc_cubin", cubin, override=True)
