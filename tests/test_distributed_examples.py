# op-file: rms_norm
"""The distributed examples (examples/distributed_block.py, examples/distributed_jax.py), built on
rms_norm: a file of their own, deleted with rms_norm and not copied with it (``--like``).

The block trained under FSDP2 and under tensor + sequence parallelism against the same model on
one process are checks tests/test_distributed_torch.py runs (``SHARDED_TORCH_CHECKS``, 2
processes), each one a test there; see tests/distributed_helpers.py. examples/distributed_jax.py
runs as a script here."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMEOUT_S = 600


def _example() -> Any:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module("distributed_block")


def block_fsdp2(mesh: Any, device: Any) -> None:
    example = _example()
    data = example.make_data(3, device)
    result = example.compare(example.train_reference(data, device, 0.1), example.train_fsdp(data, mesh, 0.1))
    assert result["ok"], result


def block_tensor_sequence_parallel(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import DTensor, Shard

    example = _example()
    data = example.make_data(3, device)
    result = example.compare(
        example.train_reference(data, device, 0.1), example.train_tensor_parallel(data, mesh, 0.1)
    )
    assert result["ok"], result
    # The scale_lib ops of the parallelised block see and return sequence-sharded DTensors.
    model = example.parallelize(example.make_model(device), mesh)
    seen: list[tuple[str, Any]] = []

    def record(name: str) -> Any:
        return lambda module, args, out: seen.extend([(f"{name} in", args[0]), (f"{name} out", out)])

    model.blocks[0].norm.register_forward_hook(record("rms_norm"))
    model.blocks[0].register_forward_hook(record("block"))
    model(data[0][0])
    for name, t in seen:
        assert isinstance(t, DTensor) and t.placements == (Shard(1),), (
            name,
            type(t),
            getattr(t, "placements", None),
        )


SHARDED_TORCH_CHECKS = (block_fsdp2, block_tensor_sequence_parallel)


def test_example_runs() -> None:
    pytest.importorskip("jax_tvm_ffi")
    env = dict(os.environ)
    if os.environ.get("SCALE_LIB_TEST_DIST_BACKEND", "gloo") != "nccl":
        env["JAX_PLATFORMS"] = "cpu"
    example = EXAMPLES / "distributed_jax.py"
    child = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, env=env, timeout=TIMEOUT_S
    )
    assert child.returncode == 0, child.stdout + child.stderr[-3000:]
    assert "collectives in the compiled HLO: none" in child.stdout
