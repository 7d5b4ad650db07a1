"""Hostile input for every op and framework: each case is a clear TypeError/ValueError naming the
argument, or a correct result. Inputs are checksummed around every call: none may change. Cases
that could crash the process run in a subprocess, so a crash fails one test instead of the run.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from backends import JAX_BACKENDS, MUTABLE_BACKENDS, Backend, backend_params
from cases import OpCase, declared_cases
from reference import random_data

import scale_lib

NAN = float("nan")
TESTS = str(Path(__file__).resolve().parent)


OPS = declared_cases()  # one per public op of scale_lib.ops.OPS, declared in tests/test_<op>.py
OP_PARAMS = [pytest.param(op, id=op.name) for op in OPS]


def _arrays(backend: Backend, op: OpCase, dtype: str = "float32") -> dict[str, Any]:
    shapes = op.shapes()
    return {
        name: backend.asarray(random_data(shape, seed=i + 1), dtype)
        for i, (name, shape) in enumerate(shapes.items())
    }


def _checksum(backend: Backend, arrays: dict[str, Any]) -> dict[str, str]:
    return {
        n: hashlib.sha256(backend.to_numpy(a).tobytes()).hexdigest()
        for n, a in arrays.items()
        if a is not None
    }


class Unchanged:
    """Asserts on exit that the inputs' bytes did not change."""

    def __init__(self, backend: Backend, arrays: dict[str, Any]) -> None:
        self.backend, self.arrays = backend, arrays

    def __enter__(self) -> None:
        self.before = _checksum(self.backend, self.arrays)

    def __exit__(self, *exc: Any) -> None:
        assert _checksum(self.backend, self.arrays) == self.before, "an input was modified"


def _run(backend: Backend, op: OpCase, arrays: dict[str, Any], **kwargs: Any) -> Any:
    if backend.framework == "jax_jit" and op.jittable:
        return backend.mod.jit(lambda *a: op.call(*a, **kwargs))(*arrays.values())
    return op.call(*arrays.values(), **kwargs)


# -- not arrays -----------------------------------------------------------------------------
@pytest.mark.parametrize("op", OP_PARAMS)
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_every_array_argument_rejects_non_arrays(backend: Backend, op: OpCase) -> None:
    arrays = _arrays(backend, op)
    for name in op.arrays:
        bad_values = [[1.0, 2.0], 3.0, "abc"] + ([] if name in op.optional else [None])
        for bad in bad_values:
            with Unchanged(backend, arrays), pytest.raises(TypeError, match=f"^{name} must be a"):
                op.call(*{**arrays, name: bad}.values())


# -- dtypes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad_dtype", ["int32", "bool"])
@pytest.mark.parametrize("op", OP_PARAMS)
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_every_array_argument_rejects_other_dtypes(backend: Backend, op: OpCase, bad_dtype: str) -> None:
    arrays = _arrays(backend, op)
    for name in op.arrays:
        shape = op.shapes()[name]
        bad = backend.asarray(np.ones(shape), bad_dtype)
        first = op.arrays[0]
        expected = (
            f"{first} has unsupported dtype {bad_dtype}"
            if name == first
            else f"{name} and {first} must have the same dtype"
        )
        with Unchanged(backend, arrays), pytest.raises(TypeError, match=expected):
            _run(backend, op, {**arrays, name: bad})


# -- shapes and layouts ---------------------------------------------------------------------
@pytest.mark.parametrize("op", [p for p in OP_PARAMS if len(p.values[0].arrays) > 1])
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_secondary_inputs_must_match_x(backend: Backend, op: OpCase) -> None:
    arrays = _arrays(backend, op)
    for name in op.arrays[1:]:
        shape = op.shapes()[name]
        bad = backend.asarray(np.ones((*shape[:-1], shape[-1] + 1)), "float32")
        with Unchanged(backend, arrays), pytest.raises(ValueError, match=f"{name}"):
            _run(backend, op, {**arrays, name: bad})


