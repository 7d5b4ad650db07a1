"""Many Python threads calling every op at once give correct results, on inputs small and large
enough to be split across the library's CPU threads; a process forked while they run can still
call the library; long CPU kernels release the GIL."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from backends import Backend
from cases import declared_cases

THREADS = 8
# Calls per thread; an emulated run (nox -s tests_aarch64) makes fewer, as it runs each far slower.
ITERATIONS = int(os.environ.get("SCALE_LIB_TEST_THREAD_ITERATIONS", "25"))
CASES = declared_cases()  # every public op: each test takes those with kernels on its device


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


def _all_ops(xp_asarray, to_numpy, device: str = "cpu", shape: tuple[int, int] = (64, 96)):
    """Every public op with kernels on ``device`` (its declared case) on fresh inputs, checked
    against its reference."""
    cases = [c for c in CASES if device in c.devices]

    def make(seed):
        inputs = [case.numpy_inputs(seed, shape) for case in cases]
        return (inputs, [{n: xp_asarray(a) for n, a in i.items()} for i in inputs])

    def check(inputs, arrays):
        for case, data, args in zip(cases, inputs, arrays, strict=True):
            rtol, atol = (1e-4, 1e-5) if case.reduction else (1e-5, 1e-6)
            result = to_numpy(case.call(*args.values()))
            exact = [a.astype(np.float32).astype(np.float64) for a in data.values()]
            case.assert_matches(result, exact, rtol, atol)

    return make, check


def test_threads_numpy() -> None:
    _hammer(*_all_ops(lambda a: a.astype(np.float32), np.asarray))


def test_threads_numpy_inputs_split_across_cpu_threads() -> None:
    # 2^18 elements: each call splits its work over the library's CPU threads, which one call
    # at a time uses (the others run on their own thread).
    _hammer(*_all_ops(lambda a: a.astype(np.float32), np.asarray, shape=(256, 1024)))


def test_split_calls_run_each_part_exactly_once() -> None:
    # In place, so a part run twice (or not at all) shows: x * 2 then x / 2, back to back, each
    # pair checked, on 8 library threads (more than a small host's cores), on sizes split into 2,
    # 4, 6 and 8 parts in turn (a call of fewer parts after one of more, whose threads may still
    # be looking for work).
    code = textwrap.dedent(
        """
        import numpy as np
        import scale_lib
        arrays = [np.ones(n, np.float32) for n in (1 << 16, 1 << 17, 3 << 16, 1 << 18)]
        for k in range(ROUNDS):
            for x in arrays:
                scale_lib.scale(x, 2.0, out=x)
                scale_lib.scale(x, 0.5, out=x)
                assert np.array_equal(x, np.ones_like(x)), f"a part of {x.size} elements ran other than once"
        """
    ).replace("ROUNDS", str(8 * ITERATIONS))
    env = dict(os.environ, SCALE_LIB_NUM_THREADS="8")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert child.returncode == 0, child.stderr[-3000:]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_during_parallel_kernels_can_call_them() -> None:
    # The child of a fork has only the forking thread, even if another thread was inside a
    # split CPU kernel: the library must not wait there for threads the child does not have.
    code = textwrap.dedent(
        """
        import os, threading, warnings
        import numpy as np
        import scale_lib
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a threaded process
        x = np.random.default_rng(0).random(1 << 20, dtype=np.float32)
        expected = x * np.float32(2)
        assert np.array_equal(scale_lib.scale(x, 2.0), expected)
        busy, stop = threading.Event(), threading.Event()
        def keep_busy():
            while not stop.is_set():
                scale_lib.scale(x, 2.0)
                busy.set()
        worker = threading.Thread(target=keep_busy)
        worker.start()
        busy.wait()
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                same = all(np.array_equal(scale_lib.scale(x, 2.0), expected) for _ in range(3))
                os._exit(0 if same else 3)
            _, status = os.waitpid(pid, 0)
            print("child exit", os.waitstatus_to_exitcode(status))
        stop.set()
        worker.join()
        """
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split("\n")[:5] == ["child exit 0"] * 5, child.stdout + child.stderr[-3000:]


def test_threads_torch_cpu() -> None:
    torch = pytest.importorskip("torch")
    _hammer(*_all_ops(lambda a: torch.from_numpy(a.astype(np.float32)), lambda t: t.numpy()))


@pytest.mark.gpu
def test_threads_torch_cuda_each_on_its_own_stream() -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    make, check = _all_ops(
        lambda a: torch.from_numpy(a.astype(np.float32)).cuda(), lambda t: t.cpu().numpy(), "cuda"
    )

    def on_own_stream(*args):
        with torch.cuda.stream(torch.cuda.Stream()):
            check(*args)

    _hammer(make, on_own_stream)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES[:1]])
def test_long_cpu_kernels_release_the_gil(case) -> None:
    arrays = [a.astype(np.float32) for a in case.numpy_inputs(0, (2048, 8192)).values()]
    start = time.perf_counter()
    case.call(*arrays)
    duration = time.perf_counter() - start
    ticks = 0
    done = threading.Event()

    def kernels() -> None:
        for _ in range(3):
            case.call(*arrays)
        done.set()

    worker = threading.Thread(target=kernels)
    worker.start()
    while not done.is_set():  # runs only while the worker has let go of the GIL
        ticks += 1
    worker.join()
    # With the GIL held through each kernel this thread would get in a few switch intervals
    # (5 ms each) per call; with it released it spins the whole time.
    assert ticks > 1000 * max(1.0, duration / 0.005), (ticks, duration)


@pytest.mark.gpu
def test_every_op_from_a_thread_that_has_made_no_cuda_call() -> None:
    # PyTorch runs backward passes on a thread of its own, and a new Python thread has made no
    # CUDA call either: no CUDA context is current there. Every op must launch anyway (the CUBIN
    # launcher, built on the driver API below CUDA 12.8, launches in the current context).
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    cases = [c for c in CASES if "cuda" in c.devices]
    data = [c.numpy_inputs(7) for c in cases]
    args = [{n: torch.from_numpy(a.astype(np.float32)).cuda() for n, a in d.items()} for d in data]
    outs = [torch.empty(c.output_shape(), device="cuda") if c.has_out else None for c in cases]
    torch.cuda.synchronize()
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    def call_every_op() -> None:
        try:  # the op is this thread's first CUDA call (out= given: no allocation before it)
            for case, a, out in zip(cases, args, outs, strict=True):
                kwargs = {"out": out} if case.has_out else {}
                results[case.name] = case.call(*a.values(), **kwargs)
        except BaseException as error:  # noqa: BLE001 - reported below, with the op's name
            errors.append(error)

    thread = threading.Thread(target=call_every_op)
    thread.start()
    thread.join()
    assert not errors, errors
    for case, d in zip(cases, data, strict=True):
        got = results[case.name].cpu().numpy()  # type: ignore[attr-defined]
        case.assert_matches(got, [a.astype(np.float32).astype(np.float64) for a in d.values()], 1e-4, 1e-5)
