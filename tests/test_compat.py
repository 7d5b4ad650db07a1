"""Which TVM-FFI and which NVIDIA driver the library accepts, and the clear errors outside that."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import tvm_ffi

import scale_lib
from scale_lib import _lib
from scale_lib.ops import OPS

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}
    )


def _dotted(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


# ---------------------------------------------------------------------------------------------
# TVM-FFI
# ---------------------------------------------------------------------------------------------
def _pip_range() -> str:
    return f">={_lib.TVM_FFI_LOWEST},<{_dotted(_lib.TVM_FFI_BELOW)}"


def _nox_pins() -> dict[str, str]:
    """noxfile.py's LOWEST: the release of each dependency that `nox -s tests_lowest` installs."""
    block = re.search(r"^LOWEST = \{(.*?)^\}", (ROOT / "noxfile.py").read_text(), re.M | re.S)
    assert block, "noxfile.py defines LOWEST = {...}"
    return dict(re.findall(r'^\s*"([\w-]+)": "([^"]+)",', block.group(1), re.M))


def test_supported_range_is_declared_once() -> None:
    """pyproject.toml's dependency and build requirement, the import-time check and the lowest
    session name one floor: the release wheel is compiled against the lowest supported release,
    which is the one `nox -s tests_lowest` runs on."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert f"apache-tvm-ffi{_pip_range()}" in pyproject["project"]["dependencies"]
    assert f"apache-tvm-ffi=={_lib.TVM_FFI_LOWEST}" in pyproject["build-system"]["requires"]
    assert _nox_pins()["apache-tvm-ffi"] == _lib.TVM_FFI_LOWEST


def test_the_declared_glibc_floor_is_the_checked_one() -> None:
    """The manylinux tag the release sessions require of auditwheel (noxfile.py: MANYLINUX,
    enforced by tools/manylinux.py --expect) is the one the README and the build docs declare."""
    tag = re.search(r'^MANYLINUX = "(manylinux_(\d+)_(\d+))"', (ROOT / "noxfile.py").read_text(), re.M)
    assert tag, "noxfile.py defines MANYLINUX"
    glibc = f"glibc {tag.group(2)}.{tag.group(3)}+"
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| CPUs |"))
    row = re.sub(r"<!-- /?render[^>]*-->", "", row)  # as the page reads (tools/render_docs.py's spans)
    assert tag.group(1) in row and glibc in row, row
    building = (ROOT / "docs" / "building.md").read_text()
    for arch in ("x86_64", "aarch64"):  # both release wheels (build_cuda12, build_aarch64)
        assert f"auditwheel computes {tag.group(1)}_{arch}" in building, arch


def test_framework_floors_are_the_tested_ones() -> None:
    """Every optional dependency's declared floor is the release `nox -s tests_lowest` installs."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    floors: dict[str, str] = {}
    for extra in ("numpy", "torch", "jax", "paddle"):
        for requirement in pyproject["project"]["optional-dependencies"][extra]:
            name, floor = re.match(r"([\w-]+)>=([\w.]+)", requirement).groups()
            floors[name] = floor
    pins = _nox_pins()
    for name, floor in floors.items():
        assert name in pins, f"noxfile.py LOWEST has no pin for {name}"
        assert _lib.version_key(pins[name]) == _lib.version_key(floor), (name, pins[name], floor)
    from scale_lib import _jax, _numpy

    assert _lib.version_key(floors["numpy"]) == _lib.version_key(_numpy.NUMPY_LOWEST)
    assert _lib.version_key(floors["jax"]) == _lib.version_key(_jax.JAX_LOWEST)
    assert _lib.version_key(floors["jax-tvm-ffi"]) == _lib.version_key(_jax.JAX_TVM_FFI_LOWEST)


def test_installed_tvm_ffi_is_supported() -> None:
    _lib.check_tvm_ffi_version(tvm_ffi.__version__)
    _lib.check_tvm_ffi_compiled(scale_lib.build_info()["apache_tvm_ffi_compiled"], tvm_ffi.__version__)


