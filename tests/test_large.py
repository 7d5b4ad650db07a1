"""CUDA inputs of more than 2^31 elements: 64-bit indexing all the way through grid sizes."""

from __future__ import annotations

import math

import pytest
from backends import Backend

import scale_lib

pytestmark = [pytest.mark.gpu, pytest.mark.large]

N = 2**31 + 4099  # past int32, with a tail that fills no 16-byte pack


@pytest.fixture(scope="module")
def torch():
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    free, _ = torch.cuda.mem_get_info()
    if free < 24 * 2**30:
        pytest.skip(f"needs 24 GiB of free GPU memory; {free / 2**30:.0f} GiB free")
    return torch


def _marked(torch, n: int):
    """float16 ones, with distinct values at indices past 2^31."""
    x = torch.ones(n, dtype=torch.float16, device="cuda")
    x[2**31 + 7] = 3.0
    x[-1] = -2.0
    return x


def test_scale(torch) -> None:
    x = _marked(torch, N)
    y = scale_lib.scale(x, 2.0)
    assert bool(torch.equal(y, x * 2))
    y = scale_lib.scale(x[1:], 2.0)  # unaligned: the scalar kernel
    assert bool(torch.equal(y, x[1:] * 2))


def test_axpby_cubin(torch) -> None:
    x = _marked(torch, N)
    y = scale_lib.axpby(x, x, 1.0, 0.5)
    assert bool(torch.equal(y, x * 1.5))


def test_l2_norm(torch) -> None:
    x = torch.ones(N, dtype=torch.float16, device="cuda")
    expected = torch.tensor(math.sqrt(N), dtype=torch.float16)
    assert scale_lib.l2_norm(x).cpu() == expected


def test_flatnonzero(torch) -> None:
    x = torch.zeros(N, dtype=torch.float16, device="cuda")
    x[[5, 2**31 + 7, N - 1]] = 1.0
    assert scale_lib.flatnonzero(x).tolist() == [5, 2**31 + 7, N - 1]


def test_rms_norm(torch) -> None:
    rows, hidden = 2**21 + 3, 1024
    x = torch.randn(rows, hidden, dtype=torch.float16, device="cuda")
    y = scale_lib.rms_norm(x, None, 1e-6)
    for r in (0, 2**21 - 1, rows - 1):  # rows whose elements lie past 2^31
        expected = torch.nn.functional.rms_norm(x[r].float(), (hidden,), eps=1e-6).half()
        torch.testing.assert_close(y[r], expected, rtol=2e-3, atol=2e-3)
