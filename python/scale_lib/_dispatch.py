# SPDX-License-Identifier: Apache-2.0
"""The call path every op shares: ``register(spec)`` binds a declaration to the library and to
every framework, once, and returns the :class:`Dispatcher` the public function calls. A call
classifies its first array (once per type) and hands the call to that framework's adapter
(``_adapter.py``), which runs it eagerly or through the framework's own machinery.
"""

from __future__ import annotations

from typing import Any

from . import _cupy, _jax, _numpy, _paddle, _torch
from ._adapter import _BY_TYPE, Adapter, adapter_of, check_other_inputs, use_frameworks
from ._bound_op import BoundOp
from ._spec import OpSpec

# By name, not through the _torch module: code torch.compile traces reads them, and a module
# reached by two paths would cost a guard of its own on every compiled call.
from ._torch import ADAPTER as _TORCH
from ._torch import tracing as _torch_tracing

# Adding a framework: a module with an Adapter subclass, and its ADAPTER here.
ADAPTERS: tuple[Adapter, ...] = (_numpy.ADAPTER, _torch.ADAPTER, _jax.ADAPTER, _paddle.ADAPTER, _cupy.ADAPTER)
use_frameworks(ADAPTERS)

_REGISTERED: dict[str, BoundOp] = {}


class Dispatcher:
    """``op`` as the public function calls it: ``dispatcher.call(inputs, attrs, out)``, with the
    inputs and the scalar attributes each a tuple in ABI order."""

    def __init__(self, op: BoundOp) -> None:
        self.op = op

    def __repr__(self) -> str:
        return f"<dispatcher of {self.op!r}>"

    # [op_call.begin]
    def call(self, inputs: tuple[Any, ...], attrs: tuple[Any, ...] = (), out: Any = None) -> Any:
        op = self.op
        if _torch_tracing():  # torch.compile reads this code: the shortest route to its custom op
            traced = _TORCH.traced_call(op, inputs, attrs, out)
            if traced is not None:
                return traced
        x = inputs[0]
        adapter = _BY_TYPE.get(type(x)) or adapter_of(x, op.input_names[0])
        if len(inputs) > 1:
            check_other_inputs(op, inputs, adapter)
        return adapter.run(op, inputs, attrs, out)

    # [op_call.end]


def register(spec: OpSpec) -> Dispatcher:
    """Bind ``spec`` to the library and register it with every framework (PyTorch custom ops,
    JAX XLA targets). Call once per op, from its module in ``ops/``."""
    op = BoundOp(spec)
    dispatcher = Dispatcher(op)
    op.public_call = dispatcher.call
    for adapter in ADAPTERS:
        adapter.register(op)
    _REGISTERED[spec.name] = op
    return dispatcher


def registered_specs() -> tuple[OpSpec, ...]:
    """The declaration of every registered op, in registration order."""
    return tuple(op.spec for op in _REGISTERED.values())
