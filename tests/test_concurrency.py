"""Many Python threads calling every op at once give correct results; long CPU kernels release
the GIL."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from backends import Backend
from reference import random_data, rms_norm_reference

import scale_lib

THREADS = 8
ITERATIONS = 25


def _hammer(make, check) -> None:
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(ITERATIONS):
                check(*make(seed * 1000 + i))
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def _all_ops(xp_asarray, to_numpy):
    def make(seed):
        x = random_data((64, 96), seed)
        y = random_data((64, 96), seed + 1)
        return x, y, xp_asarray(x), xp_asarray(y)

    def check(x, y, xa, ya):
        np.testing.assert_allclose(to_numpy(scale_lib.scale(xa, 3.0)), x * 3, rtol=1e-6)
        np.testing.assert_allclose(
            to_numpy(scale_lib.axpby(xa, ya, 2.0, -1.0)), 2 * x - y, rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            to_numpy(scale_lib.rms_norm(xa, None, 1e-6)),
            rms_norm_reference(x, None, 1e-6),
            rtol=1e-4,
            atol=1e-5,
        )
        np.testing.assert_allclose(float(to_numpy(scale_lib.l2_norm(xa))), np.linalg.norm(x), rtol=1e-5)
        np.testing.assert_array_equal(
            to_numpy(scale_lib.flatnonzero(xa)), np.flatnonzero(x.astype(np.float32))
        )

    return make, check


def test_threads_numpy() -> None:
    _hammer(*_all_ops(lambda a: a.astype(np.float32), np.asarray))


def test_threads_torch_cpu() -> None:
    torch = pytest.importorskip("torch")
    _hammer(*_all_ops(lambda a: torch.from_numpy(a.astype(np.float32)), lambda t: t.numpy()))


@pytest.mark.gpu
def test_threads_torch_cuda_each_on_its_own_stream() -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    make, check = _all_ops(lambda a: torch.from_numpy(a.astype(np.float32)).cuda(), lambda t: t.cpu().numpy())

    def on_own_stream(*args):
        with torch.cuda.stream(torch.cuda.Stream()):
            check(*args)

    _hammer(make, on_own_stream)


def test_long_cpu_kernels_release_the_gil() -> None:
    x = np.random.default_rng(0).standard_normal((2048, 8192)).astype(np.float32)
    start = time.perf_counter()
    scale_lib.rms_norm(x)
    duration = time.perf_counter() - start
    ticks = 0
    done = threading.Event()

    def kernels() -> None:
        for _ in range(3):
            scale_lib.rms_norm(x)
        done.set()

    worker = threading.Thread(target=kernels)
    worker.start()
    while not done.is_set():  # runs only while the worker has let go of the GIL
        ticks += 1
    worker.join()
    # With the GIL held through each kernel this thread would get in a few switch intervals
    # (5 ms each) per call; with it released it spins the whole time.
    assert ticks > 1000 * max(1.0, duration / 0.005), (ticks, duration)
