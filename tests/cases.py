"""One example call per public op, for the suites that run every op (bad input, threads,
lifetimes, empty arrays, the bare ABI).

Each op declares its case next to its own tests: ``CASE = OpCase(...)`` in ``tests/test_<op>.py``.
:func:`declared_cases` reads them for every public op of ``scale_lib.ops.OPS``, so adding or
removing an op needs no edit here, and a public op without a case fails the run loudly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import scale_lib
from scale_lib._dispatch import _REGISTERED
from scale_lib.ops import OPS


def _same(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape


def built_devices(spec: Any) -> tuple[str, ...]:
    """Where this build of the library has kernels for ``spec``: its declared ``devices``, less
    CUDA for a Triton op in a build without the Triton kernels (it raises ValueError there), as
    the library's own BoundOp derives it."""
    return _REGISTERED[spec.name].devices


def jax_device_for(devices: tuple[str, ...]) -> Any:
    """JAX's default device where the op has kernels for it, else JAX's CPU: what a suite that
    makes arrays with ``jnp.asarray`` runs under (``jax.default_device``) so that an op this build
    has no CUDA kernels for (a Triton op built without Triton) is not called on a GPU."""
    import jax

    default = jax.devices()[0]
    platform = "cuda" if default.platform == "gpu" else default.platform
    return default if platform in devices else jax.devices("cpu")[0]


