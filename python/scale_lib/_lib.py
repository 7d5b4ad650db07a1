"""Loading the compiled library.

``LIB`` is the TVM-FFI module of the library; its functions are the bare ABI (outputs first,
e.g. ``LIB.scale(out, x, factor)``). A build from source holds one library, ``libscale_lib.so``.
The release wheel holds two, ``libscale_lib_cu12.so`` (CUDA 12: drivers R525 and newer) and
``libscale_lib_cu13.so`` (CUDA 13: R580 and newer, with machine code for every GPU CUDA 13
knows), of which the import loads the one the installed driver runs (``choose_library``).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import re
import sys
from pathlib import Path
from typing import Any

import tvm_ffi

_DIST_NAME = "scale-lib"
_TARGET_NAME = "scale_lib"  # CMake's SCALE_LIB_LIBRARY_NAME: libscale_lib.so

# [choose_library.begin]
# The release wheel's libraries, by CUDA major, and the oldest driver (cuDriverGetVersion's
# 1000 * major + 10 * minor) that runs each one's machine code.
CUDA_LIBRARIES = {12: "scale_lib_cu12", 13: "scale_lib_cu13"}
CUDA_DRIVER_FLOOR = {12: 12000, 13: 13000}
# SCALE_LIB_CUDA_MAJOR=12 or 13 loads that library whatever the driver (for tests);
# SCALE_LIB_FAKE_CUDA_DRIVER_VERSION=12040 makes the choice (and the library's own driver check,
# kernels/cuda_driver.cu) see that driver version instead of the installed one.
FORCE_ENV = "SCALE_LIB_CUDA_MAJOR"
FAKE_DRIVER_ENV = "SCALE_LIB_FAKE_CUDA_DRIVER_VERSION"


def _cuda_version(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


def choose_library(available: set[str], driver: int, forced: str | None) -> tuple[str, str]:
    """(the library to load, why) among the ``available`` library names, for a driver that
    supports CUDA ``driver`` (cuDriverGetVersion's number, 0 without a driver) and the value of
    SCALE_LIB_CUDA_MAJOR (None when unset)."""
    both = all(name in available for name in CUDA_LIBRARIES.values())
    if forced is not None:
        major = int(forced) if forced.strip() in ("12", "13") else None
        if major is None:
            raise ImportError(f"{FORCE_ENV}={forced!r}: expected 12 or 13 (or unset: chosen by the driver)")
        if not both:
            raise ImportError(
                f"{FORCE_ENV}={forced}: this install holds one library ({', '.join(sorted(available))}); "
                "only the release wheel holds a CUDA 12 and a CUDA 13 library to choose from"
            )
        return CUDA_LIBRARIES[major], f"{FORCE_ENV}={major} forces it"
    if not both:
        (only,) = sorted(available) if len(available) == 1 else (_TARGET_NAME,)
        return only, "the only library in this install"
    if driver >= CUDA_DRIVER_FLOOR[13]:
        return CUDA_LIBRARIES[13], f"the driver supports CUDA {_cuda_version(driver)} (13.0+: R580 or newer)"
    if driver >= CUDA_DRIVER_FLOOR[12]:
        return CUDA_LIBRARIES[12], f"the driver supports CUDA {_cuda_version(driver)} (12.x: R525-R575)"
    if driver > 0:
        return CUDA_LIBRARIES[12], (
            f"the driver supports CUDA {_cuda_version(driver)}, older than either library needs: "
            "CUDA calls will raise"
        )
    return CUDA_LIBRARIES[12], "no NVIDIA driver found (CPU only)"


def driver_version() -> int:
    """The CUDA version the installed driver supports (cuDriverGetVersion through libcuda, no
    CUDA runtime needed), SCALE_LIB_FAKE_CUDA_DRIVER_VERSION's instead when set; 0 without a
    driver."""
    fake = os.environ.get(FAKE_DRIVER_ENV)
    if fake is not None:
        try:
            return int(fake)
        except ValueError:
            raise ImportError(f"{FAKE_DRIVER_ENV}={fake!r}: expected a number such as 12040") from None
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    version = ctypes.c_int(0)
    # cuDriverGetVersion needs no cuInit and succeeds on a machine without GPUs.
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return 0
    return version.value


# [choose_library.end]

# [tvm_ffi_range.begin]
# The apache-tvm-ffi releases this package supports, [lowest, below): the same range as the
# dependency in pyproject.toml, whose build requirement pins the lowest (a test checks that they
# agree). A library also refuses any release older than the one it was compiled against
# (check_tvm_ffi_compiled), so the release wheel is compiled against the lowest. `nox -s
# tests_lowest` runs the suite on the lowest, `nox -s tests` on the newest pip finds.
TVM_FFI_LOWEST = "0.1.15.post2"
TVM_FFI_BELOW = (0, 2)
# [tvm_ffi_range.end]

_PIP_RANGE = f">={TVM_FFI_LOWEST},<{'.'.join(map(str, TVM_FFI_BELOW))}"


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "0.1.15.post2" -> (0, 1, 15)."""
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else ()


_PRE_STAGES = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_VERSION = re.compile(
    r"v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>alpha|beta|preview|pre|rc|a|b|c)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+[a-z0-9.]*)?",
    re.IGNORECASE,
)


def version_key(version: str) -> tuple[Any, ...]:
    """A sort key ordering version strings as pip does (PEP 440: 0.1.15.dev1 < 0.1.15rc1 <
    0.1.15 < 0.1.15.post1 < 0.1.15.post2 < 0.1.16), without depending on `packaging`."""
    match = _VERSION.fullmatch(version.strip())
    if match is None:  # not PEP 440: compare its leading release only
        return (_release(version) + (0,) * 8)[:8], (1,), (-1,), (sys.maxsize,)
    release = tuple(int(p) for p in match["release"].split("."))
    release = (release + (0,) * 8)[:8]
    if match["pre"] is not None:
        pre: tuple[int, ...] = (0, _PRE_STAGES[match["pre"].lower()], int(match["pre_n"] or 0))
    elif match["dev"] is not None and match["post"] is None:
        pre = (-1,)  # 1.0.dev0 comes before 1.0a0
    else:
        pre = (1,)
    post = (-1,) if match["post"] is None else (int(match["post"] or 0),)
    dev = (sys.maxsize,) if match["dev"] is None else (int(match["dev"] or 0),)
    return (release, pre, post, dev)


def _dotted(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


def check_tvm_ffi_version(installed: str) -> None:
    """ImportError unless the installed apache-tvm-ffi is within the supported range."""
    if not (version_key(TVM_FFI_LOWEST) <= version_key(installed) and _release(installed) < TVM_FFI_BELOW):
        raise ImportError(
            f"scale_lib supports apache-tvm-ffi {_PIP_RANGE}, but apache-tvm-ffi {installed} is "
            f"installed. Install a supported version: pip install 'apache-tvm-ffi{_PIP_RANGE}'"
        )


def check_tvm_ffi_compiled(compiled: str, installed: str) -> None:
    """ImportError when the installed apache-tvm-ffi is older than the release the library was
    compiled against: its headers' inline code (object layouts, vtables, calling conventions) is
    part of the ABI, and can change between patch and even .post releases of 0.1."""
    if version_key(installed) < version_key(compiled):
        below = _dotted(TVM_FFI_BELOW)
        raise ImportError(
            f"libscale_lib.so was compiled against apache-tvm-ffi {compiled}, but apache-tvm-ffi "
            f"{installed} is installed, which is older. Install that release or a newer one: "
            f"pip install 'apache-tvm-ffi>={compiled},<{below}' (or rebuild scale_lib from "
            "source against the installed one)"
        )


def check_tvm_ffi_abi(compiled: str, loaded: str, installed: str) -> None:
    """ImportError when the loaded libtvm_ffi is older than the TVM-FFI headers the library was
    compiled against, or of another major.minor version (the versions the C++ headers and the
    library declare: a .postN release declares the next patch). A mismatch would fail later, or
    crash, in a kernel call."""
    if _release(compiled)[:2] != _release(loaded)[:2] or _release(loaded) < _release(compiled):
        raise ImportError(
            f"libscale_lib.so was compiled against TVM-FFI {compiled}, but the loaded libtvm_ffi "
            f"is TVM-FFI {loaded} (apache-tvm-ffi {installed}); they are not ABI compatible. "
            f"Install a supported version (pip install 'apache-tvm-ffi{_PIP_RANGE}'), or rebuild "
            "scale_lib from source against the installed one"
        )


def _rebuild_if_editable() -> None:
    # A scikit-build-core editable install rebuilds when a compiled Python module is imported.
    # The library is loaded through tvm_ffi instead, so ask the package's loader directly (only
    # an editable install's loader has rebuild()).
    rebuild = getattr(getattr(sys.modules[__package__], "__spec__", None), "loader", None)
    rebuild = getattr(rebuild, "rebuild", None)
    if callable(rebuild):
        rebuild()


def _available(package_dirs: list[Path]) -> set[str]:
    """The library names (lib<name>.so) this install holds: in the wheel's RECORD or on the
    package's search path."""
    names = {_TARGET_NAME, *CUDA_LIBRARIES.values()}
    found = {name for name in names for folder in package_dirs if (folder / f"lib{name}.so").is_file()}
    try:
        recorded = importlib.metadata.files(_DIST_NAME) or []
    except importlib.metadata.PackageNotFoundError:
        recorded = []
    found |= {name for name in names for file in recorded if file.name == f"lib{name}.so"}
    return found


def _load() -> tuple[tvm_ffi.Module, str, str]:
    # The wheel's RECORD finds normal installs. The package's own search path covers the rest:
    # a scikit-build-core editable install adds its build output directory to it, and a source
    # tree on PYTHONPATH may hold the library next to the sources.
    package_dirs = [Path(p) for p in sys.modules[__package__].__path__]
    available = _available(package_dirs)
    forced = os.environ.get(FORCE_ENV) or None
    name, reason = choose_library(available, driver_version() if len(available) > 1 else 0, forced)
    module = tvm_ffi.libinfo.load_lib_module(_DIST_NAME, name, extra_lib_paths=package_dirs)
    return module, f"lib{name}.so", reason


check_tvm_ffi_version(tvm_ffi.__version__)
_rebuild_if_editable()
LIB, _LIBRARY, _REASON = _load()

BUILD_INFO: dict[str, Any] = dict(LIB.build_info())
# Which library was loaded and why (python -m scale_lib prints them).
BUILD_INFO["library"] = _LIBRARY
BUILD_INFO["library_reason"] = _REASON
check_tvm_ffi_compiled(BUILD_INFO["apache_tvm_ffi_compiled"], tvm_ffi.__version__)
check_tvm_ffi_abi(BUILD_INFO["tvm_ffi_compiled"], BUILD_INFO["tvm_ffi_runtime"], tvm_ffi.__version__)
WITH_CUDA: bool = bool(BUILD_INFO["cuda"])