def _non_contiguous(backend: Backend, shape: tuple[int, ...]) -> list[tuple[str, Any]]:
    """Non-contiguous views of `shape` this framework can make, each with a name."""
    wide = backend.asarray(random_data((*shape[:-1], 2 * shape[-1]), 9), "float32")
    views = [("step", wide[..., ::2])]
    if len(shape) >= 2 and backend.framework != "paddle":
        square = backend.asarray(random_data((shape[-1], shape[-2]), 10), "float32")
        views.append(("transpose", square.T))
    if backend.framework in ("numpy", "cupy"):
        views.append(("negative stride", backend.asarray(random_data(shape, 11), "float32")[..., ::-1]))
    return views


@pytest.mark.parametrize("op", OP_PARAMS)
@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_non_contiguous_arguments(backend: Backend, op: OpCase) -> None:
    arrays = _arrays(backend, op)
    for name in op.arrays:
        shape = op.shapes()[name]
        for _what, view in _non_contiguous(backend, shape):
            with Unchanged(backend, arrays), pytest.raises(ValueError, match=f"{name} must be"):
                op.call(*{**arrays, name: view}.values())
    if op.has_out:
        for _what, view in _non_contiguous(backend, op.output_shape()):
            out_before = backend.to_numpy(view).copy()
            with Unchanged(backend, arrays), pytest.raises(ValueError, match="out must be"):
                op.call(*arrays.values(), out=view)
            np.testing.assert_array_equal(backend.to_numpy(view), out_before)


# -- out ------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [p for p in OP_PARAMS if p.values[0].has_out])
@pytest.mark.parametrize("backend", MUTABLE_BACKENDS, indirect=True)
def test_out_shape_dtype_and_aliasing(backend: Backend, op: OpCase) -> None:
    arrays = _arrays(backend, op)
    first = op.arrays[0]
    x = arrays[first]
    out_shape = op.output_shape()
    like_x = out_shape == op.shapes()[first]
    cases = [
        (
            backend.asarray(np.full((*out_shape[:-1], out_shape[-1] + 1), NAN), "float32"),
            ValueError,
            f"out and {first} must have the same shape" if like_x else "out must have .*shape",
        ),
        (
            backend.asarray(np.full(out_shape, NAN), "float64"),
            TypeError,
            f"out and {first} must have the same dtype",
        ),
    ]
    for out, error, message in cases:
        with Unchanged(backend, arrays), pytest.raises(error, match=message):
            op.call(*arrays.values(), out=out)
        assert np.isnan(backend.to_numpy(out)).all(), "an erroring call wrote into out"
    # out = x is in-place use and defined (where the op allows it); out overlapping x otherwise
    # is refused.
    if op.in_place:
        expected = backend.to_numpy(op.call(*arrays.values()))
        assert op.call(*arrays.values(), out=x) is x
        np.testing.assert_allclose(backend.to_numpy(x), expected, rtol=1e-6, atol=1e-6)
    x_shape, n_out = op.shapes()[first], math.prod(out_shape)
    buffer = backend.asarray(random_data((8 + math.prod(x_shape),), 3), "float32")
    shifted = {**arrays, first: buffer[8:].reshape(x_shape)}
    with pytest.raises(ValueError, match="overlap in memory"):
        op.call(*shifted.values(), out=buffer[:n_out].reshape(out_shape))


@pytest.mark.parametrize("op", [p for p in OP_PARAMS if p.values[0].has_out])
def test_read_only_and_immutable_outputs(op: OpCase) -> None:
    backend = Backend("numpy", "cpu")
    arrays = _arrays(backend, op)
    out = np.full(op.output_shape(), NAN, np.float32)
    out.flags.writeable = False
    with Unchanged(backend, arrays), pytest.raises(ValueError, match="out is a read-only NumPy array"):
        op.call(*arrays.values(), out=out)
    assert np.isnan(out).all()
    jnp = pytest.importorskip("jax.numpy")
    jax_out = jnp.full(op.output_shape(), NAN, jnp.float32)
    with Unchanged(backend, arrays), pytest.raises(TypeError, match="out is a JAX array"):
        op.call(*arrays.values(), out=jax_out)
    assert np.isnan(np.asarray(jax_out)).all()