@pytest.mark.parametrize(
    ("version", "release"),
    [("0.1.15.post2", (0, 1, 15)), ("0.1.11", (0, 1, 11)), ("0.2.0rc1", (0, 2, 0)), ("1", (1,))],
)
def test_release_parsing(version: str, release: tuple[int, ...]) -> None:
    assert _lib._release(version) == release


def test_versions_order_as_pip_orders_them() -> None:
    ordered = [
        "0.1.11",
        "0.1.15.dev1",
        "0.1.15rc1",
        "0.1.15",
        "0.1.15.post1.dev0",
        "0.1.15.post1",
        "0.1.15.post2",
        "0.1.16.dev0",
        "0.1.16",
        "0.2.0rc1",
        "0.2",
        "0.10",
    ]
    keys = [_lib.version_key(v) for v in ordered]
    assert keys == sorted(keys)
    assert len({*keys}) == len(keys)
    assert _lib.version_key("0.2") == _lib.version_key("0.2.0")
    assert _lib.version_key("0.1.16+g1234.d20260101") == _lib.version_key("0.1.16")  # local: ignored


@pytest.mark.parametrize(
    "reported", ["0.2.0", "0.2.0rc1", "1.0.0", "0.1.15.post1", "0.1.15", "0.1.11", "0.0.9"]
)
def test_import_refuses_an_unsupported_tvm_ffi(reported: str) -> None:
    # A fresh interpreter where apache-tvm-ffi reports another version: import fails at once,
    # naming the version found and the range needed.
    child = _run(f"import tvm_ffi; tvm_ffi.__version__ = {reported!r}; import scale_lib")
    assert child.returncode != 0
    assert (
        f"ImportError: scale_lib supports apache-tvm-ffi {_pip_range()}, but apache-tvm-ffi {reported} is "
        f"installed. Install a supported version: pip install 'apache-tvm-ffi{_pip_range()}'"
    ) in child.stderr, child.stderr


def test_import_accepts_the_supported_range_ends() -> None:
    newest = f"{_lib.TVM_FFI_BELOW[0]}.{_lib.TVM_FFI_BELOW[1] - 1}.99"
    compiled = scale_lib.build_info()["apache_tvm_ffi_compiled"]
    for reported in (compiled, newest, f"{newest}.post3"):
        child = _run(f"import tvm_ffi; tvm_ffi.__version__ = {reported!r}; import scale_lib")
        assert child.returncode == 0, child.stderr


@pytest.mark.parametrize(
    ("compiled", "installed"),
    [
        ("0.1.15.post2", "0.1.15.post1"),  # the same C++ version macros (0.1.16), another ABI
        ("0.1.15.post2", "0.1.15"),
        ("0.1.15.post2", "0.1.14.post1"),
        ("0.1.16", "0.1.16rc1"),
        ("0.1.16", "0.1.15.post2"),
        ("0.1.13.post2", "0.1.13"),  # the silent vtable mismatch of apache/tvm#20094
    ],
)
def test_older_runtime_than_compiled_against_is_refused(compiled: str, installed: str) -> None:
    message = (
        f"libscale_lib.so was compiled against apache-tvm-ffi {compiled}, but apache-tvm-ffi "
        f"{installed} is installed, which is older. Install that release or a newer one: "
        f"pip install 'apache-tvm-ffi>={compiled},<{_dotted(_lib.TVM_FFI_BELOW)}'"
    )
    with pytest.raises(ImportError, match=re.escape(message)):
        _lib.check_tvm_ffi_compiled(compiled, installed)


@pytest.mark.parametrize("installed", ["0.1.15.post2", "0.1.15.post3", "0.1.16", "0.1.99"])
def test_same_or_newer_runtime_than_compiled_against_is_accepted(installed: str) -> None:
    _lib.check_tvm_ffi_compiled("0.1.15.post2", installed)


