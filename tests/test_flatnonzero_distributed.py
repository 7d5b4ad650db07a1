"""flatnonzero on distributed arrays: an op whose output size depends on the data has no
sharding rule. The public function refuses a DTensor saying why and what to pass instead, the
custom op fails in DTensor's shape propagation, and the advice works.

A check tests/test_distributed_torch.py runs (``SHARDED_TORCH_CHECKS``, 2 processes), one test
there; see tests/distributed_helpers.py."""

from __future__ import annotations

from typing import Any

import pytest
from distributed_helpers import torch_data

import scale_lib


def flatnonzero_refuses_dtensor(mesh: Any, device: Any) -> None:
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    dx = distribute_tensor(torch_data(4, 6, device=device), mesh, [Shard(0)])
    with pytest.raises(
        ValueError, match=r"flatnonzero does not accept DTensor.*depends on the data.*full_tensor\(\)"
    ):
        scale_lib.flatnonzero(dx)
    with pytest.raises(RuntimeError, match="flatnonzero"):  # DTensor's shape propagation
        torch.ops.scale_lib.flatnonzero(dx)
    local = scale_lib.flatnonzero(dx.full_tensor())
    torch.testing.assert_close(local, torch.nonzero(dx.full_tensor().reshape(-1)).reshape(-1))


SHARDED_TORCH_CHECKS = (flatnonzero_refuses_dtensor,)
