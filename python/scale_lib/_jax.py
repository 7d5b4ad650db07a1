# SPDX-License-Identifier: Apache-2.0
"""JAX: every op is an XLA FFI target, registered through jax-tvm-ffi.

XLA allocates the output and passes it to the library as a view, so JAX arrays are never
written in place. Targets are named ``scale_lib.<op>`` and registered once per process, for the
CPU and GPU platforms: when scale_lib is imported after JAX, or else on the first JAX call. A
CPU-only build registers the GPU target too, so that under ``jax.jit`` on a GPU the library's own
"built without CUDA support" error is what the user sees. With a JAX or jax-tvm-ffi older than
the supported floor nothing is registered (XLA would reject the handlers and fail every JAX
computation in the process), and every call on a JAX array raises ``RuntimeError`` instead.

The library cannot report errors from inside XLA as Python exceptions, so the declared input
rules and the scalar attributes are checked here, at trace time.

Ops that need scratch memory use jax-tvm-ffi's workspace: one more XLA output that the library
receives as its allocator. Ops whose output size depends on the data cannot be XLA targets (XLA
shapes are static); they run eagerly on concrete arrays only.

Eager calls on the CPU do not need XLA and do not take it: ``_jax_eager`` calls the library
directly, so that a new value of a scalar attribute compiles nothing. Every op's derivatives
(forward mode from its declared jvp, reverse mode from its declared vjp) are ``_jax_autodiff``'s.

The last section gives every XLA call the partitioning rule of its declared ``sharding`` kind,
so that ``jax.jit`` over sharded arrays keeps them sharded, and its batching rule (``jax.vmap``).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ._adapter import Adapter
from ._jax_autodiff import differentiable
from ._jax_eager import call_directly
from ._lib import WITH_CUDA, version_key
from ._op import Op, sharding_of
from ._spec import Input

_WORKSPACE_SLACK = 256  # jax-tvm-ffi aligns each allocation in the workspace to 128 bytes

# [jax_versions.begin]
# The oldest JAX and jax-tvm-ffi this package works with: the floors of pyproject.toml's `jax`
# extra, which `nox -s tests_lowest` installs. jax-tvm-ffi 0.1.3 accepts JAX 0.7.2 and newer, but
# before JAX 0.9.1 XLA rejects the handlers it registers (their XLA FFI API version is newer than
# XLA's), and that failure breaks every JAX computation in the process, not only scale_lib's.
JAX_LOWEST = "0.9.1"
JAX_TVM_FFI_LOWEST = "0.1.3"
# [jax_versions.end]


def unsupported_versions(jax_version: str, jax_tvm_ffi_version: str | None) -> str | None:
    """Why scale_lib cannot run on this JAX and jax-tvm-ffi (``None``: it can; a missing
    jax-tvm-ffi, ``None`` here, is reported when it is imported)."""
    too_old = [
        (name, found, lowest)
        for name, found, lowest in (
            ("jax", jax_version, JAX_LOWEST),
            ("jax-tvm-ffi", jax_tvm_ffi_version, JAX_TVM_FFI_LOWEST),
        )
        if found is not None and version_key(found) < version_key(lowest)
    ]
    if not too_old:
        return None
    found = ", ".join(f"{name} {version}" for name, version, _ in too_old)
    needed = " ".join(f"'{name}>={lowest}'" for name, _, lowest in too_old)
    return (
        f"scale_lib needs jax>={JAX_LOWEST} and jax-tvm-ffi>={JAX_TVM_FFI_LOWEST} to run on JAX "
        f"arrays, but {found} is installed. With older releases XLA rejects the FFI handlers that "
        "jax-tvm-ffi registers, which would break every JAX computation in the process, so scale_lib "
        f"registered none and its ops refuse JAX arrays. Upgrade: pip install {needed}"
    )


@functools.cache
def _version_problem() -> str | None:
    """:func:`unsupported_versions` for the installed JAX and jax-tvm-ffi, read once."""
    from importlib import metadata

    try:
        jax_tvm_ffi_version: str | None = metadata.version("jax-tvm-ffi")
    except metadata.PackageNotFoundError:
        jax_tvm_ffi_version = None
    return unsupported_versions(str(sys.modules["jax"].__version__), jax_tvm_ffi_version)


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
        _check_partitionable(op)  # see "jax.jit over sharded arrays" below
        self._ops.append(op)
        self._registered = False
        # Registered now only where it cannot fail: otherwise the first call raises the reason.
        if "jax" in sys.modules and _version_problem() is None and _has_jax_tvm_ffi():
            self.register_targets()

    def register_targets(self) -> None:
        """Register every op's XLA FFI target (idempotent, thread-safe)."""
        if self._registered:
            return
        with self._lock:
            if self._registered:
                return
            problem = _version_problem()
            if problem is not None:
                raise RuntimeError(problem)
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
        problem = _version_problem()
        if problem is not None:
            raise RuntimeError(problem)
        if out is not None:
            op.check_out_allowed()
            raise TypeError(
                f"out= is not supported when {op.input_names[0]} is a JAX array: JAX arrays are "
                "immutable. Omit out= and use the returned array"
            )
        jax = sys.modules["jax"]
        for spec, t in zip(op.spec.inputs, inputs, strict=True):
            if t is not None and not isinstance(t, jax.Array):
                raise TypeError(
                    f"{spec.name} must be a JAX array like {op.input_names[0]}; got {type(t).__name__}"
                )
        if not op.spec.output.allocated_by_library:
            self.register_targets()
            result = call_directly(op, inputs, attrs)  # eager CPU calls: see _jax_eager
            if result is not None:
                return result
        op.check_abstract(inputs)
        _check_platform(op, inputs[0])
        if op.spec.output.allocated_by_library:
            return _call_eagerly(op, inputs, attrs)
        return _compiled(op, _StaticAttrs(attrs))(*inputs)

    def adopt(self, result: Any) -> Any:
        return sys.modules["jax"].numpy.from_dlpack(result)