def test_import_refuses_a_runtime_older_than_the_build() -> None:
    # The library records the release it was compiled against; a fresh interpreter in which the
    # installed apache-tvm-ffi is older (but inside the declared range) refuses to import.
    compiled = scale_lib.build_info()["apache_tvm_ffi_compiled"]
    code = f"""
import tvm_ffi, scale_lib._lib as lib
lib.check_tvm_ffi_compiled({compiled!r}, tvm_ffi.__version__)  # the real pair passes
lib.check_tvm_ffi_compiled({compiled!r}, {compiled + ".dev0"!r})
"""
    child = _run(code)
    assert child.returncode != 0
    assert f"compiled against apache-tvm-ffi {compiled}, but apache-tvm-ffi {compiled}.dev0" in child.stderr


def test_abi_check_names_both_versions() -> None:
    message = r"compiled against TVM-FFI 0\.1\.16, but the loaded libtvm_ffi is TVM-FFI 0\.2\.0 \("
    with pytest.raises(ImportError, match=message + r"apache-tvm-ffi 0\.2\.0\)"):
        _lib.check_tvm_ffi_abi("0.1.16", "0.2.0", "0.2.0")
    # The loaded library is older than the headers (what the headers declare, which for a .postN
    # release is the next patch): refused too.
    with pytest.raises(
        ImportError,
        match=r"compiled against TVM-FFI 0\.1\.16, but the loaded libtvm_ffi is TVM-FFI 0\.1\.15 ",
    ):
        _lib.check_tvm_ffi_abi("0.1.16", "0.1.15", "0.1.14.post1")
    _lib.check_tvm_ffi_abi("0.1.16", "0.1.16", "0.1.15.post2")  # same version: accepted
    _lib.check_tvm_ffi_abi("0.1.16", "0.1.17", "0.1.16.post1")  # newer, same minor: accepted


def test_build_info_records_both_tvm_ffi_versions() -> None:
    info = scale_lib.build_info()
    compiled, loaded = _lib._release(info["tvm_ffi_compiled"]), _lib._release(info["tvm_ffi_runtime"])
    assert len(compiled) == 3 and len(loaded) == 3
    assert compiled[:2] == loaded[:2] and compiled <= loaded
    assert _lib.version_key(info["apache_tvm_ffi_compiled"]) <= _lib.version_key(tvm_ffi.__version__)


# ---------------------------------------------------------------------------------------------
# NVIDIA driver
# ---------------------------------------------------------------------------------------------
# A CUDA tensor over host memory (numpy's DLPack export with the device type rewritten): the
# driver check runs before anything touches the data.
_FAKE_CUDA_CALL = """
import ctypes, numpy as np, tvm_ffi, scale_lib
get = ctypes.pythonapi.PyCapsule_GetPointer
get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
a = np.ones(4, np.float32)
capsule = a.__dlpack__(max_version=(1, 0))
# DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, flags, then the DLTensor's
# data pointer and device type.
ctypes.c_int32.from_address(get(capsule, b"dltensor_versioned") + 40).value = 2  # kDLCUDA
t = tvm_ffi.from_dlpack(capsule)
try:
    scale_lib.lib.scale(t, t, 2.0)
except RuntimeError as e:
    print("RuntimeError:", e)
print("cpu still works:", scale_lib.scale(np.arange(3, dtype=np.float32), 2.0).tolist())
"""


def _cuda_build() -> dict[str, str]:
    if not scale_lib.cuda_available():
        pytest.skip("CPU-only build: no CUDA driver check")
    return scale_lib.build_info()


def _this_library() -> dict[str, str]:
    """The environment that makes a child load this process's library: in the release wheel, a
    fake driver would otherwise choose the other one (tests/test_cuda_library.py)."""
    for major, name in _lib.CUDA_LIBRARIES.items():
        if scale_lib.build_info()["library"] == f"lib{name}.so":
            return {_lib.FORCE_ENV: str(major)}
    return {}


def test_build_info_reports_cuda_runtime_and_driver() -> None:
    info = _cuda_build()
    runtime = _lib._release(info["cuda_runtime_version"])
    assert len(runtime) == 2
    assert info["cuda_driver_minimum"] == f"{runtime[0]}.0"
    assert info["cuda_driver_version"] == "" or len(_lib._release(info["cuda_driver_version"])) == 2


