"""scale_lib ops on PyTorch DTensors: placements kept, values equal to the unsharded op, no
collective where the op treats the sharded dimension independently, and autograd.

Two processes on loopback, spawned by a child interpreter (bounded in time): gloo on CPU by
default; ``SCALE_LIB_TEST_DIST_BACKEND=nccl`` runs the same checks on 2 GPUs. Every check runs
on both ranks in the same order; rank 0 reports each one's outcome, and each is one test here.
"""

from __future__ import annotations

import datetime
import importlib
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
from cases import public_op_names

BACKEND = os.environ.get("SCALE_LIB_TEST_DIST_BACKEND", "gloo")
TIMEOUT_S = 600

CHECKS: dict[str, Callable[[Any, Any], None]] = {}


def check(f: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    CHECKS[f.__name__] = f
    return f


# ---------------------------------------------------------------------------------------------
# Checks, run on every rank with a 1-D mesh of 2 and the device of the rank
# ---------------------------------------------------------------------------------------------
def _data(*shape: int, dtype: str = "float32", seed: int = 0, device: Any = None) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(getattr(torch, dtype)).to(device)


def _no_comm() -> Any:
    from torch.distributed.tensor.debug import CommDebugMode

    return CommDebugMode()


def _assert_close(dt: Any, expected: Any, **tol: float) -> None:
    import torch

    torch.testing.assert_close(dt.full_tensor(), expected, **tol)


@check
def elementwise_keeps_shards(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import scale_lib

    x, y = _data(4, 6, 8, device=device), _data(4, 6, 8, seed=1, device=device)
    calls = [lambda a, b: scale_lib.scale(a, 3.0)]  # every elementwise op, of (x, y)
    # op: axpby
    calls.append(lambda a, b: scale_lib.axpby(a, b, 2.0, -0.5))
    # /op: axpby
    for p in (Shard(0), Shard(1), Shard(2), Replicate()):
        dx, dy = distribute_tensor(x, mesh, [p]), distribute_tensor(y, mesh, [p])
        for f in calls:
            with _no_comm() as comm:
                out = f(dx, dy)
            assert comm.get_total_counts() == 0, (p, comm.get_comm_counts())
            assert out.placements == (p,), (p, out.placements)
            _assert_close(out, f(x, y))


# op: axpby
@check
def elementwise_mixed_placements(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import scale_lib

    x, y = _data(4, 6, device=device), _data(4, 6, seed=1, device=device)
    # A replicated y is sliced to x's shards locally: no communication.
    dx, dy = distribute_tensor(x, mesh, [Shard(1)]), distribute_tensor(y, mesh, [Replicate()])
    with _no_comm() as comm:
        a = scale_lib.axpby(dx, dy, 1.0, 2.0)
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    assert a.placements == (Shard(1),), a.placements
    _assert_close(a, scale_lib.axpby(x, y, 1.0, 2.0))


# /op: axpby
@check
def linear_ops_keep_partial(mesh: Any, device: Any) -> None:
    import torch
    from torch.distributed.tensor import DTensor, Partial

    import scale_lib

    rank = mesh.get_local_rank()
    xs = [_data(3, 5, seed=10 + r, device=device) for r in range(2)]
    ys = [_data(3, 5, seed=20 + r, device=device) for r in range(2)]
    calls = [lambda a, b: scale_lib.scale(a, -2.0)]  # every linear op, of (x, y)
    # op: axpby
    calls.append(lambda a, b: scale_lib.axpby(a, b, 0.5, 3.0))
    # /op: axpby
    for reduce_op in ("sum", "avg"):
        dx = DTensor.from_local(xs[rank], mesh, [Partial(reduce_op)])
        dy = DTensor.from_local(ys[rank], mesh, [Partial(reduce_op)])
        reduce = torch.add if reduce_op == "sum" else (lambda u, v: (u + v) / 2)
        x, y = reduce(*xs), reduce(*ys)
        for f in calls:
            with _no_comm() as comm:
                out = f(dx, dy)
            assert comm.get_total_counts() == 0, comm.get_comm_counts()
            assert out.placements == (Partial(reduce_op),), out.placements
            _assert_close(out, f(x, y))


# op: rms_norm
@check
def nonlinear_ops_reduce_partial_first(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import DTensor, Partial

    import scale_lib

    rank = mesh.get_local_rank()
    xs = [_data(3, 5, seed=30 + r, device=device) for r in range(2)]
    dx = DTensor.from_local(xs[rank], mesh, [Partial()])
    r = scale_lib.rms_norm(dx)
    # DTensor reduces the partial values first (all-reduce, or reduce-scatter to rows).
    assert not isinstance(r.placements[0], Partial), r.placements
    _assert_close(r, scale_lib.rms_norm(xs[0] + xs[1]))


# /op: rms_norm
@check
def out_variants_write_the_callers_tensor(mesh: Any, device: Any) -> None:
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import scale_lib

    x = _data(4, 6, 8, device=device)
    dx = distribute_tensor(x, mesh, [Shard(0)])
    # op: rms_norm
    w = _data(8, seed=1, device=device)
    dw = distribute_tensor(w, mesh, [Replicate()])
    # /op: rms_norm
    for p in (Shard(0), Replicate()):  # out sharded like x, or whole (x is gathered)
        out = distribute_tensor(torch.zeros_like(x), mesh, [p])
        assert scale_lib.scale(dx, 2.0, out=out) is out
        _assert_close(out, x * 2)
        # op: rms_norm
        scale_lib.rms_norm(dx, dw, out=out)
        assert out.placements == (p,)
        _assert_close(out, scale_lib.rms_norm(x, w))
        # /op: rms_norm
    # op: rms_norm
    # rms_norm cannot write an out split along the normalised dimension.
    out = distribute_tensor(torch.zeros_like(x), mesh, [Shard(2)])
    with pytest.raises(Exception, match="rms_norm_out"):
        scale_lib.rms_norm(dx, dw, out=out)
    # /op: rms_norm


# op: rms_norm
@check
def rms_norm_keeps_row_shards(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import scale_lib

    x, w = _data(4, 6, 8, device=device), _data(8, seed=1, device=device)
    dw = distribute_tensor(w, mesh, [Replicate()])
    for p in (Shard(0), Shard(1)):
        dx = distribute_tensor(x, mesh, [p])
        with _no_comm() as comm:
            r = scale_lib.rms_norm(dx, dw, 1e-5)
            r_plain = scale_lib.rms_norm(dx)
        assert comm.get_total_counts() == 0, (p, comm.get_comm_counts())
        assert r.placements == (p,) and r_plain.placements == (p,)
        _assert_close(r, scale_lib.rms_norm(x, w, 1e-5))
        _assert_close(r_plain, scale_lib.rms_norm(x))


@check
def rms_norm_gathers_the_normalised_dim(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    import scale_lib

    x, w = _data(4, 6, 8, device=device), _data(8, seed=1, device=device)
    dx, dw = distribute_tensor(x, mesh, [Shard(2)]), distribute_tensor(w, mesh, [Shard(0)])
    r = scale_lib.rms_norm(dx, dw)
    assert r.placements != (Shard(2),), r.placements
    _assert_close(r, scale_lib.rms_norm(x, w))


@check
def rms_norm_autograd(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    import scale_lib

    x, w, g = (
        _data(4, 6, 8, device=device),
        _data(8, seed=1, device=device),
        _data(4, 6, 8, seed=2, device=device),
    )
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    scale_lib.rms_norm(xr, wr).backward(g)
    dx = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
    dw = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
    out, dg = scale_lib.rms_norm(dx, dw), distribute_tensor(g, mesh, [Shard(1)])
    with _no_comm() as comm:
        out.backward(dg)
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    # The weight gradient is a sum over rows: partial sums on each rank.
    assert dx.grad.placements == (Shard(1),) and dw.grad.placements == (Partial("sum"),)
    _assert_close(dx.grad, xr.grad)
    _assert_close(dw.grad, wr.grad)


@check
def rms_norm_backward_ops(mesh: Any, device: Any) -> None:
    import torch
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    ops = torch.ops.scale_lib
    x, w, g = _data(6, 8, device=device), _data(8, seed=1, device=device), _data(6, 8, seed=2, device=device)
    rstd = ops.rms_norm_rstd(x, 1e-6)
    dx, dg = distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(g, mesh, [Shard(0)])
    dw = distribute_tensor(w, mesh, [Replicate()])
    d_rstd = ops.rms_norm_rstd(dx, 1e-6)
    assert d_rstd.placements == (Shard(0),)
    _assert_close(d_rstd, rstd)
    back = ops.rms_norm_backward(dg, dx, dw, d_rstd)
    assert back.placements == (Shard(0),)
    _assert_close(back, ops.rms_norm_backward(g, x, w, rstd))
    wg = ops.rms_norm_weight_grad(dg, dx, d_rstd)
    assert wg.placements == (Partial("sum"),)
    _assert_close(wg, ops.rms_norm_weight_grad(g, x, rstd))


# /op: rms_norm
# op: l2_norm
@check
def l2_norm_partial_norms(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    import scale_lib

    for dtype in ("float32", "float64"):
        x = _data(6, 10, dtype=dtype, device=device)
        expected = scale_lib.l2_norm(x)
        for p in (Shard(0), Shard(1)):
            dx = distribute_tensor(x, mesh, [p])
            with _no_comm() as comm:
                n = scale_lib.l2_norm(dx)
            assert comm.get_total_counts() == 0, comm.get_comm_counts()
            # Each rank holds its shard's norm; DTensor reduces them when the value is read.
            assert isinstance(n.placements[0], Partial), n.placements
            _assert_close(n, expected)
        n = scale_lib.l2_norm(distribute_tensor(x, mesh, [Replicate()]))
        assert n.placements == (Replicate(),)
        _assert_close(n, expected)


@check
def l2_norm_16_bit_gathers(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import scale_lib

    x = _data(6, 10, dtype="float16", device=device)
    n = scale_lib.l2_norm(distribute_tensor(x, mesh, [Shard(0)]))
    assert n.placements == (Replicate(),), n.placements
    _assert_close(n, scale_lib.l2_norm(x))


@check
def l2_norm_autograd(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    import scale_lib

    x = _data(6, 10, device=device)
    xr = x.clone().requires_grad_()
    scale_lib.l2_norm(xr).backward()
    dx = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
    scale_lib.l2_norm(dx).full_tensor().backward()
    assert dx.grad.placements == (Shard(0),), dx.grad.placements
    _assert_close(dx.grad, xr.grad)


# /op: l2_norm
@check
def elementwise_autograd(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    import scale_lib

    x, g = _data(4, 6, device=device), _data(4, 6, seed=2, device=device)
    xr = x.clone().requires_grad_()
    scale_lib.scale(xr, 0.5).backward(g)
    dx = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
    out = scale_lib.scale(dx, 0.5)
    dg = distribute_tensor(g, mesh, [Shard(1)])
    with _no_comm() as comm:
        out.backward(dg)
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    assert dx.grad.placements == (Shard(1),)
    _assert_close(dx.grad, xr.grad)


# op: axpby
@check
def scale_and_axpby_autograd(mesh: Any, device: Any) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    import scale_lib

    x, y, g = (_data(4, 6, seed=s, device=device) for s in range(3))
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    scale_lib.scale(scale_lib.axpby(xr, yr, 2.0, 3.0), 0.5).backward(g)
    dx = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
    dy = distribute_tensor(y, mesh, [Shard(1)]).requires_grad_()
    out = scale_lib.scale(scale_lib.axpby(dx, dy, 2.0, 3.0), 0.5)
    dg = distribute_tensor(g, mesh, [Shard(1)])
    with _no_comm() as comm:
        out.backward(dg)
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    assert dx.grad.placements == dy.grad.placements == (Shard(1),)
    _assert_close(dx.grad, xr.grad)
    _assert_close(dy.grad, yr.grad)


# /op: axpby
# op: flatnonzero
@check
def flatnonzero_refuses_dtensor(mesh: Any, device: Any) -> None:
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    import scale_lib

    dx = distribute_tensor(_data(4, 6, device=device), mesh, [Shard(0)])
    with pytest.raises(ValueError, match=r"flatnonzero does not accept DTensor.*full_tensor\(\)"):
        scale_lib.flatnonzero(dx)
    with pytest.raises(RuntimeError, match="flatnonzero"):  # DTensor's shape propagation
        torch.ops.scale_lib.flatnonzero(dx)
    local = scale_lib.flatnonzero(dx.full_tensor())
    torch.testing.assert_close(local, torch.nonzero(dx.full_tensor().reshape(-1)).reshape(-1))


# /op: flatnonzero
# op: rms_norm, axpby
# The example block (examples/distributed_block.py), trained under FSDP2 and under tensor +
# sequence parallelism, against the same model trained on one process.
def _example() -> Any:
    examples = str(Path(__file__).resolve().parent.parent / "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    return importlib.import_module("distributed_block")


@check
def block_fsdp2(mesh: Any, device: Any) -> None:
    example = _example()
    data = example.make_data(3, device)
    result = example.compare(example.train_reference(data, device, 0.1), example.train_fsdp(data, mesh, 0.1))
    assert result["ok"], result


@check
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


# /op: rms_norm, axpby
# ---------------------------------------------------------------------------------------------
# The two processes
# ---------------------------------------------------------------------------------------------
# Checks an op declares with its own tests (tests/test_<op>.py: SHARDED_TORCH_CHECKS, functions
# of (mesh, device) using the helpers above), so that they go with the op when a library drops it.
for _op in public_op_names():
    for _f in getattr(importlib.import_module(f"test_{_op}"), "SHARDED_TORCH_CHECKS", ()):
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
    assert results[name] == "ok", results[name]


if __name__ == "__main__":
    _main()