@dataclass(frozen=True)
class OpCase:
    """How to call one op on arrays of one framework.

    Attributes:
        name: the op (``scale_lib.<name>``).
        arrays: its array arguments, ``x`` first.
        call: ``call(*arrays, out=None)`` (no ``out`` when ``has_out`` is false).
        reference: the float64 NumPy result for NumPy inputs (``reference(*arrays)``).
        has_out: the op takes ``out=``.
        optional: array arguments that may be ``None``.
        shape: the shape of ``x`` in the examples; ``shape_of[name](x_shape)`` the others'.
        reduction: the result accumulates (looser tolerances).
        jittable: works under ``jax.jit`` (its output shape does not depend on the data).
        exports: the exported ABI functions of the op and their argument counts.
        hostile_abi: bare-ABI calls ``f(lib, x)`` with bad arguments (``x``: 8 float32 ones)
            that must raise TypeError/ValueError, never crash.
        x_shape: the shape ``x`` takes for a requested example shape (an op that needs an even
            last dimension rounds it up); the suites ask for shapes of their own.
        out_shape: the output's shape for ``x``'s shape.
        in_place: ``out`` may be ``x`` itself (an output of ``x``'s shape and dtype).
        error_scale: for an op whose rounding error grows with something other than its result
            (a running sum's, with what it has added: the same scan of ``|x|``), that magnitude
            per output element for float64 inputs (``error_scale(*arrays)``); the suites then
            scale their absolute tolerance by it (see :meth:`assert_matches`).
    """

    name: str
    arrays: tuple[str, ...]
    call: Callable[..., Any]
    reference: Callable[..., Any]
    has_out: bool = True
    optional: tuple[str, ...] = ()
    shape: tuple[int, ...] = (6, 8)
    shape_of: dict[str, Callable[[tuple[int, ...]], tuple[int, ...]]] = field(default_factory=dict)
    reduction: bool = False
    jittable: bool = True
    exports: dict[str, int] = field(default_factory=dict)
    hostile_abi: tuple[Callable[[Any, Any], Any], ...] = ()
    x_shape: Callable[[tuple[int, ...]], tuple[int, ...]] = _same
    out_shape: Callable[[tuple[int, ...]], tuple[int, ...]] = _same
    in_place: bool = True
    error_scale: Callable[..., Any] | None = None

    def expected(self, inputs: list[Any], atol: float) -> tuple[np.ndarray, Any]:
        """The reference for the float64 ``inputs`` (``None`` for an absent optional one) and the
        absolute tolerance ``atol`` for it: per element, times ``error_scale``, where the op
        declares one."""
        expected = np.asarray(self.reference(*inputs), np.float64)
        if self.error_scale is None:
            return expected, atol
        return expected, atol * np.abs(np.asarray(self.error_scale(*inputs), np.float64))

    def assert_matches(
        self, actual: Any, inputs: list[Any], rtol: float, atol: float, *, equal_nan: bool = False
    ) -> None:
        """``actual`` against the reference for the float64 ``inputs``, within ``rtol`` and
        ``atol`` (see :meth:`expected`). Every suite that compares an op's result with its
        reference calls this or :func:`assert_within`."""
        expected, atol_of = self.expected(inputs, atol)
        assert_within(actual, expected, rtol, atol_of, self.name, equal_nan=equal_nan)

    @property
    def devices(self) -> tuple[str, ...]:
        """Where this build has kernels for the op (see built_devices): a CUDA-only op has no
        CPU case."""
        return built_devices(next(spec for spec in OPS if spec.name == self.name))

    def shapes(self, shape: tuple[int, ...] | None = None) -> dict[str, tuple[int, ...]]:
        """The shape of every array argument when ``x`` has ``shape`` (default: ``self.shape``)."""
        x_shape = self.x_shape(self.shape if shape is None else shape)
        return {name: self.shape_of.get(name, _same)(x_shape) for name in self.arrays}

    def output_shape(self, shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """The output's shape when ``x`` has the example shape ``shape`` (default: ``self.shape``)."""
        return self.out_shape(self.shapes(shape)[self.arrays[0]])

    def numpy_inputs(self, seed: int, shape: tuple[int, ...] | None = None) -> dict[str, np.ndarray]:
        """Float64 random data for every array argument."""
        rng = np.random.default_rng(seed)
        return {name: rng.standard_normal(s) for name, s in self.shapes(shape).items()}


def assert_within(
    actual: Any, expected: np.ndarray, rtol: float, atol: Any, name: str, *, equal_nan: bool = False
) -> None:
    """``actual`` equals ``expected`` within ``rtol`` and ``atol`` (a number, or one per element);
    NaN matches NaN with ``equal_nan``."""
    # Below the smallest normal a float keeps an absolute precision (its subnormal step), not a
    # relative one: there the tolerance is rtol times the result dtype's smallest normal.
    try:
        tiny = float(np.finfo(actual.dtype).tiny)
    except (AttributeError, TypeError, ValueError):
        tiny = 0.0
    atol = atol + rtol * tiny
    actual = np.asarray(actual, np.float64)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape}, expected {expected.shape}"
    with np.errstate(invalid="ignore"):  # inf - inf: the equality test covers it
        near = np.abs(actual - expected) <= rtol * np.abs(expected) + atol
    same = (actual == expected) | (equal_nan & np.isnan(actual) & np.isnan(expected))
    far = np.argwhere(~(same | near))
    assert far.size == 0, (
        f"{name}: {len(far)} of {actual.size} elements beyond the tolerance, first at "
        f"{tuple(far[0])}: {actual[tuple(far[0])]} vs {expected[tuple(far[0])]}"
    )


def case_of(name: str) -> OpCase:
    """The case declared by ``tests/test_<name>.py``; an error naming what is missing otherwise."""
    try:
        module = importlib.import_module(f"test_{name}")
    except ModuleNotFoundError as err:
        raise LookupError(
            f"op {name!r} is declared public in scale_lib.ops.OPS but has no tests/test_{name}.py "
            "declaring its CASE"
        ) from err
    case = getattr(module, "CASE", None)
    if not isinstance(case, OpCase) or case.name != name:
        raise LookupError(f"tests/test_{name}.py must declare CASE = OpCase({name!r}, ...)")
    return case


def public_op_names() -> list[str]:
    return [spec.name for spec in OPS if spec.public]


def declared_cases(device: str | None = None) -> list[OpCase]:
    """The case of every public op, in declaration order; only those with kernels for
    ``device`` ("cpu", "cuda") when given."""
    names = public_op_names()
    missing = [n for n in names if not callable(getattr(scale_lib, n, None))]
    if missing:
        raise LookupError(f"public ops without a function scale_lib.<name>: {missing}")
    cases = [case_of(n) for n in names]
    return cases if device is None else [c for c in cases if device in c.devices]
