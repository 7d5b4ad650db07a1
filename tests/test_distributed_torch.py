"""scale_lib ops on PyTorch DTensors: placements kept, values equal to the unsharded op, no
collective where the op treats the sharded dimension independently, and autograd.

Every declared op is checked by its sharding kind (its ``CASE``'s call, tests/cases.py); the
checks test modules add (``SHARDED_TORCH_CHECKS``, see tests/distributed_helpers.py) run too.
Two processes on loopback, spawned by a child interpreter (bounded in time): gloo on CPU by
default; ``SCALE_LIB_TEST_DIST_BACKEND=nccl`` runs the same checks on 2 GPUs. Every check runs
on both ranks in the same order; rank 0 reports each one's outcome, and each is one test here.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cases import OpCase
from distributed_helpers import (
    NoOpOfKind,
    added_checks,
    assert_full_close,
    cases_of_kind,
    no_comm,
    per_feature,
    torch_data,
)

from scale_lib._spec import OpSpec

# The names under which test modules that list checks import these helpers from this module.
_assert_close, _data, _no_comm = assert_full_close, torch_data, no_comm

BACKEND = os.environ.get("SCALE_LIB_TEST_DIST_BACKEND", "gloo")
TIMEOUT_S = 600

CHECKS: dict[str, Callable[[Any, Any], None]] = {}


def check(f: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    assert f.__name__ not in CHECKS, f"two checks named {f.__name__}"
    CHECKS[f.__name__] = f
    return f


# ---------------------------------------------------------------------------------------------
# Checks, run on every rank with a 1-D mesh of 2 and the device of the rank
# ---------------------------------------------------------------------------------------------
def _ops(device: Any, *kinds: str | None) -> list[tuple[OpSpec, OpCase]]:
    return cases_of_kind(*kinds, device=device.type)


def _arrays(
    case: OpCase, shape: tuple[int, ...], device: Any, seed: int = 0, dtype: str = "float32"
) -> dict[str, Any]:
    """Random data for every array argument of ``case`` when ``x`` has ``shape``."""
    return {
        name: torch_data(*s, dtype=dtype, seed=seed + i, device=device)
        for i, (name, s) in enumerate(case.shapes(shape).items())
    }


def _placed(spec: OpSpec, arrays: dict[str, Any], mesh: Any, p: Any, feature: Any = None) -> list[Any]:
    """``arrays`` as DTensors: placed ``p``, per-feature inputs ``feature`` (default: Replicate)."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    whole = per_feature(spec)
    return [
        distribute_tensor(a, mesh, [(feature or Replicate()) if whole[n] else p]) for n, a in arrays.items()
    ]


def _without(case: OpCase, args: list[Any]) -> list[list[Any]]:
    """``args``, and ``args`` with each optional input absent."""
    return [args] + [
        [None if n == name else a for n, a in zip(case.arrays, args, strict=True)] for name in case.optional
    ]


