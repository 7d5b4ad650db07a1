# SPDX-License-Identifier: Apache-2.0
"""Framework math for vjps: the array API namespace of the arrays an op was given.

A vjp written with :func:`array_namespace` runs unchanged on PyTorch, JAX and Paddle (and NumPy
and CuPy):

    def _silu_mul_vjp(grad, out, x, y):
        xp = array_namespace(x)
        s = 1 / (1 + xp.exp(-x))
        return grad * y * s * (1 + x * (1 - s)), grad * x * s

The namespace is the one `array-api-compat <https://data-apis.org/array-api-compat/>`_ gives
(an optional dependency: ``pip install 'scale-lib[array-api]'``), whose functions follow the
`array API standard <https://data-apis.org/array-api/latest/>`_. Paddle is not covered by
array-api-compat: for Paddle tensors the namespace is the ``paddle`` module itself, whose
elementwise functions (``exp``, ``tanh``, ``sqrt``, ``where``, ...) have the standard's names.
"""

from __future__ import annotations

import sys
from typing import Any


# [array_namespace.begin]
def array_namespace(*arrays: Any) -> Any:
    """The array API namespace of ``arrays`` (all of one framework): ``xp.exp``, ``xp.tanh``...

    Raises:
        ImportError: array-api-compat is not installed (and the arrays are not Paddle tensors).
        TypeError: the arrays are of different frameworks, or not arrays.
    """
    paddle = sys.modules.get("paddle")
    present = [a for a in arrays if a is not None]
    if paddle is not None and present and all(isinstance(a, paddle.Tensor) for a in present):
        return paddle
    try:
        import array_api_compat
    except ImportError as err:
        raise ImportError(
            "scale_lib.array_namespace needs array-api-compat: pip install 'scale-lib[array-api]' "
            "(or pip install array-api-compat)"
        ) from err
    return array_api_compat.array_namespace(*present)


# [array_namespace.end]
