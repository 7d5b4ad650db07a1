"""Shared fixtures. Frameworks are imported lazily by tests/backends.py."""

from __future__ import annotations

import os

# JAX takes 75% of GPU memory at start by default; the suite shares the GPU among frameworks.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

if os.environ.get("SCALE_LIB_TESTS_WITHOUT_TRITON"):  # the run of a machine without Triton
    import no_triton

    no_triton.install()

import pytest
from backends import ALL_BACKENDS, Backend, _module, probe_gpu_shortfalls


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-gpu",
        action="store_true",
        default=os.environ.get("SCALE_LIB_REQUIRE_GPU") == "1",
        help="fail, before any test runs, if an installed framework's CUDA tests would skip for "
        "want of a GPU or of its CUDA build (Paddle's CPU-only build excepted: tests/backends.py), "
        "or the library has no CUDA (also: SCALE_LIB_REQUIRE_GPU=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    jax = _module("jax")
    if jax is not None:
        # float64 JAX arrays need x64 mode; set before any JAX array exists.
        jax.config.update("jax_enable_x64", True)
    if config.getoption("--require-gpu"):
        shortfalls = probe_gpu_shortfalls()
        if shortfalls:
            raise pytest.UsageError("--require-gpu: CUDA tests would skip:\n  " + "\n  ".join(shortfalls))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run in which no test passed fails: everything skipped is not a success."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if exitstatus == 0 and reporter is not None and not reporter.stats.get("passed"):
        reporter.write_line("error: no test passed (everything was skipped or deselected)", red=True)
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_report_header(config: pytest.Config) -> list[str]:
    import scale_lib

    lines = [f"scale_lib {scale_lib.__version__}: {scale_lib.build_info()}"]
    available = [b.id for b in ALL_BACKENDS if b.skip_reason() is None]
    lines.append("backends available: " + ", ".join(available))
    return lines


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test of one op on a device the op has no kernels for (a CUDA-only op on the CPU) skips:
    the op's own tests check that it refuses such arrays. Tests without a backend run on the CPU,
    unless marked gpu."""
    from cases import OpCase

    params = getattr(getattr(item, "callspec", None), "params", {})
    op = next((v for v in params.values() if isinstance(v, OpCase)), None)
    if op is None:
        return
    backend = params.get("backend")
    if isinstance(backend, Backend):
        device = backend.device
    else:
        device = "cuda" if item.get_closest_marker("gpu") else "cpu"
    if device not in op.devices:
        pytest.skip(f"{op.name} has no {device} kernels (tests/test_{op.name}.py checks it refuses them)")


@pytest.fixture
def backend(request: pytest.FixtureRequest):
    """The Backend of the test's parameter, skipped (with the reason) if unavailable here."""
    b = request.param
    b.skip_if_unavailable()
    return b


@pytest.fixture
def kernel_cache(tmp_path, monkeypatch):
    """A fresh directory for kernels compiled at run time (not created yet; SCALE_LIB_CACHE_DIR)
    and an empty in-memory cache (python/scale_lib/_nvrtc.py)."""
    from scale_lib import _nvrtc

    directory = tmp_path / "cache"
    monkeypatch.setenv("SCALE_LIB_CACHE_DIR", str(directory))
    _nvrtc.reset()
    yield directory
    _nvrtc.reset()


@pytest.fixture
def fake_device_tensor():
    """Make a tvm_ffi.Tensor over host memory that claims another device type.

    Only for errors raised before the library touches data: routing and argument checks.
    """
    import tvm_ffi

    from scale_lib._numpy import _capsule_pointer, _DLManagedTensorVersioned

    keep_alive = []

    def make(host_array, device_type: int):
        keep_alive.append(host_array)
        capsule = host_array.__dlpack__(max_version=(1, 0))
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
        managed.dl_tensor.device_type = device_type
        return tvm_ffi.from_dlpack(capsule)

    return make


@pytest.fixture(scope="session")
def large_torch():
    """torch, where a CUDA GPU has room for inputs of more than 2^31 elements (tests marked
    large); skipped otherwise."""
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    free, _ = torch.cuda.mem_get_info()
    if free < 24 * 2**30:
        pytest.skip(f"needs 24 GiB of free GPU memory; {free / 2**30:.0f} GiB free")
    return torch