@check
def elementwise_keeps_shards(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard

    for spec, case in _ops(device, "elementwise"):
        arrays = _arrays(case, (4, 6, 8), device)
        expected = case.call(*arrays.values())
        for p in (Shard(0), Shard(1), Shard(2), Replicate()):
            args = _placed(spec, arrays, mesh, p)
            with no_comm() as comm:
                out = case.call(*args)
            assert comm.get_total_counts() == 0, (spec.name, p, comm.get_comm_counts())
            assert out.placements == (p,), (spec.name, p, out.placements)
            assert_full_close(out, expected)


@check
def elementwise_mixed_placements(mesh: Any, device: Any) -> None:
    # Replicated inputs next to a sharded x are sliced to x's shards locally: no communication.
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    for spec, case in _ops(device, "elementwise"):
        arrays = list(_arrays(case, (4, 6), device).values())
        args = [
            distribute_tensor(a, mesh, [Shard(1) if i == 0 else Replicate()]) for i, a in enumerate(arrays)
        ]
        with no_comm() as comm:
            out = case.call(*args)
        assert comm.get_total_counts() == 0, (spec.name, comm.get_comm_counts())
        assert out.placements == (Shard(1),), (spec.name, out.placements)
        assert_full_close(out, case.call(*arrays))


@check
def linear_ops_keep_partial(mesh: Any, device: Any) -> None:
    import torch
    from torch.distributed.tensor import DTensor, Partial

    rank = mesh.get_local_rank()
    for spec, case in _ops(device, "elementwise"):
        if not spec.linear:
            continue
        # The values each rank holds: 2 per input.
        held = [_arrays(case, (3, 5), device, seed=10 * (r + 1)) for r in range(2)]
        for reduce_op in ("sum", "avg"):
            args = [DTensor.from_local(a, mesh, [Partial(reduce_op)]) for a in held[rank].values()]
            reduce = torch.add if reduce_op == "sum" else (lambda u, v: (u + v) / 2)
            whole = [reduce(u, v) for u, v in zip(held[0].values(), held[1].values(), strict=True)]
            with no_comm() as comm:
                out = case.call(*args)
            assert comm.get_total_counts() == 0, (spec.name, comm.get_comm_counts())
            assert out.placements == (Partial(reduce_op),), (spec.name, out.placements)
            assert_full_close(out, case.call(*whole))


@check
def nonlinear_ops_reduce_partial_first(mesh: Any, device: Any) -> None:
    # DTensor reduces the partial values first (all-reduce, or reduce-scatter to rows).
    from torch.distributed.tensor import DTensor, Partial, Replicate, distribute_tensor

    rank = mesh.get_local_rank()
    for spec, case in _ops(device, "elementwise", "rows", "reduction"):
        if spec.linear:
            continue
        arrays = _arrays(case, (3, 6), device, seed=30)
        xs = [torch_data(*arrays[case.arrays[0]].shape, seed=40 + r, device=device) for r in range(2)]
        others = list(arrays.values())[1:]
        args = [DTensor.from_local(xs[rank], mesh, [Partial()])]
        args += [distribute_tensor(a, mesh, [Replicate()]) for a in others]
        out = case.call(*args)
        if spec.sharding != "reduction":  # whose output may be partial norms of reduced shards
            assert not isinstance(out.placements[0], Partial), (spec.name, out.placements)
        assert_full_close(out, case.call(xs[0] + xs[1], *others))


@check
def out_variants_write_the_callers_tensor(mesh: Any, device: Any) -> None:
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    for spec, case in _ops(device, "elementwise", "rows"):
        if not case.has_out:
            continue
        arrays = _arrays(case, (4, 6, 8), device)
        expected = case.call(*arrays.values())
        args = _placed(spec, arrays, mesh, Shard(0))
        for p in (Shard(0), Replicate()):  # out sharded like x, or whole (x is gathered)
            out = distribute_tensor(torch.zeros_like(expected), mesh, [p])
            assert case.call(*args, out=out) is out, spec.name
            assert out.placements == (p,), (spec.name, out.placements)
            assert_full_close(out, expected)
        if spec.sharding == "rows":
            # A rows op cannot write an out split along the last dimension.
            out = distribute_tensor(torch.zeros_like(expected), mesh, [Shard(expected.ndim - 1)])
            with pytest.raises(Exception, match=f"{spec.name}_out"):
                case.call(*args, out=out)


@check
def rows_keep_row_shards(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Shard

    for spec, case in _ops(device, "rows"):
        arrays = _arrays(case, (4, 6, 8), device)
        for p in (Shard(0), Shard(1)):
            for args, plain in zip(
                _without(case, _placed(spec, arrays, mesh, p)),
                _without(case, list(arrays.values())),
                strict=True,
            ):
                with no_comm() as comm:
                    out = case.call(*args)
                assert comm.get_total_counts() == 0, (spec.name, p, comm.get_comm_counts())
                assert out.placements == (p,), (spec.name, p, out.placements)
                assert_full_close(out, case.call(*plain))


@check
def rows_gather_the_last_dim(mesh: Any, device: Any) -> None:
    # x split along its last dimension (and a sharded weight) is gathered first.
    from torch.distributed.tensor import Shard

    for spec, case in _ops(device, "rows"):
        arrays = _arrays(case, (4, 6, 8), device)
        out = case.call(*_placed(spec, arrays, mesh, Shard(2), feature=Shard(0)))
        assert out.placements != (Shard(2),), (spec.name, out.placements)
        assert_full_close(out, case.call(*arrays.values()))


def _autograd(spec: OpSpec, case: OpCase, mesh: Any, device: Any, shape: tuple[int, ...]) -> None:
    """Forward and backward with x (and inputs like it) Shard(1), per-feature inputs replicated:
    the backward communicates nothing; gradients are sharded like their inputs, a per-feature
    input's a partial sum over rows."""
    from torch.distributed.tensor import Partial, Shard, distribute_tensor

    arrays = _arrays(case, shape, device)
    plain = [a.clone().requires_grad_() for a in arrays.values()]
    out = case.call(*plain)
    g = torch_data(*out.shape, seed=9, device=device)
    out.backward(g)
    args = [a.requires_grad_() for a in _placed(spec, arrays, mesh, Shard(1))]
    out, dg = case.call(*args), distribute_tensor(g, mesh, [Shard(1)])
    with no_comm() as comm:
        out.backward(dg)
    assert comm.get_total_counts() == 0, (spec.name, comm.get_comm_counts())
    whole = per_feature(spec)
    for name, a, p in zip(case.arrays, args, plain, strict=True):
        assert a.grad.placements == ((Partial("sum"),) if whole[name] else (Shard(1),)), (
            spec.name,
            name,
            a.grad,
        )
        assert_full_close(a.grad, p.grad)


@check
def elementwise_autograd(mesh: Any, device: Any) -> None:
    for spec, case in _ops(device, "elementwise"):
        if spec.vjp is not None:
            _autograd(spec, case, mesh, device, (4, 6))


@check
def rows_autograd(mesh: Any, device: Any) -> None:
    for spec, case in _ops(device, "rows"):
        if spec.vjp is not None:
            _autograd(spec, case, mesh, device, (4, 6, 8))


@check
def reduction_partial_norms(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    for spec, case in _ops(device, "reduction"):
        for dtype in ("float32", "float64"):
            x = torch_data(6, 10, dtype=dtype, device=device)
            expected = case.call(x)
            for p in (Shard(0), Shard(1)):
                dx = distribute_tensor(x, mesh, [p])
                with no_comm() as comm:
                    n = case.call(dx)
                assert comm.get_total_counts() == 0, (spec.name, comm.get_comm_counts())
                # Each rank holds its shard's norm; DTensor reduces them when the value is read.
                assert isinstance(n.placements[0], Partial), (spec.name, n.placements)
                assert_full_close(n, expected)
            n = case.call(distribute_tensor(x, mesh, [Replicate()]))
            assert n.placements == (Replicate(),), (spec.name, n.placements)
            assert_full_close(n, expected)


@check
def reduction_16_bit_gathers(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    for spec, case in _ops(device, "reduction"):
        if "float16" in spec.dtypes:
            x = torch_data(6, 10, dtype="float16", device=device)
            n = case.call(distribute_tensor(x, mesh, [Shard(0)]))
            assert n.placements == (Replicate(),), (spec.name, n.placements)
            assert_full_close(n, case.call(x))


@check
def reduction_autograd(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    for spec, case in _ops(device, "reduction"):
        if spec.vjp is None:
            continue
        x = torch_data(6, 10, device=device)
        xr = x.clone().requires_grad_()
        case.call(xr).backward()
        dx = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        case.call(dx).full_tensor().backward()
        assert dx.grad.placements == (Shard(0),), (spec.name, dx.grad.placements)
        assert_full_close(dx.grad, xr.grad)


@check
def unsharded_ops_refuse_dtensor(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    for spec, case in _ops(device, None):
        args = [distribute_tensor(a, mesh, [Shard(0)]) for a in _arrays(case, (4, 6), device).values()]
        with pytest.raises(ValueError, match=rf"{spec.name} does not accept DTensor.*full_tensor\(\)"):
            case.call(*args)


# ---------------------------------------------------------------------------------------------
# The two processes
# ---------------------------------------------------------------------------------------------
for _f in added_checks("SHARDED_TORCH_CHECKS"):
    check(_f)


def _init(rank: int, world_size: int, backend: str, port: int) -> Any:
    """Join the process group on loopback and return a 1-D device mesh."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if backend == "gloo" and sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    device_type = "cuda" if backend == "nccl" else "cpu"
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    return init_device_mesh(device_type, (world_size,))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, backend: str, port: int, result_path: str) -> None:
    import torch
    import torch.distributed as dist

    mesh = _init(rank, 2, backend, port)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    results = {}
    for name, f in CHECKS.items():
        try:
            f(mesh, device)
            results[name] = "ok"
        except NoOpOfKind as reason:
            results[name] = f"skip: {reason}"
        except Exception:  # noqa: BLE001 - reported to the parent, which fails the test
            results[name] = traceback.format_exc()
        dist.barrier()  # both ranks finish a check before the next one starts
    if rank == 0:
        Path(result_path).write_text(json.dumps(results))
    # Leave without destroying the process group or the interpreter's teardown: on a loaded
    # machine PyTorch's gloo threads have aborted a rank there ("terminate called without an
    # active exception") after every check had passed. After the last barrier no collective is
    # pending, and the results are written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _main() -> None:
    import torch.multiprocessing as mp

    backend, result_path = sys.argv[1], sys.argv[2]
    mp.spawn(_rank_main, args=(backend, _free_port(), result_path), nprocs=2)


def _skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.distributed.is_available():
        return "this PyTorch has no torch.distributed"
    if BACKEND == "nccl" and torch.cuda.device_count() < 2:
        return "the nccl backend needs 2 CUDA GPUs"
    return None


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    path = tmp_path_factory.mktemp("dist") / "results.json"
    env = dict(os.environ)
    if BACKEND == "nccl":
        env.setdefault("NCCL_NVLS_ENABLE", "0")
    child = subprocess.run(
        [sys.executable, __file__, BACKEND, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
    )
    assert child.returncode == 0 and path.exists(), child.stderr[-5000:]
    result: dict[str, str] = json.loads(path.read_text())
    return result


@pytest.mark.parametrize("name", list(CHECKS))
def test_dtensor(results: dict[str, str], name: str) -> None:
    if results[name].startswith("skip: "):
        pytest.skip(results[name].removeprefix("skip: "))
    assert results[name] == "ok", results[name]


if __name__ == "__main__":
    _main()
