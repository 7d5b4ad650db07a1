# SPDX-License-Identifier: Apache-2.0
"""Vjps of scans along the last dimension with an operator other than a sum, in each framework's
own array functions (PyTorch, JAX, Paddle, NumPy, CuPy), O(n) in memory and differentiable again.

For ``p = scan(v)`` along the last axis (from the end of each row with ``reverse``) and the
gradient ``grad`` of ``p``, each returns the gradient of ``v``. ``scan(a, reverse)`` is the op's
own scan with the same operator (a scaffolded op with its attributes at their neutral values).
Second derivatives through them are right away from exact zeros of ``v`` (a product) and of
``grad`` (a log-sum-exp), where they switch branch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ._namespace import array_namespace


def _root(a: Any) -> str:
    return type(a).__module__.split(".")[0]


def flip_last(a: Any) -> Any:
    """``a`` with its last axis reversed."""
    root = _root(a)
    if root == "torch":
        return a.flip(-1)
    if root == "paddle":
        import paddle

        return paddle.flip(a, axis=[-1])
    return array_namespace(a).flip(a, axis=-1)


def cumsum_last(a: Any, reverse: bool = False) -> Any:
    """The running sum of ``a`` along its last axis (from the end with ``reverse``)."""
    if reverse:
        return flip_last(cumsum_last(flip_last(a)))
    root = _root(a)
    if root == "torch":
        return a.cumsum(-1)
    if root == "paddle":
        import paddle

        return paddle.cumsum(a, axis=-1)
    return array_namespace(a).cumsum(a, axis=-1)


# [scan_vjps.begin]
def cumprod_vjp(grad: Any, p: Any, v: Any, scan: Callable[[Any, bool], Any], reverse: bool) -> Any:
    """``p = cumprod(v)``: ``d p_i / d v_j = prod(v_k, k <= i, k != j)`` for ``j <= i``."""
    xp = array_namespace(v)
    one, nil = xp.ones_like(v), xp.zeros_like(v)
    zero = v == 0
    zeros_so_far = cumsum_last(xp.where(zero, one, nil), reverse)  # up to j, j included
    before = zeros_so_far == 0  # no zero up to j: p_i / v_j is defined
    first = xp.logical_and(zero, zeros_so_far == 1)  # the row's first zero
    # Before the first zero: sum over i >= j of grad_i * p_i / v_j (p_i is 0 from the zero on).
    at_before = cumsum_last(grad * p, not reverse) / xp.where(before, v, one)
    # At the first zero: sum over i >= j of grad_i * the product of v up to i without it.
    without_zero = scan(xp.where(first, one, v), reverse)
    at_first = cumsum_last(grad * without_zero, not reverse)
    # After it, every p_i has the zero as a factor besides v_j: no gradient.
    return xp.where(before, at_before, xp.where(first, at_first, nil))


def logcumsumexp_vjp(grad: Any, p: Any, v: Any, scan: Callable[[Any, bool], Any], reverse: bool) -> Any:
    """``p = log(running sum of exp(v))``: ``d p_i / d v_j = exp(v_j - p_i)`` for ``j <= i``, so the
    gradient of ``v_j`` is ``exp(v_j) * sum(grad_i * exp(-p_i), i >= j)``: a log-sum-exp scan the
    other way of ``log(grad) - p``, for the positive and the negative part of ``grad`` apart
    (``-inf``, the operator's identity, where a part is 0, so that its elements drop out)."""
    xp = array_namespace(v)
    one, nil, none = xp.ones_like(v), xp.zeros_like(v), xp.full_like(v, -math.inf)
    # Where p is -inf every v so far is -inf, whose gradient is 0 whatever p stands for there.
    finite_p = xp.where(p == none, nil, p)

    def log_part(g: Any) -> Any:  # log(g) where g > 0, else -inf; no log(0) in the derivative
        return xp.where(g > 0, xp.log(xp.where(g > 0, g, one)), none)

    up = xp.exp(v + scan(log_part(grad) - finite_p, not reverse))
    down = xp.exp(v + scan(log_part(-grad) - finite_p, not reverse))
    return up - down


# [scan_vjps.end]
