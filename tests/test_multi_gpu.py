"""Arrays on a second GPU run there (device guard) on that device's stream; skipped with fewer
than two GPUs."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from backends import Backend

import scale_lib

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def restore_current_device():
    """JAX and CuPy on GPU 1 may leave it current for this thread; later tests expect GPU 0."""
    yield
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
        sys.modules["torch"].cuda.set_device(0)


def _torch_with_two_gpus():
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    return torch


def test_torch_tensor_on_second_gpu() -> None:
    torch = _torch_with_two_gpus()
    torch.cuda.set_device(0)
    x = torch.randn(1 << 20, device="cuda:1")
    y = scale_lib.scale(x, 2.0)
    assert y.device == torch.device("cuda:1")
    torch.testing.assert_close(y, x * 2)
    assert torch.cuda.current_device() == 0, "the device guard must restore the caller's device"


def test_torch_second_gpu_uses_its_own_current_stream() -> None:
    torch = _torch_with_two_gpus()
    torch.cuda.set_device(0)
    x = torch.zeros(1 << 20, device="cuda:1")
    torch.cuda.synchronize(1)
    s1 = torch.cuda.Stream(device=1)
    with torch.cuda.stream(s1):
        torch.cuda._sleep(100_000_000)
        x.fill_(3.0)
        y = scale_lib.scale(x, 2.0)
    s1.synchronize()
    assert bool((y == 6.0).all())
    assert torch.cuda.current_device() == 0


def test_device_mismatch_between_gpus() -> None:
    torch = _torch_with_two_gpus()
    x = torch.ones(4, device="cuda:0")
    out = torch.full((4,), float("nan"), device="cuda:1")
    with pytest.raises(ValueError, match="out and x must be on the same device; got cuda:1 and cuda:0"):
        scale_lib.scale(x, 2.0, out=out)
    assert bool(torch.isnan(out).all())


def test_cupy_array_on_second_gpu() -> None:
    _torch_with_two_gpus()
    Backend("cupy", "cuda").skip_if_unavailable()
    import cupy

    with cupy.cuda.Device(1):
        x = cupy.arange(1000, dtype=cupy.float32)
    y = scale_lib.scale(x, 3.0)  # called with device 0 current
    assert y.device.id == 1
    np.testing.assert_array_equal(cupy.asnumpy(y), np.arange(1000) * 3.0)


@pytest.mark.parametrize("jit", [False, True])
def test_jax_array_on_second_gpu(jit: bool) -> None:
    Backend("jax", "cuda").skip_if_unavailable()
    import jax

    gpus = jax.devices("gpu")
    if len(gpus) < 2:
        pytest.skip("needs 2 GPUs")
    x = jax.device_put(np.arange(1000, dtype=np.float32), gpus[1])
    f = jax.jit(lambda v: scale_lib.scale(v, 3.0)) if jit else (lambda v: scale_lib.scale(v, 3.0))
    y = f(x)
    assert y.devices() == {gpus[1]}
    np.testing.assert_array_equal(np.asarray(y), np.arange(1000) * 3.0)
