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
check_tvm_ffi_compiled(BUILD_INFO["apache_tvm_ffi_compiled"], tvm_ffi.__version__)
check_tvm_ffi_abi(BUILD_INFO["tvm_ffi_compiled"], BUILD_INFO["tvm_ffi_runtime"], tvm_ffi.__version__)
WITH_CUDA: bool = bool(BUILD_INFO["cuda"])
