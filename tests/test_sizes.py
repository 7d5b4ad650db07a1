"""Zero-size arrays work with every op; 0-d arrays with every op whose inputs may have no
dimension, and the others refuse them with a ValueError naming the input (docs/guarantees.md).
Driven by the declared ops."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from cases import declared_cases

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
