"""Loading the compiled library.

``LIB`` is the TVM-FFI module of ``libscale_lib.so``; its functions are the bare ABI
(outputs first, e.g. ``LIB.scale(out, x, factor)``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import tvm_ffi

_DIST_NAME = "scale-lib"
_TARGET_NAME = "scale_lib"  # CMake target: libscale_lib.so

# [tvm_ffi_range.begin]
# The apache-tvm-ffi releases this package supports, [lowest, below): the same range as the
# dependency in pyproject.toml (a test checks that they agree); `nox -s tests_tvm_ffi_lowest
# tests_tvm_ffi_highest` runs the suite at both ends.
TVM_FFI_LOWEST = (0, 1, 11)
TVM_FFI_BELOW = (0, 2)
# [tvm_ffi_range.end]


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "0.1.15.post2" -> (0, 1, 15)."""
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else ()


def _dotted(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


def check_tvm_ffi_version(installed: str) -> None:
    """ImportError unless the installed apache-tvm-ffi is within the supported range."""
    if not TVM_FFI_LOWEST <= _release(installed) < TVM_FFI_BELOW:
        wanted = f">={_dotted(TVM_FFI_LOWEST)},<{_dotted(TVM_FFI_BELOW)}"
        raise ImportError(
            f"scale_lib supports apache-tvm-ffi {wanted}, but apache-tvm-ffi {installed} is "
            f"installed. Install a supported version: pip install 'apache-tvm-ffi{wanted}'"
        )


def check_tvm_ffi_abi(compiled: str, loaded: str, installed: str) -> None:
    """ImportError when the TVM-FFI headers the library was compiled against and the loaded
    libtvm_ffi differ in major.minor version: the headers' inline code (object layouts, calling
    conventions) is part of the ABI, and a mismatch would fail later, or crash, in a kernel call."""
    if _release(compiled)[:2] != _release(loaded)[:2]:
        raise ImportError(
            f"libscale_lib.so was compiled against TVM-FFI {compiled}, but the loaded libtvm_ffi "
            f"is TVM-FFI {loaded} (apache-tvm-ffi {installed}); they are not ABI compatible. "
            "Install the scale-lib wheel built for this TVM-FFI, or rebuild scale_lib from source"
        )


def _rebuild_if_editable() -> None:
    # A scikit-build-core editable install rebuilds when a compiled Python module is imported.
    # The library is loaded through tvm_ffi instead, so ask the package's loader directly (only
    # an editable install's loader has rebuild()).
    rebuild = getattr(getattr(sys.modules[__package__], "__spec__", None), "loader", None)
    rebuild = getattr(rebuild, "rebuild", None)
    if callable(rebuild):
        rebuild()


def _load() -> tvm_ffi.Module:
    # The wheel's RECORD finds normal installs. The package's own search path covers the rest:
    # a scikit-build-core editable install adds its build output directory to it, and a source
    # tree on PYTHONPATH may hold the library next to the sources.
    package_dirs = [Path(p) for p in sys.modules[__package__].__path__]
    return tvm_ffi.libinfo.load_lib_module(_DIST_NAME, _TARGET_NAME, extra_lib_paths=package_dirs)


check_tvm_ffi_version(tvm_ffi.__version__)
_rebuild_if_editable()
LIB: tvm_ffi.Module = _load()

BUILD_INFO: dict[str, Any] = dict(LIB.build_info())
check_tvm_ffi_abi(BUILD_INFO["tvm_ffi_compiled"], BUILD_INFO["tvm_ffi_runtime"], tvm_ffi.__version__)
WITH_CUDA: bool = bool(BUILD_INFO["cuda"])
