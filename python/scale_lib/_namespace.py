# SPDX-License-Identifier: Apache-2.0
"""Framework math for vjps: the array API namespace of the arrays an op was given.

A vjp written with :func:`array_namespace` runs unchanged on PyTorch, JAX and Paddle (and NumPy
and CuPy):

    def _silu_mul_vjp(grad, out, x, y):
        xp = array_namespace(x)
        s = 1 / (1 + xp.exp(-x))
        return grad * y * s * (1 + x * (1 - s)), grad * x * s

The namespace is the one `array-api-compat <https://data-apis.org/array-api-compat/>`_ gives
where it is installed (``pip install 'scale-lib[array-api]'``), whose functions follow the
`array API standard <https://data-apis.org/array-api/latest/>`_ exactly. Without it (a
gradient must not depend on an optional extra) the namespace is the framework's own module:
``numpy``, ``torch``, ``jax.numpy``, ``cupy`` or ``paddle``, whose elementwise functions
(``exp``, ``tanh``, ``sqrt``, ``where``, ...) and ``sum(t, axis=...)`` have the standard's
names. Paddle is not covered by array-api-compat: for Paddle tensors the namespace is always the
``paddle`` module.
"""

from __future__ import annotations

import sys
from typing import Any


# [array_namespace.begin]
def array_namespace(*arrays: Any) -> Any:
    """The array API namespace of ``arrays`` (all of one framework): ``xp.exp``, ``xp.tanh``...

    Raises:
        TypeError: the arrays are of different frameworks, or not arrays.
    """
    present = [a for a in arrays if a is not None]
    roots = {type(a).__module__.split(".")[0] for a in present}
    if roots == {"paddle"}:
        return sys.modules["paddle"]
    try:
        import array_api_compat
    except ImportError:
        return _framework_module(roots)
    return array_api_compat.array_namespace(*present)


# [array_namespace.end]
# The module of each framework's arrays, by the top-level module of the array's type.
_MODULES = {"numpy": "numpy", "torch": "torch", "jax": "jax.numpy", "jaxlib": "jax.numpy", "cupy": "cupy"}


def _framework_module(roots: set[str]) -> Any:
    names = {_MODULES.get(root, "") for root in roots}
    if len(names) != 1 or "" in names:
        raise TypeError(f"array_namespace takes arrays of one framework; got arrays from {sorted(roots)}")
    name = names.pop()
    __import__(name)
    return sys.modules[name]
