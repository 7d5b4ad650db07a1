"""Zero-size arrays work with every op; 0-d arrays with every op whose inputs may have no
dimension, and the others refuse them with a ValueError naming the input (docs/guarantees.md).
Driven by the declared ops."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from cases import built_devices, declared_cases

from scale_lib.ops import OPS

CASES = declared_cases("cpu")


def _min_ndim(name: str) -> int:
    spec = next(s for s in OPS if s.name == name)
    return spec.inputs[0].min_ndim


@pytest.mark.parametrize("shape", [(0,), (4, 0), (0, 8)], ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_zero_size_arrays_work(case, shape) -> None:
    if len(shape) < _min_ndim(case.name):
        pytest.skip("fewer dimensions than the op takes")
    arrays = [a.astype(np.float32) for a in case.numpy_inputs(0, shape).values()]
    result = case.call(*arrays)
    with warnings.catch_warnings():  # a NumPy reference may average over no elements
        warnings.simplefilter("ignore", RuntimeWarning)
        case.assert_matches(result, [a.astype(np.float64) for a in arrays], 1e-6, 0)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_0d_arrays_work_or_are_refused_by_ops_that_need_a_dimension(case) -> None:
    arrays = [a.astype(np.float32) for a in case.numpy_inputs(0, ()).values()]
    if _min_ndim(case.name) > 0:
        with pytest.raises(ValueError, match=f"{case.arrays[0]} must have at least"):
            case.call(*arrays)
        return
    case.assert_matches(case.call(*arrays), [a.astype(np.float64) for a in arrays], 1e-6, 0)


# ---------------------------------------------------------------------------------------------
# More than 2^31 elements: 64-bit indexing in every op's kernels (CUDA; tests marked large)
# ---------------------------------------------------------------------------------------------
LARGE_ROWS, LARGE_HIDDEN = 2**21 + 3, 1024  # 2^31 + 3072 elements; row 2^21 starts at 2^31
EXAMPLE_ATTR = {float: 0.75, int: 1, bool: True}
# Declared ops whose sharding kind says how a result over all rows relates to results over
# parts of them (an op without one, like a result whose size depends on the data, has a test
# of its own).
PARTITIONED = [
    pytest.param(s, id=s.name, marks=[pytest.mark.gpu, pytest.mark.large])
    for s in OPS
    if s.sharding is not None and "cuda" in built_devices(s) and not s.output.allocated_by_library
]


def _large_inputs(torch, spec) -> list:
    shape = (LARGE_ROWS, LARGE_HIDDEN)
    generator = torch.Generator(device="cuda").manual_seed(0)
    arrays = []
    for i, inp in enumerate(spec.inputs):
        s = shape if i == 0 or inp.shape is None else tuple(inp.shape(shape))
        dtype = getattr(torch, inp.dtype) if inp.dtype else torch.float32
        arrays.append(torch.rand(s, generator=generator, device="cuda").add_(0.5).to(dtype))
    return arrays


@pytest.mark.parametrize("spec", PARTITIONED)
def test_large_inputs(large_torch, spec) -> None:
    from scale_lib._bound_op import sharding_of
    from scale_lib._dispatch import _REGISTERED, Dispatcher

    torch = large_torch
    op = _REGISTERED[spec.name]
    sharding = sharding_of(op)
    inputs = _large_inputs(torch, spec)
    attrs = tuple(EXAMPLE_ATTR[a.type] for a in spec.attrs)
    need = 3 * sum(t.numel() * t.element_size() for t in inputs)
    if torch.cuda.mem_get_info()[0] < need:
        pytest.skip(f"needs {need / 2**30:.0f} GiB of free GPU memory")

    def run(rows: slice | None = None) -> object:
        if rows is None:
            return Dispatcher(op).call(tuple(inputs), attrs)
        part = [t if feature else t[rows] for t, feature in zip(inputs, sharding.per_feature, strict=True)]
        return Dispatcher(op).call(tuple(part), attrs)

    result = run()
    torch.cuda.synchronize()
    assert bool(torch.isfinite(result).all())
    kept = sharding.output_dims(2)
    if sharding.kind == "elementwise" or kept[:1] == [0]:
        # Rows are independent: the first rows, those on either side of element 2^31, the last.
        for start in (0, 2**21 - 1, LARGE_ROWS - 2):
            rows = slice(start, start + 2)
            torch.testing.assert_close(result[rows], run(rows), rtol=1e-4, atol=1e-4)
        return
    # A result over all rows: the combination of the results over parts of them.
    parts = [run(slice(start, start + 2**19)) for start in range(0, LARGE_ROWS, 2**19)]
    if sharding.kind == "rows":  # summed over rows (a weight gradient)
        expected = torch.stack([p.double() for p in parts]).sum(0)
    else:  # a reduction: a norm of the parts' norms
        expected = torch.stack([p.double() for p in parts]).square().sum(0).sqrt()
    torch.testing.assert_close(result.double(), expected, rtol=1e-4, atol=1e-4)
