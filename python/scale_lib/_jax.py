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

The XLA call itself, with the partitioning rule of the op's declared ``sharding`` kind (so that
``jax.jit`` over sharded arrays keeps them sharded) and its batching rule (``jax.vmap``), is
``_jax_xla``'s.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

from ._adapter import Adapter, Arrays, Attrs
from ._bound_op import BoundOp
from ._jax_autodiff import differentiable
from ._jax_eager import call_directly
from ._jax_xla import COMPILED_KEPT, check_partitionable, partitioned, target
from ._lib import WITH_CUDA, version_key
from ._spec import Input

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
    array_name = "jax.Array"
    reads_other_frameworks = False  # every input of a JAX call is a JAX array (call)

    def __init__(self) -> None:
        self._ops: list[BoundOp] = []
        self._registered = False
        self._lock = threading.Lock()

    def array_type(self) -> type | None:
        jax = sys.modules.get("jax")
        return None if jax is None else jax.Array

    def register(self, op: BoundOp) -> None:
        # The XLA targets are registered when JAX is first used (importing jax-tvm-ffi is slow).
        check_partitionable(op)  # _jax_xla: the rules of the declared sharding kinds
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
                if target(op) in done or op.spec.output.allocated_by_library:
                    continue
                arg_spec = ["rets", "args", *(f"attrs.{a.name}" for a in op.spec.attrs)]
                # A CUDA-only op has no CPU target: its CPU refusal is raised at trace time.
                for platform in ("cpu", "gpu") if "cpu" in op.spec.devices else ("gpu",):
                    jax_tvm_ffi.register_ffi_target(
                        target(op),
                        op.fn,
                        arg_spec,
                        platform=platform,
                        allow_cuda_graph=op.spec.jax.cuda_graph_safe,
                        use_last_output_for_alloc_workspace=op.workspace_bytes is not None,
                    )
                done.add(target(op))
            self._registered = True

    def run(
        self, op: BoundOp, inputs: Arrays, attrs: Attrs, out: Any, out_adapter: Adapter | None = None
    ) -> Any:
        # JAX arrays are immutable: every call goes through XLA (call), and out= is refused.
        if out is not None:  # another framework's own refusal first (torch's requires_grad)
            self.checked_out(op, inputs[0], out)
        inputs, out = self.native(op, inputs, out)
        return self.call(op, inputs, op.convert_attrs(attrs), out)

    def check_out(self, out: Any, arg_name: str) -> None:
        raise TypeError(
            f"{arg_name} is a JAX array; JAX arrays are immutable and cannot be written. "
            "Omit out= and use the returned array"
        )

    def check_foreign(self, a: Any, arg_name: str, runner: Adapter) -> None:
        if _is_tracer(a):
            raise TypeError(
                f"{arg_name} is a traced JAX value (under jax.jit, vmap, grad, ...), but this call "
                f"runs on {runner.array_name} (its first input's framework), which cannot read it: "
                "pass the first input as a JAX array"
            )
        _check_not_deleted(a, arg_name)

    def call(self, op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...], out: Any) -> Any:
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
        try:
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
        except RuntimeError:  # JAX's own refusal (a deleted array): name the argument
            for spec, t in zip(op.spec.inputs, inputs, strict=True):
                if t is not None:
                    _check_not_deleted(t, spec.name)
            raise

    def adopt(self, result: Any) -> Any:
        return sys.modules["jax"].numpy.from_dlpack(result)


ADAPTER = JaxAdapter()


def _has_jax_tvm_ffi() -> bool:
    import importlib.util

    return importlib.util.find_spec("jax_tvm_ffi") is not None


def _call_eagerly(op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
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


def _is_tracer(x: Any) -> bool:
    return isinstance(x, sys.modules["jax"].core.Tracer)


def _check_not_deleted(t: Any, arg_name: str) -> None:
    if not _is_tracer(t) and t.is_deleted():
        raise ValueError(f"{arg_name} is a deleted JAX array (its buffer was freed); pass a live array")


def _check_platform(op: BoundOp, x: Any) -> None:
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


def _ffi_call(op: BoundOp, inputs: tuple[Any, ...], attrs: tuple[Any, ...]) -> Any:
    x = inputs[0]
    if op.cuda_only:
        x = _cuda_only().bind(x, op_name=op.name, arg_name=op.input_names[0])
        inputs = (x, *inputs[1:])
    present = tuple(
        _stand_in(op, spec, x) if t is None else t for spec, t in zip(op.spec.inputs, inputs, strict=True)
    )
    return partitioned(op, attrs)(*present)  # _jax_xla: with its partitioning and batching rules


def _stand_in(op: BoundOp, spec: Input, x: Any) -> Any:
    if spec.jax_stand_in is None:
        raise TypeError(
            f"{op.name}: {spec.name} cannot be None with JAX arrays (the op declares no jax_stand_in)"
        )
    return spec.jax_stand_in(x)


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
# op and attribute values: the most recently used are kept (_jax_xla.COMPILED_KEPT, which also
# bounds the traced pieces under them), and the programs of the others freed.
_COMPILED_KEPT = COMPILED_KEPT


@functools.lru_cache(maxsize=_COMPILED_KEPT)
def _compiled(op: BoundOp, attrs: _StaticAttrs) -> Callable[..., Any]:
    """:func:`_differentiable` with ``attrs`` under ``jax.jit``: an eager call then runs a
    compiled program instead of tracing the op again, which took about 1 ms a call. Inside a
    traced function it is inlined. One jitted function per attribute values, so that dropping it
    from this cache frees its programs (one ``jax.jit`` with static attributes would keep them
    all)."""
    import jax

    f = _differentiable(op)
    return jax.jit(lambda *inputs: f(*inputs, attrs))


@functools.cache
def _differentiable(op: BoundOp) -> Callable[..., Any]:
    """``op`` as a JAX function of ``(*inputs, attrs)`` with its derivatives (``_jax_autodiff``)."""
    n = op.n_inputs

    def primal(*args: Any) -> Any:
        return _ffi_call(op, args[:n], args[n])

    return differentiable(op, primal)
