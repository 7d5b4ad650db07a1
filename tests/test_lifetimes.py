"""Lifetimes: results the library allocates outlive the package's Python modules and the inputs
they came from, and re-importing or reloading the package is safe. Each case runs in a fresh
interpreter (a use-after-free would crash it, not the test run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

FORGET_PACKAGE = """
import gc, sys
def forget_package():
    for name in [m for m in sys.modules if m == "scale_lib" or m.startswith("scale_lib.")]:
        del sys.modules[name]
    gc.collect()
"""


def _run(code: str) -> None:
    child = subprocess.run(
        [sys.executable, "-c", FORGET_PACKAGE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0 and child.stdout.strip().endswith("ok"), child.stdout + child.stderr[-3000:]


def test_results_outlive_inputs_and_modules_numpy() -> None:
    _run(
        """
        import numpy as np, scale_lib
        x = np.zeros(1000, np.float32); x[[3, 500, 999]] = 1
        indices = scale_lib.flatnonzero(x)   # library-allocated (no NumPy allocator)
        norm = scale_lib.l2_norm(x)
        del x, scale_lib
        forget_package()
        assert indices.tolist() == [3, 500, 999] and abs(float(norm) - 3 ** 0.5) < 1e-6
        del indices
        gc.collect()
        print("ok")
        """
    )


def test_results_outlive_inputs_and_modules_torch() -> None:
    pytest.importorskip("torch")
    _run(
        """
        import torch, scale_lib
        x = torch.zeros(1000); x[[3, 999]] = 1
        indices = scale_lib.flatnonzero(x)   # allocated by torch through the library
        y = scale_lib.rms_norm(torch.randn(4, 16, requires_grad=True))
        del x, scale_lib
        forget_package()
        assert indices.tolist() == [3, 999]
        y.sum().backward()                   # the autograd graph still calls into the library
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
        scale_lib.scale(jnp.ones(3), 2.0)
        count = jax_tvm_ffi.registered_count()
        importlib.reload(scale_lib)
        for name in [m for m in list(sys.modules) if m.startswith("scale_lib.")]:
            importlib.reload(sys.modules[name])
            gc.collect()  # no reload may drop the registration of the PyTorch custom ops
            assert torch.ops.scale_lib.scale(torch.ones(2), 4.0).tolist() == [4.0, 4.0], name
        forget_package()
        import scale_lib as again
        assert float(again.scale(jnp.ones(3), 3.0)[0]) == 3.0
        assert again.scale(torch.ones(2), 2.0).tolist() == [2.0, 2.0]
        assert torch.ops.scale_lib.scale(torch.ones(2), 4.0).tolist() == [4.0, 4.0]
        assert np.array_equal(again.scale(np.ones(2), 5.0), [5.0, 5.0])
        assert jax_tvm_ffi.registered_count() == count, "JAX targets were registered again"
        print("ok")
        """
    )
