"""axpby on distributed arrays: its gradients through a chain with scale, both inputs sharded.

Checks the distributed suites run, each one a test there: tests/test_distributed_torch.py
(``SHARDED_TORCH_CHECKS``, 2 processes) and tests/test_distributed_jax.py
(``SHARDED_JAX_CHECKS``, 4 host devices); see tests/distributed_helpers.py. The rules every
elementwise op follows are checked by the suites themselves."""

from __future__ import annotations

from typing import Any

from distributed_helpers import (
    assert_full_close,
    assert_spec,
    close,
    compiled,
    jax_data,
    jax_mesh,
    no_comm,
    no_gather,
    put,
    torch_data,
)

import scale_lib


def scale_and_axpby_autograd(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    x, y, g = (torch_data(4, 6, seed=s, device=device) for s in range(3))
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    scale_lib.scale(scale_lib.axpby(xr, yr, 2.0, 3.0), 0.5).backward(g)
    dx = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
    dy = distribute_tensor(y, mesh, [Shard(1)]).requires_grad_()
    out = scale_lib.scale(scale_lib.axpby(dx, dy, 2.0, 3.0), 0.5)
    dg = distribute_tensor(g, mesh, [Shard(1)])
    with no_comm() as comm:
        out.backward(dg)
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    assert dx.grad.placements == dy.grad.placements == (Shard(1),)
    assert_full_close(dx.grad, xr.grad)
    assert_full_close(dy.grad, yr.grad)


def scale_and_axpby_grad() -> None:
    import jax

    m = jax_mesh()
    x, y = jax_data(8, 12), jax_data(8, 12, seed=1)

    def loss(a: Any, b: Any) -> Any:
        return (scale_lib.scale(scale_lib.axpby(a, b, 2.0, 3.0), 0.5) * a).sum()

    grad = jax.grad(loss, argnums=(0, 1))
    (gx, gy), hlo = compiled(grad, put(x, m, "b", None), put(y, m, "b", None))
    no_gather(hlo)
    assert_spec(gx, m, "b", None)
    assert_spec(gy, m, "b", None)
    ex, ey = grad(x, y)
    close(gx, ex)
    close(gy, ey)


SHARDED_TORCH_CHECKS = (scale_and_axpby_autograd,)
SHARDED_JAX_CHECKS = (scale_and_axpby_grad,)