@pytest.mark.parametrize("op", [p for p in OP_PARAMS if p.values[0].has_out])
@pytest.mark.parametrize("backend", JAX_BACKENDS, indirect=True)
def test_jax_has_no_out(backend: Backend, op: OpCase) -> None:
    arrays = _arrays(backend, op)
    first = op.arrays[0]
    with pytest.raises(TypeError, match=f"out= is not supported when {first} is a JAX array"):
        op.call(*arrays.values(), out=arrays[first])


# -- IEEE specials --------------------------------------------------------------------------
@pytest.mark.parametrize("op", OP_PARAMS)
@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_nan_and_inf_propagate_as_ieee_says(backend: Backend, op: OpCase) -> None:
    data = random_data(op.shape, 5)
    data[0, 0], data[1, 1], data[2, 2] = np.nan, np.inf, -np.inf
    arrays = {**_arrays(backend, op), op.arrays[0]: backend.asarray(data, "float32")}
    result = backend.to_numpy(_run(backend, op, arrays))
    inputs = [None if a is None else backend.to_numpy(a).astype(np.float64) for a in arrays.values()]
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, inf / inf: NaN, as IEEE says
        op.assert_matches(result, inputs, 1e-5, 1e-6, equal_nan=True)


# -- the bare ABI ---------------------------------------------------------------------------
EXPORTS = {"build_info": 0} | {name: arity for op in OPS for name, arity in op.exports.items()}


@pytest.mark.parametrize(("name", "arity"), EXPORTS.items())
def test_abi_argument_count_and_types(name: str, arity: int) -> None:
    fn = getattr(scale_lib.lib, name)
    with pytest.raises(TypeError, match=f"Expected {arity} but got {arity + 1} arguments"):
        fn(*([None] * (arity + 1)))
    if arity:
        with pytest.raises(TypeError, match=r"Mismatched type on argument #\d+ when calling"):
            fn("not a tensor", *([None] * (arity - 1)))


# -- crash-prone edge cases, isolated ---------------------------------------------------------
def _run_isolated(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("op", OP_PARAMS)
def test_empty_tensors_with_null_data_pointers(op: OpCase) -> None:
    # torch allocates nothing for empty tensors: data pointers are NULL. Every op must return
    # before touching them, whatever the shape of the emptiness.
    pytest.importorskip("torch")
    child = _run_isolated(
        f"""
        import sys, warnings, numpy as np, torch
        sys.path.insert(0, {TESTS!r})
        from cases import case_of
        warnings.simplefilter("ignore")  # NumPy's mean of an empty row
        op = case_of({op.name!r})
        for shape in [(0,), (0, 8), (8, 0), (3, 0, 2)]:
            arrays = [None if n in op.optional else torch.empty(s) for n, s in op.shapes(shape).items()]
            assert all(a is None or a.data_ptr() == 0 or a.numel() == 0 for a in arrays)
            result = op.call(*arrays).numpy()
            expected = op.reference(*(None if a is None else a.numpy() for a in arrays))
            assert result.shape == np.shape(expected), (shape, result.shape)
            np.testing.assert_allclose(result, expected, equal_nan=True)
        print("ok")
        """
    )
    assert child.returncode == 0 and child.stdout.split()[-1:] == ["ok"], child.stdout + child.stderr[-2000:]


@pytest.mark.parametrize("op", [p for p in OP_PARAMS if p.values[0].hostile_abi])
def test_abi_calls_with_hostile_arguments(op: OpCase) -> None:
    child = _run_isolated(
        f"""
        import numpy as np, scale_lib
        lib, x = scale_lib.lib, np.ones(8, np.float32)
        for i, call in enumerate({list(op.hostile_abi)!r}):
            try:
                eval(call)
            except (TypeError, ValueError):
                continue
            raise SystemExit(f"no error for case {{i}}: {{call}}")
        print("ok")
        """
    )
    assert child.returncode == 0 and child.stdout.split()[-1:] == ["ok"], child.stdout + child.stderr[-2000:]