@pytest.mark.parametrize("driver", [(11, 8), (12, 0)])
def test_old_driver_raises_naming_both_versions(driver: tuple[int, int]) -> None:
    info = _cuda_build()
    needed = info["cuda_driver_minimum"]
    encoded = 1000 * driver[0] + 10 * driver[1]
    if encoded >= 1000 * _lib._release(needed)[0]:
        pytest.skip(f"a driver for CUDA {_dotted(driver)} is new enough for this build")
    child = _run(_FAKE_CUDA_CALL, SCALE_LIB_FAKE_CUDA_DRIVER_VERSION=str(encoded), **_this_library())
    assert child.returncode == 0, child.stderr
    assert (
        f"RuntimeError: the NVIDIA driver is too old for scale_lib's CUDA kernels: it supports CUDA "
        f"{_dotted(driver)}, and this build (CUDA runtime {info['cuda_runtime_version']}) needs a "
        f"driver for CUDA {needed} or newer"
    ) in child.stdout, child.stdout
    assert "cpu still works: [0.0, 2.0, 4.0]" in child.stdout


def test_new_enough_driver_passes_the_check() -> None:
    info = _cuda_build()
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU is present; a fake CUDA pointer must not reach it")
    # The driver the build needs, exactly: the check passes and the call reaches CUDA, which
    # fails on the fake pointer (or for lack of a GPU) with CUDA's own error, not the check's.
    major = _lib._release(info["cuda_driver_minimum"])[0]
    child = _run(_FAKE_CUDA_CALL, SCALE_LIB_FAKE_CUDA_DRIVER_VERSION=str(1000 * major), **_this_library())
    assert child.returncode == 0, child.stderr
    assert "too old" not in child.stdout
    assert "cpu still works" in child.stdout


# ---------------------------------------------------------------------------------------------
# JAX and jax-tvm-ffi
# ---------------------------------------------------------------------------------------------
def test_jax_versions_below_the_floor_are_named() -> None:
    from scale_lib import _jax

    assert _jax.unsupported_versions(_jax.JAX_LOWEST, _jax.JAX_TVM_FFI_LOWEST) is None
    assert _jax.unsupported_versions("0.10.2", "0.1.3") is None
    assert _jax.unsupported_versions("0.9.1", None) is None  # missing: reported at import
    problem = _jax.unsupported_versions("0.9.0.1", "0.1.3")
    assert (
        problem
        and (
            f"scale_lib needs jax>={_jax.JAX_LOWEST} and jax-tvm-ffi>={_jax.JAX_TVM_FFI_LOWEST} to run on "
            "JAX arrays, but jax 0.9.0.1 is installed."
        )
        in problem
    )
    assert problem.endswith(f"pip install 'jax>={_jax.JAX_LOWEST}'")
    problem = _jax.unsupported_versions("0.8.0", "0.1.2")
    assert problem and "but jax 0.8.0, jax-tvm-ffi 0.1.2 is installed" in problem
    assert problem.endswith(f"pip install 'jax>={_jax.JAX_LOWEST}' 'jax-tvm-ffi>={_jax.JAX_TVM_FFI_LOWEST}'")