ADAPTER = JaxAdapter()


def _has_jax_tvm_ffi() -> bool:
    import importlib.util

    return importlib.util.find_spec("jax_tvm_ffi") is not None


def _target(op: Op) -> str:
    return f"scale_lib.{op.name}"


def _call_eagerly(op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
    if any(t is not None and _is_tracer(t) for t in inputs):
        raise TypeError(
            f"{op.name} cannot be traced by JAX (jax.jit, vmap, grad): the size of its result "
            "depends on the data, and XLA shapes are static. Call it on concrete arrays"
        )
    # Inputs are only read, so passing JAX's buffers to the library through DLPack is safe. A
    # DLPack tensor lives on one device: arrays spread over several are gathered to the first.
    inputs = tuple(
        None if t is None else _on_one_device(t, spec.name)
        for spec, t in zip(op.spec.inputs, inputs, strict=True)
    )
    return ADAPTER.adopt(op.fn(*inputs, *attrs))


def _on_one_device(t: Any, arg_name: str) -> Any:
    devices = t.devices()
    if len(devices) == 1:
        return t
    if not t.is_fully_addressable:
        raise ValueError(
            f"{arg_name} is a JAX array spread over processes; this op needs it whole on one "
            "device of this process (jax.experimental.multihost_utils.process_allgather)"
        )
    return sys.modules["jax"].device_put(t, min(devices, key=lambda d: d.id))


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


def _check_platform(op: Op, x: Any) -> None:
    """The library's refusals for where a concrete array is. A tracer's placement is known only
    when XLA lowers the traced program for a platform: there XLA picks the target by platform,
    and a CUDA-only op's CPU refusal is raised by its lowering (:func:`_cuda_only`)."""
    if _is_tracer(x):
        return
    platform = str(next(iter(x.devices())).platform)
    name = op.input_names[0]
    if platform == "cpu" and op.cuda_only:
        raise ValueError(
            f"{name} is a JAX array on the CPU, but {op.name} has only a CUDA implementation; "
            "pass a GPU array"
        )
    if platform in ("gpu", "cuda") and not WITH_CUDA:
        raise ValueError(
            f"{name} is a JAX array on the GPU, but scale_lib was built without CUDA support. "
            "Rebuild with the CUDA toolkit (nvcc) installed, or pass a CPU array"
        )
    if platform not in ("cpu", "gpu", "cuda"):
        raise ValueError(
            f"{name} is a JAX array on unsupported platform {platform!r}; scale_lib supports cpu and gpu"
        )


@functools.cache
def _cuda_only() -> Any:
    """An identity on ``x`` whose CPU lowering raises the library's ValueError: a CUDA-only op
    has no CPU target, and without this XLA would fail only when compiling, with an error about
    a missing FFI handler. The platform is known only at lowering (``jax.jit`` of a committed CPU
    array on a GPU machine, ``jax.export`` for another platform), so the check is made there."""
    from jax.extend.core import Primitive
    from jax.interpreters import batching, mlir

    guard = Primitive("scale_lib_cuda_only")
    guard.def_impl(lambda x, **params: x)  # eager calls are checked before (_check_platform)
    guard.def_abstract_eval(lambda x, **params: x)

    def refuse_cpu(ctx: Any, x: Any, *, op_name: str, arg_name: str) -> Any:
        raise ValueError(
            f"{arg_name} is a JAX array placed on the CPU, but {op_name} has only a CUDA "
            "implementation; pass a GPU array"
        )

    mlir.register_lowering(guard, lambda ctx, x, **params: [x])
    mlir.register_lowering(guard, refuse_cpu, platform="cpu")
    batching.primitive_batchers[guard] = lambda args, dims, **params: (guard.bind(*args, **params), dims[0])
    return guard


def _ffi_call(op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
    x = inputs[0]
    if op.cuda_only:
        x = _cuda_only().bind(x, op_name=op.name, arg_name=op.input_names[0])
        inputs = (x, *inputs[1:])
    present = tuple(
        _stand_in(op, spec, x) if t is None else t for spec, t in zip(op.spec.inputs, inputs, strict=True)
    )
    return _partitioned(op, attrs)(*present)  # see "jax.jit over sharded arrays" below


def _stand_in(op: Op, spec: Input, x: Any) -> Any:
    if spec.jax_stand_in is None:
        raise TypeError(
            f"{op.name}: {spec.name} cannot be None with JAX arrays (the op declares no jax_stand_in)"
        )
    return spec.jax_stand_in(x)


def _xla_call(op: Op, inputs: tuple[Any, ...], attrs: tuple[Any, ...], batch: tuple[int, ...]) -> Any:
    """One XLA FFI call; ``batch``: leading dimensions of every input that the op's output keeps
    (from the batching rule of ``_batchable``)."""
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


class _StaticAttrs(tuple):  # type: ignore[type-arg]
    """Scalar attributes as a ``jax.jit`` static argument: equal only when every value has the
    same type and repr, so that 0.0 and -0.0 (equal floats) do not share a compiled program."""

    def _key(self) -> tuple[tuple[type, str], ...]:
        return tuple((type(v), repr(v)) for v in self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _StaticAttrs) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


# Eager calls that XLA runs (GPU arrays, arrays over several devices) compile one program per
# op and attribute values: the most recently used are kept, and the programs of the others freed.
_COMPILED_KEPT = 64


@functools.lru_cache(maxsize=_COMPILED_KEPT)
def _compiled(op: Op, attrs: _StaticAttrs) -> Callable[..., Any]:
    """:func:`_differentiable` with ``attrs`` under ``jax.jit``: an eager call then runs a
    compiled program instead of tracing the op again, which took about 1 ms a call. Inside a
    traced function it is inlined. One jitted function per attribute values, so that dropping it
    from this cache frees its programs (one ``jax.jit`` with static attributes would keep them
    all)."""
    import jax

    f = _differentiable(op)
    return jax.jit(lambda *inputs: f(*inputs, attrs))


@functools.cache
def _differentiable(op: Op) -> Callable[..., Any]:
    """``op`` as a JAX function of ``(*inputs, attrs)`` with its derivatives (``_jax_autodiff``)."""
    n = op.n_inputs

    def primal(*args: Any) -> Any:
        return _ffi_call(op, args[:n], args[n])

    return differentiable(op, primal)


# =============================================================================================
# jax.jit over sharded arrays: partitioning and batching rules for every XLA call
# =============================================================================================
# XLA cannot see into an FFI call: without a rule it replicates the inputs (an all-gather) and
# the output. Each op's XLA call is wrapped in jax.experimental.custom_partitioning with a
# Shardy sharding rule derived from its declared sharding kind, and in
# jax.custom_batching.custom_vmap (custom_partitioning has no batching rule of its own; vmap
# adds a leading batch dimension, sharded like any other batch dimension). Kinds:
#
# "elementwise"  Inputs and output share a shape: every dimension may be sharded, the output
#                like the inputs.
# "rows"         The last dimension of the first input x stays whole (a sharded one is
#                gathered); every leading dimension is a batch of rows and may be sharded.
#                Per-feature inputs (Sharding.per_feature: a weight) have the shape of the last
#                dimension; every other input, and the output, has x's leading dimensions and
#                x's last dimension or one of its own (Sharding.own_last), whole. An output that
#                drops a leading dimension is a sum over it: each device sums its rows and the
#                partial sums are added (psum).
# "reduction"    One value from the whole array (a norm): each device reduces its shard and
#                the local norms are combined (sqrt(psum(norm**2))). 16-bit inputs are gathered
#                first: their squared norms overflow easily.
# None           No rule: the call runs as it is (ops whose output size depends on the data
#                never reach XLA).
#
# Ops with a workspace are batched by broadcasting: jax-tvm-ffi takes the workspace's size from
# its first dimension, so vmap must not batch the workspace output as ffi_call would; the batch
# is folded into the op's leading dimensions instead (one call, one 1-D workspace). Under
# shard_map and on one device the op is called directly. Collectives come from XLA (resharding
# to the rule) and jax.lax.psum; the library itself never communicates.
_VMAP_METHODS = ("broadcast_all", "expand_dims")


def _check_partitionable(op: Op) -> None:
    """The declaration's sharding and vmap method are ones the rules below handle."""
    sharding_of(op)
    if op.spec.jax.vmap_method not in _VMAP_METHODS:
        raise ValueError(
            f"{op.name}: unsupported JaxOptions.vmap_method {op.spec.jax.vmap_method!r}; expected one "
            f"of {_VMAP_METHODS}"
        )


# The traced pieces per op and attribute values: bounded like the eager programs, so that calls
# with ever new attribute values keep memory bounded (evicted ones are traced again if used).
_TRACED_KEPT = 4 * _COMPILED_KEPT


@functools.lru_cache(maxsize=_TRACED_KEPT)
def _partitioned(op: Op, attrs: tuple[Any, ...]) -> Callable[..., Any]:
    """``op`` with ``attrs`` as a jitted JAX function of its input arrays that carries its
    partitioning rule and its batching rule."""
    import jax

    return jax.jit(_batchable(op, attrs, 0))


def _vmap_method(op: Op) -> str:
    return "broadcast_all" if op.workspace_bytes is not None else op.spec.jax.vmap_method


@functools.lru_cache(maxsize=_TRACED_KEPT)
def _batchable(op: Op, attrs: tuple[Any, ...], batch_ndim: int) -> Callable[..., Any]:
    """The op on inputs with ``batch_ndim`` leading vmap dimensions; ``jax.vmap`` of it adds
    one more. Under ``"expand_dims"`` an unbatched per-feature input (a weight) gets a batch
    dimension of size 1 (it stays one row); any other unbatched input (an incoming gradient of
    ones, say) is broadcast to the batch."""
    import jax

    per_feature = sharding_of(op).per_feature
    expand = _vmap_method(op) == "expand_dims"

    @jax.custom_batching.custom_vmap
    def f(*inputs: Any) -> Any:
        return _partition(op, attrs, batch_ndim, inputs)(*inputs)

    @f.def_vmap
    def rule(axis_size: int, in_batched: list[bool], *inputs: Any) -> tuple[Any, bool]:
        if expand and any(feature and b for feature, b in zip(per_feature, in_batched, strict=True)):
            # A per-example weight: the kernel takes one weight for all its rows, so this batch
            # runs as one call per example.
            def one(sliced: tuple[Any, ...]) -> Any:
                it = iter(sliced)
                return f(*(next(it) if b else t for t, b in zip(inputs, in_batched, strict=True)))

            mapped = tuple(t for t, b in zip(inputs, in_batched, strict=True) if b)
            return jax.lax.map(one, mapped), True

        def batched(feature: bool, t: Any) -> Any:
            if expand and feature:
                return jax.numpy.expand_dims(t, 0)
            return jax.numpy.broadcast_to(t, (axis_size, *t.shape))

        inputs = tuple(
            t if b else batched(feature, t)
            for feature, t, b in zip(per_feature, inputs, in_batched, strict=True)
        )
        return _batchable(op, attrs, batch_ndim + 1)(*inputs), True

    return f


def _batch_of(inputs: Sequence[Any], batch_ndim: int) -> tuple[int, ...]:
    return tuple(max(int(t.shape[d]) for t in inputs) for d in range(batch_ndim))


def _partition(op: Op, attrs: tuple[Any, ...], batch_ndim: int, inputs: Sequence[Any]) -> Callable[..., Any]:
    """The op's XLA call wrapped in ``custom_partitioning`` with the rule for these shapes."""
    from jax.experimental.custom_partitioning import custom_partitioning

    def local(*arrays: Any) -> Any:  # also what runs on each device, on its shards
        return _xla_call(op, arrays, attrs, _batch_of(arrays, batch_ndim))

    rule = _rule(op, batch_ndim, inputs)
    if rule is None:
        return local
    f = custom_partitioning(local)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        return rule.partition(local, mesh, arg_shapes)

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:  # GSPMD only
        return rule.partition(local, mesh, arg_shapes)[2]

    f.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=rule.einsum(),
        reduction_factors=rule.reduced,
        need_replication_factors=rule.whole,
    )
    return f


class _Rule:
    """Which factor each dimension of each input and of the output is, and which factors stay
    whole (need replication) or are summed over (reduction)."""

    def __init__(
        self,
        inputs: list[tuple[str, ...]],
        output: tuple[str, ...],
        whole: tuple[str, ...],
        reduced: tuple[str, ...],
        combine: str | None,
    ) -> None:
        self.inputs = inputs
        self.output = output
        self.whole = whole
        self.reduced = reduced
        self.combine = combine  # how partial results over reduced factors are combined

    def einsum(self) -> str:
        return ", ".join(" ".join(f) for f in self.inputs) + " -> " + " ".join(self.output)

    def partition(self, local: Callable[..., Any], mesh: Any, arg_shapes: Any) -> Any:
        from jax.sharding import NamedSharding, PartitionSpec

        axes: dict[str, Any] = {}  # factor -> mesh axis (or axes) that shard it
        used: set[str] = set()
        for factors, arg in zip(self.inputs, arg_shapes, strict=True):
            for factor, entry in zip(factors, _spec_entries(arg, len(factors)), strict=True):
                names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
                if factor in axes or factor in self.whole or not names or used & set(names):
                    continue
                axes[factor] = entry
                used |= set(names)

        def sharding(factors: tuple[str, ...]) -> Any:
            return NamedSharding(mesh, PartitionSpec(*(axes.get(f) for f in factors)))

        reduce_over = tuple(
            name
            for f in self.reduced
            if f in axes
            for name in ((axes[f],) if isinstance(axes[f], str) else axes[f])
        )
        combine = self.combine

        def lower(*arrays: Any) -> Any:
            y = local(*arrays)
            if not reduce_over:
                return y
            import jax

            if combine == "sum":
                return jax.lax.psum(y, reduce_over)
            squares = jax.numpy.square(y)  # float32/float64 only: see _rule
            return jax.numpy.sqrt(jax.lax.psum(squares, reduce_over)).astype(y.dtype)

        return mesh, lower, sharding(self.output), tuple(sharding(f) for f in self.inputs)


def _spec_entries(arg: Any, ndim: int) -> tuple[Any, ...]:
    spec = getattr(getattr(arg, "sharding", None), "spec", None)
    entries = tuple(spec) if spec is not None else ()
    return entries + (None,) * (ndim - len(entries))


def _rule(op: Op, batch_ndim: int, inputs: Sequence[Any]) -> _Rule | None:
    """The rule for ``op`` on ``inputs`` (``None``: no rule, call directly)."""
    sharding = sharding_of(op)
    if sharding.kind is None:
        return None
    x = inputs[0]
    ndim = x.ndim - batch_ndim
    size = _batch_of(inputs, batch_ndim)

    def batch_factors(t: Any, tag: str) -> tuple[str, ...]:
        # A size-1 dimension of an input unbatched under expand_dims is a factor of its own.
        return tuple(f"v{d}" if t.shape[d] == size[d] else f"{tag}_u{d}" for d in range(batch_ndim))

    batch_out = tuple(f"v{d}" for d in range(batch_ndim))
    dims = tuple(f"d{d}" for d in range(ndim))
    tags = [f"i{i}" for i in range(len(inputs))]
    if sharding.kind == "elementwise":
        ins = [batch_factors(t, tag) + dims for t, tag in zip(inputs, tags, strict=True)]
        return _Rule(ins, batch_out + dims, (), (), None)
    if ndim == 0:
        return None
    if sharding.kind == "rows":
        ins = []
        whole = dims[-1:]
        for feature, own_last, t, tag in zip(
            sharding.per_feature, sharding.own_last, inputs, tags, strict=True
        ):
            if feature:
                own = dims[-1:]
            elif own_last:  # x's leading dimensions and a last one of its own, used whole
                own = (*dims[:-1], f"{tag}_last")
                whole += own[-1:]
            else:
                own = dims[: t.ndim - batch_ndim]
            ins.append(batch_factors(t, tag) + own)
        kept = sharding.output_dims(ndim)
        if kept[:-1] == list(range(ndim - 1)) and kept[-1] is None:
            out = (*dims[:-1], "out_last")  # a last dimension of its own, whole: (..., d)
            whole += out[-1:]
        elif None in kept:
            return None  # an output dimension that is not one of x's: no rule (replicated)
        else:
            out = tuple(dims[d] for d in kept if d is not None)
        reduced = tuple(f for f in dims[:-1] if f not in out)  # rows summed over
        return _Rule(ins, batch_out + out, whole, reduced, "sum")
    # "reduction": float32/float64 reduce their shards; 16-bit inputs are gathered.
    ins = [batch_factors(x, "i0") + dims]
    if str(x.dtype) in ("float32", "float64"):
        return _Rule(ins, batch_out, (), dims, "norm")
    return _Rule(ins, batch_out, dims, (), None)
