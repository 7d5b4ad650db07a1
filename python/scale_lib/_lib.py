"""Loading the compiled library.

``LIB`` is the TVM-FFI module of ``libscale_lib.so``; its functions are the bare ABI
(outputs first, e.g. ``LIB.scale(out, x, factor)``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import tvm_ffi

_DIST_NAME = "scale-lib"
_TARGET_NAME = "scale_lib"  # CMake target: libscale_lib.so


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


_rebuild_if_editable()
LIB: tvm_ffi.Module = _load()

BUILD_INFO: dict[str, Any] = dict(LIB.build_info())
WITH_CUDA: bool = bool(BUILD_INFO["cuda"])
