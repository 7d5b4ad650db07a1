# SPDX-License-Identifier: Apache-2.0
"""JAX: every op is an XLA FFI target, registered through jax-tvm-ffi.

XLA allocates the output and passes it to the library as a view, so JAX arrays are never
written in place. Targets are named ``scale_lib.<op>`` and registered once per process, for the
CPU and GPU platforms: when scale_lib is imported after JAX, or else on the first JAX call. A
CPU-only build registers the GPU target too, so that under ``jax.jit`` on a GPU the library's own
"built without CUDA support" error is what the user sees.

The library cannot report errors from inside XLA as Python exceptions, so the declared input
rules and the scalar attributes are checked here, at trace time.

Ops that need scratch memory use jax-tvm-ffi's workspace: one more XLA output that the library
receives as its allocator. Ops whose output size depends on the data cannot be XLA targets (XLA
shapes are static); they run eagerly on concrete arrays only.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

from ._adapter import Adapter
from ._lib import WITH_CUDA
from ._op import Op
from ._spec import Input

_WORKSPACE_SLACK = 256  # jax-tvm-ffi aligns each allocation in the workspace to 128 bytes


class JaxAdapter(Adapter):
    name = module = "jax"

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._registered = False
        self._lock = threading.Lock()

    def array_type(self) -> type | None:
        jax = sys.modules.get("jax")
        return None if jax is None else jax.Array

    def register(self, op: Op) -> None:
        # The XLA targets are registered when JAX is first used (importing jax-tvm-ffi is slow).
        self._ops.append(op)
        self._registered = False
        if "jax" in sys.modules:
            self.register_targets()

    def register_targets(self) -> None:
        """Register every op's XLA FFI target (idempotent, thread-safe)."""
        if self._registered:
            return
        with self._lock:
            if self._registered:
                return
            try:
                import jax_tvm_ffi
            except ImportError as err:
                raise ImportError(
                    "scale_lib needs jax-tvm-ffi to run on JAX arrays: pip install 'scale-lib[jax]'"
                ) from err
            # jax-tvm-ffi keeps every registration for the life of the process (1024 at most), so
            # the names already registered are recorded on it: a re-executed copy of this module
            # (importlib.reload, a fresh import after sys.modules was cleared) registers nothing.
            done: set[str] = jax_tvm_ffi.__dict__.setdefault("_scale_lib_registered_targets", set())
            for op in self._ops:
                if _target(op) in done or op.spec.output.allocated_by_library:
                    continue
                arg_spec = ["rets", "args", *(f"attrs.{a.name}" for a in op.spec.attrs)]
                # A CUDA-only op has no CPU target: its CPU refusal is raised at trace time.
                for platform in ("cpu", "gpu") if "cpu" in op.spec.devices else ("gpu",):
                    jax_tvm_ffi.register_ffi_target(
                        _target(op),
                        op.fn,
                        arg_spec,
                        platform=platform,
                        allow_cuda_graph=op.spec.jax.cuda_graph_safe,
                        use_last_output_for_alloc_workspace=op.workspace_bytes is not None,
                    )
                done.add(_target(op))
            self._registered = True

    def takes_call(self, op: Op, inputs: tuple[Any, ...]) -> bool:
        return True  # JAX arrays are immutable: every call goes through XLA

    def check_out(self, out: Any, arg_name: str) -> None:
        raise TypeError(
            f"{arg_name} is a JAX array; JAX arrays are immutable and cannot be written. "
            "Omit out= and use the returned array"
        )

    def call(self, op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
        """Run ``op`` on JAX arrays through XLA; the library's checks, raised in Python."""
        if out is not None:
            if op.spec.output.allocated_by_library:
                raise TypeError(f"{op.name} has no out=: the size of its result depends on the data")
            raise TypeError(
                "out= is not supported when x is a JAX array: JAX arrays are immutable. "
                "Omit out= and use the returned array"
            )
        jax = sys.modules["jax"]
        for spec, t in zip(op.spec.inputs, inputs, strict=True):
            if t is not None and not isinstance(t, jax.Array):
                raise TypeError(f"{spec.name} must be a JAX array like x; got {type(t).__name__}")
        op.check_abstract(inputs)
        _check_platform(op, inputs[0])
        if op.spec.output.allocated_by_library:
            return _call_eagerly(op, inputs, attrs)
        self.register_targets()
        return _differentiable(op)(*inputs, attrs)

    def adopt(self, result: Any) -> Any:
        return sys.modules["jax"].numpy.from_dlpack(result)


ADAPTER = JaxAdapter()


def _target(op: Op) -> str:
    return f"scale_lib.{op.name}"


def _call_eagerly(op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
    if any(t is not None and _is_tracer(t) for t in inputs):
        raise TypeError(
            f"{op.name} cannot be traced by JAX (jax.jit, vmap, grad): the size of its result "
            "depends on the data, and XLA shapes are static. Call it on concrete arrays"
        )
    # Inputs are only read, so passing JAX's buffers to the library through DLPack is safe.
    return ADAPTER.adopt(op.fn(*inputs, *attrs))


def _attribute(value: Any) -> Any:
    # XLA attributes are typed: pass Python scalars with the width the C++ signature expects.
    import numpy as np

    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value)
    return np.float64(value)


def _is_tracer(x: Any) -> bool:
    return isinstance(x, sys.modules["jax"].core.Tracer)


def _platform(x: Any) -> str:
    """Where ``x`` is, or for a tracer where the traced computation will run: the devices of its
    sharding where the trace knows them, else JAX's default backend."""
    jax = sys.modules["jax"]
    if not _is_tracer(x):
        return str(next(iter(x.devices())).platform)
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if isinstance(mesh, jax.sharding.Mesh) and mesh.devices.size:  # not an AbstractMesh
        return str(mesh.devices.flat[0].platform)
    return str(jax.default_backend())


def _check_platform(op: Op, x: Any) -> None:
    if _is_tracer(x) and not op.cuda_only:
        return  # placement is decided at lowering time; XLA picks the target by platform
    platform = _platform(x)
    if platform == "cpu" and op.cuda_only:
        where = "traced for the CPU" if _is_tracer(x) else "on the CPU"
        raise ValueError(
            f"x is a JAX array {where}, but {op.name} has only a CUDA implementation; pass a GPU array"
        )
    if platform in ("gpu", "cuda") and not WITH_CUDA:
        raise ValueError(
            "x is a JAX array on the GPU, but scale_lib was built without CUDA support. "
            "Rebuild with the CUDA toolkit (nvcc) installed, or pass a CPU array"
        )
    if platform not in ("cpu", "gpu", "cuda"):
        raise ValueError(
            f"x is a JAX array on unsupported platform {platform!r}; scale_lib supports cpu and gpu"
        )


def _ffi_call(op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
    x = inputs[0]
    present = tuple(
        _stand_in(op, spec, x) if t is None else t for spec, t in zip(op.spec.inputs, inputs, strict=True)
    )
    if op.workspace_bytes is not None:
        return _workspace_op(op, attrs, ())(*present)
    return _xla_call(op, present, attrs, ())


def _stand_in(op: Op, spec: Input, x: Any) -> Any:
    if spec.jax_stand_in is None:
        raise TypeError(
            f"{op.name}: {spec.name} cannot be None with JAX arrays (the op declares no jax_stand_in)"
        )
    return spec.jax_stand_in(x)


def _xla_call(op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], batch: tuple[int, ...]) -> Any:
    """One XLA FFI call; ``batch``: leading dimensions of every input that the op's output keeps
    (from the workspace ops' batching rule)."""
    import jax
    import numpy as np

    example = [jax.ShapeDtypeStruct(t.shape[len(batch) :], t.dtype) for t in inputs]
    like = example[op.like_index]
    shape = batch + (like.shape if op.spec.output.shape is None else tuple(op.spec.output.shape(*example)))
    dtype = like.dtype if op.spec.output.dtype is None else op.spec.output.dtype
    results = [jax.ShapeDtypeStruct(shape, dtype)]
    if op.workspace_bytes is not None:
        numel, groups = int(np.prod(inputs[0].shape, dtype=np.int64)), int(np.prod(shape, dtype=np.int64))
        nbytes = op.workspace_bytes(numel, max(groups, 1)) + _WORKSPACE_SLACK
        results.append(jax.ShapeDtypeStruct((nbytes,), np.uint8))
    kwargs = {attr.name: _attribute(value) for attr, value in zip(op.spec.attrs, attrs, strict=True)}
    # Under jax.vmap the kernel sees the batched arrays, which every op handles as more leading
    # dimensions: a batching rule, not a loop over the batch.
    call = jax.ffi.ffi_call(_target(op), results, vmap_method=op.spec.jax.vmap_method)
    return call(*inputs, **kwargs)[0]


@functools.cache
def _workspace_op(op: Op, attrs: tuple[Any, ...], batch: tuple[int, ...]) -> Callable[..., Any]:
    """An op with a workspace, batched by its own rule.

    jax-tvm-ffi takes the workspace's size from its first dimension, so vmap must not batch the
    workspace output as it does every other output. The rule instead folds the batch into the
    op's leading dimensions: one call, one 1-D workspace for the whole batch.
    """
    import jax

    @jax.custom_batching.custom_vmap
    def f(*inputs: Any) -> Any:
        return _xla_call(op, inputs, attrs, batch)

    @f.def_vmap
    def rule(axis_size: int, in_batched: list[bool], *inputs: Any) -> tuple[Any, bool]:
        inputs = tuple(
            t if batched else jax.numpy.broadcast_to(t, (axis_size, *t.shape))
            for t, batched in zip(inputs, in_batched, strict=True)
        )
        return _workspace_op(op, attrs, (axis_size, *batch))(*inputs), True

    return f


@functools.cache
def _differentiable(op: Op) -> Callable[..., Any]:
    """``op`` as a JAX function of ``(*inputs, attrs)``, with a custom VJP where it has one."""
    n = op.n_inputs

    def primal(*args: Any) -> Any:
        return _ffi_call(op, args[:n], args[n])

    vjp = op.spec.vjp
    if vjp is None:
        return primal
    import jax

    f = jax.custom_vjp(primal, nondiff_argnums=(n,))

    def forward(*args: Any) -> tuple[Any, tuple[Any, ...]]:
        out = primal(*args)
        return out, (args[:n], out)

    def backward(attrs: tuple[Any, ...], residuals: tuple[Any, ...], grad: Any) -> tuple[Any, ...]:
        inputs, out = residuals
        return tuple(vjp(grad, out, *inputs, *attrs))

    f.defvjp(forward, backward)
    return f
