"""flatnonzero: a result whose size depends on the data, allocated by the library."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
from backends import (
    DTYPES,
    JAX_BACKENDS,
    LARGE_N,
    Backend,
    backend_params,
    check_native,
    shape_id,
)
from cases import OpCase
from hypothesis import given
from hypothesis import strategies as st
from properties import (
    NAN,
    NOT_JIT,
    PROFILE_SETTINGS,
    _draw_offset,
    _dtypes_for,
    _finfo,
    _make_input,
    float_arrays,
    shapes,
)

import scale_lib
from scale_lib.ops.flatnonzero import _flatnonzero

# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
CASE = OpCase(
    "flatnonzero",
    ("x",),
    lambda x: scale_lib.flatnonzero(x),
    reference=lambda x: np.flatnonzero(x).astype(np.float64),
    has_out=False,
    jittable=False,  # the size of the result depends on the data
    exports={"flatnonzero": 1},
)

SHAPES = [(), (0,), (1,), (7,), (257,), (4096,), (1_000_003,), (3, 5), (2, 3, 70)]


def _data(shape, density: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape)
    return np.where(rng.random(shape) < density, values, 0.0)


@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "backend", [p for p in backend_params() if p.values[0].framework != "jax_jit"], indirect=True
)
def test_flatnonzero_matches_numpy(backend: Backend, dtype: str, shape, density: float) -> None:
    x = backend.asarray(_data(shape, density, seed=len(shape) + sum(shape)), dtype)
    expected = np.flatnonzero(backend.to_numpy(x))
    result = scale_lib.flatnonzero(x)
    check_native(backend, result, "int64", expected.shape)
    np.testing.assert_array_equal(np.asarray(backend.to_numpy(result), dtype=np.int64), expected)


@pytest.mark.parametrize(
    "backend", [p for p in backend_params() if p.values[0].framework != "jax_jit"], indirect=True
)
def test_nan_and_signed_zero(backend: Backend) -> None:
    x = backend.asarray(np.array([0.0, -0.0, np.nan, 1.0, -np.inf, 0.0]), "float32")
    np.testing.assert_array_equal(backend.to_numpy(scale_lib.flatnonzero(x)), [2, 3, 4])


@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_jax_cannot_trace_a_data_dependent_size(backend: Backend) -> None:
    x = backend.asarray(np.array([0.0, 1.0]), "float32")
    with pytest.raises(TypeError, match="flatnonzero cannot be traced by JAX"):
        backend.mod.jit(scale_lib.flatnonzero)(x)


def test_no_out() -> None:
    x = np.array([0.0, 1.0])
    with pytest.raises(TypeError, match="flatnonzero has no out="):
        _flatnonzero.call((x,), (), np.empty(1, np.int64))


def test_torch_compile_sees_a_data_dependent_size() -> None:
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    graphs = []

    def record(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    # Captured in one graph where dynamo may trace data-dependent sizes (without graph breaks,
    # tests/test_torch.py runs it under every setting).
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        f = torch.compile(lambda v: scale_lib.flatnonzero(v) * 2, backend=record)
        torch.testing.assert_close(f(torch.tensor([0.0, 3.0, 0.0, 1.0])), torch.tensor([2, 6]))
    assert len(graphs) == 1 and "scale_lib.flatnonzero" in str(graphs[0].graph), graphs
    torch.library.opcheck(torch.ops.scale_lib.flatnonzero.default, (torch.tensor([0.0, 1.0]),))


# [lifetime.begin]
def test_library_owned_results_outlive_every_python_reference() -> None:
    # A NumPy caller's result is memory the library allocated (FromNDAlloc): freeing it runs
    # code in libscale_lib.so. The package loads the library for the life of the process, so the
    # result stays valid, and is freed safely, after the package is gone from Python.
    code = textwrap.dedent(
        """
        import gc, sys
        import numpy as np
        import scale_lib
        result = scale_lib.flatnonzero(np.array([0.0, 2.0, 0.0, 5.0]))
        assert type(result) is np.ndarray
        library = scale_lib.build_info()["library"]
        for name in [m for m in sys.modules if m == "scale_lib" or m.startswith("scale_lib.")]:
            del sys.modules[name]
        del scale_lib
        gc.collect()
        maps = open("/proc/self/maps").read()
        assert "/" + library in maps, "the library was unloaded"
        assert result.tolist() == [1, 3]
        del result
        gc.collect()
        print("ok")
        """
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0 and child.stdout.split()[-1:] == ["ok"], child.stderr


# [lifetime.end]


# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
@pytest.mark.parametrize("backend", NOT_JIT, indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_flatnonzero_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(), label="shape")
    subnormal = float(_finfo(dtype).smallest_subnormal)
    specials = (NAN, -0.0, 0.0, math.inf, -math.inf, subnormal, -3 * subnormal)
    values = data.draw(float_arrays(shape, dtype, specials=specials), label="x")
    offset = _draw_offset(data, backend, "input_offset")

    x, _ = _make_input(backend, values, dtype, offset)
    expected = np.flatnonzero(backend.to_numpy(x))
    result = scale_lib.flatnonzero(x)
    check_native(backend, result, "int64", expected.shape)
    np.testing.assert_array_equal(np.asarray(backend.to_numpy(result), dtype=np.int64), expected)


# -- more than 2^31 elements: 64-bit indexing through grid sizes ----------------------------
@pytest.mark.gpu
@pytest.mark.large
def test_large_inputs(large_torch) -> None:
    x = large_torch.zeros(LARGE_N, dtype=large_torch.float16, device="cuda")
    x[[5, 2**31 + 7, LARGE_N - 1]] = 1.0
    assert scale_lib.flatnonzero(x).tolist() == [5, 2**31 + 7, LARGE_N - 1]
