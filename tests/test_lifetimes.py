"""Lifetimes: results the library allocates outlive the package's Python modules and the inputs
they came from, and re-importing or reloading the package is safe. Each case runs in a fresh
interpreter (a use-after-free would crash it, not the test run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FORGET_PACKAGE = """
import gc, sys
def forget_package():
    for name in [m for m in sys.modules if m == "scale_lib" or m.startswith("scale_lib.")]:
        del sys.modules[name]
    gc.collect()
"""


def _run(code: str) -> None:
    # The child imports the op cases (tests/cases.py, tests/test_<op>.py) from this directory.
    prelude = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
    child = subprocess.run(
        [sys.executable, "-c", prelude + FORGET_PACKAGE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0 and child.stdout.strip().endswith("ok"), child.stdout + child.stderr[-3000:]


def test_results_outlive_inputs_and_modules_numpy() -> None:
    _run(
        """
        import numpy as np
        from cases import assert_within, declared_cases
        cases = declared_cases("cpu")
        inputs = [{n: a.astype(np.float32) for n, a in c.numpy_inputs(1, (40, 25)).items()} for c in cases]
        for i in inputs:
            first = next(iter(i.values()))
            first[first < 0.5] = 0  # zeros, for the ops that look for them
        results = [c.call(*i.values()) for c, i in zip(cases, inputs)]  # some library-allocated
        names = [c.name for c in cases]
        expected = [c.expected([a.astype(np.float64) for a in i.values()], 1e-5)
                    for c, i in zip(cases, inputs)]
        del inputs, cases
        forget_package()
        for name, r, (e, atol) in zip(names, results, expected):
            assert_within(r, e, 1e-4, atol, name)
        del results
        gc.collect()
        print("ok")
        """
    )


def test_results_outlive_inputs_and_modules_torch() -> None:
    pytest.importorskip("torch")
    _run(
        """
        import torch
        from cases import declared_cases
        from scale_lib.ops import OPS
        differentiable = {op.name for op in OPS if op.vjp is not None}
        results, grads = [], []
        for case in declared_cases("cpu"):
            x, *rest = case.numpy_inputs(2, (4, 16)).values()
            x = torch.tensor(x, dtype=torch.float32, requires_grad=case.name in differentiable)
            x_zeros = x.detach().clone()
            x_zeros[x_zeros < 0.5] = 0
            others = [torch.tensor(a, dtype=torch.float32) for a in rest]
            results.append(case.call(x_zeros, *others))  # allocated by torch through the library
            if x.requires_grad:
                grads.append((x, case.call(x, *others)))
        expected = [r.clone() for r in results]
        del case, x, x_zeros, others
        forget_package()
        assert all(torch.equal(r, e) for r, e in zip(results, expected))
        for x, y in grads:
            y.sum().backward()  # the autograd graph still calls into the library
            assert x.grad is not None and torch.isfinite(x.grad).all()
        print("ok")
        """
    )


def test_reload_and_reimport_are_safe() -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    _run(
        """
        import importlib
        import jax, jax.numpy as jnp, jax_tvm_ffi, numpy as np, torch
        import scale_lib
        from cases import declared_cases
        # The op of most arrays: every module reloaded, each argument is still classified.
        case = max(declared_cases("cpu"), key=lambda c: len(c.arrays))
        data = case.numpy_inputs(3, (3, 4))
        def on(convert):
            return np.asarray(case.call(*(convert(a) for a in data.values())), np.float64)
        def torch_f32(a):
            return torch.tensor(a, dtype=torch.float32)
        expected = on(np.float32)
        np.testing.assert_allclose(on(jnp.float32), expected, rtol=1e-5, atol=1e-6)
        count = jax_tvm_ffi.registered_count()
        importlib.reload(scale_lib)
        for name in [m for m in list(sys.modules) if m.startswith("scale_lib.")]:
            importlib.reload(sys.modules[name])
            gc.collect()  # no reload may drop the registration of the PyTorch custom ops
            assert hasattr(torch.ops.scale_lib, case.name), name
            np.testing.assert_allclose(on(torch_f32), expected, rtol=1e-5, atol=1e-6)
        forget_package()
        for name in [m for m in sys.modules if m == "cases" or m.startswith("test_")]:
            del sys.modules[name]  # the cases call the package they imported: import them again
        import scale_lib as again
        from cases import case_of
        case = case_of(case.name)
        np.testing.assert_allclose(on(jnp.float32), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(on(torch_f32), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(on(np.float32), expected, rtol=1e-5, atol=1e-6)
        assert jax_tvm_ffi.registered_count() == count, "JAX targets were registered again"
        print("ok")
        """
    )