# A fresh interpreter in which JAX (or jax-tvm-ffi) reports an older version: importing
# scale_lib, before or after jax, registers no XLA target, JAX keeps working, and scale_lib's
# first call on a JAX array raises RuntimeError naming the versions.
_OLD_JAX = """
import sys
from importlib import metadata
if {jax_tvm_ffi!r}:
    real = metadata.version
    metadata.version = lambda name: {jax_tvm_ffi!r} if name == "jax-tvm-ffi" else real(name)
if {scale_lib_first}:
    import scale_lib
import jax, jax.numpy as jnp, jax_tvm_ffi, numpy as np
if {jax!r}:
    jax.__version__ = {jax!r}
count = jax_tvm_ffi.registered_count()
import scale_lib
assert jax_tvm_ffi.registered_count() == count, "targets were registered"
print("jax works:", (jnp.ones(3) + 1).tolist())
calls = [
    lambda: scale_lib.scale(jnp.ones(3), 2.0),
    lambda: jax.jit(lambda x: scale_lib.scale(x, 2.0))(jnp.ones(3)),
]
# the ops whose output size depends on the data: they run eagerly, not through XLA
calls += [lambda name=name: getattr(scale_lib, name)(jnp.ones(3)) for name in {eager!r}]
print("calls:", len(calls))
for call in calls:
    try:
        call()
    except RuntimeError as e:
        print("RuntimeError:", e)
assert jax_tvm_ffi.registered_count() == count, "targets were registered"
numpy = scale_lib.scale(np.ones(2), 2.0).tolist()
print("jax still works:", (jnp.ones(3) + 1).tolist(), "numpy works:", numpy)
"""


@pytest.mark.parametrize(
    ("jax", "jax_tvm_ffi", "found"),
    [("0.9.0", "", "jax 0.9.0"), ("0.7.2", "", "jax 0.7.2"), ("", "0.1.2", "jax-tvm-ffi 0.1.2")],
)
@pytest.mark.parametrize("scale_lib_first", [False, True])
def test_old_jax_is_left_alone_and_refused_at_the_call(
    jax: str, jax_tvm_ffi: str, found: str, scale_lib_first: bool
) -> None:
    pytest.importorskip("jax")
    pytest.importorskip("jax_tvm_ffi")
    from scale_lib import _jax

    eager = [
        spec.name
        for spec in OPS
        if spec.public and spec.output.allocated_by_library and len(spec.inputs) == 1 and not spec.attrs
    ]
    code = _OLD_JAX.format(jax=jax, jax_tvm_ffi=jax_tvm_ffi, scale_lib_first=scale_lib_first, eager=eager)
    child = _run(code, JAX_PLATFORMS="cpu")
    assert child.returncode == 0, child.stderr
    # (an editable install's rebuild may print to stdout first)
    lines = child.stdout[child.stdout.index("jax works:") :].splitlines()
    assert lines[0] == "jax works: [2.0, 2.0, 2.0]"
    calls = int(lines[1].removeprefix("calls: "))
    refusals = [line for line in lines if line.startswith("RuntimeError:")]
    assert len(refusals) == calls, child.stdout
    for refusal in refusals:
        assert (
            f"RuntimeError: scale_lib needs jax>={_jax.JAX_LOWEST} and jax-tvm-ffi>="
            f"{_jax.JAX_TVM_FFI_LOWEST} to run on JAX arrays, but {found} is installed."
        ) in refusal
    assert lines[-1] == "jax still works: [2.0, 2.0, 2.0] numpy works: [2.0, 2.0]"


def test_numpy_below_the_floor_is_refused_with_the_versions() -> None:
    from scale_lib import _numpy

    assert _numpy.unsupported_version(_numpy.NUMPY_LOWEST) is None
    assert _numpy.unsupported_version("2.4.0") is None
    problem = _numpy.unsupported_version("1.26.4")
    assert problem is not None
    assert f"numpy>={_numpy.NUMPY_LOWEST}" in problem and "numpy 1.26.4 is installed" in problem


def test_an_old_numpy_gets_a_clear_error_at_the_first_call() -> None:
    # In a fresh interpreter whose NumPy reports an older release: the first call with a NumPy
    # array raises RuntimeError naming both versions (not a raw DLPack TypeError), every time.
    code = textwrap.dedent(
        """
        import numpy as np
        np.__version__ = "2.0.2"
        import scale_lib
        for _ in range(2):
            try:
                scale_lib.scale(np.ones(3, np.float32), 2.0)
            except RuntimeError as error:
                print("refused:", error)
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("refused:")]
    assert len(lines) == 2, run.stdout
    assert "numpy 2.0.2 is installed" in lines[0] and "pip install 'numpy>=" in lines[0]
