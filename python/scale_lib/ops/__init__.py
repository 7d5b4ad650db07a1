# SPDX-License-Identifier: Apache-2.0
"""The public ops. Each takes arrays of any supported framework and returns the same kind.

One module per op, named for it: its declaration (an :class:`~scale_lib._spec.OpSpec`: the
exported function, its inputs, scalar attributes, output and vjp), registered once with
:func:`~scale_lib._dispatch.register`, and its typed public function. Importing the module
registers the op: the lines below, one per op (``as``: re-exported), are the ops of the library
(tools/new_op.py adds one, tools/remove_op.py deletes it), and the package re-exports each
(``from .ops import *``: every name here without a leading underscore). A module's docstring
opens with the pattern its op shows, and the public function's with what it computes: the
README's op table is rendered from them and the function's signature (tools/render_docs.py).
"""

from scale_lib._dispatch import registered_specs as _registered_specs
from scale_lib._spec import OpSpec as _OpSpec

from .axpby import axpby as axpby
from .cumsum import cumsum as cumsum
from .flatnonzero import flatnonzero as flatnonzero
from .l2_norm import l2_norm as l2_norm
from .rms_norm import rms_norm as rms_norm
from .scale import scale as scale
from .silu_and_mul import silu_and_mul as silu_and_mul
from .softmax import softmax as softmax

OPS: tuple[_OpSpec, ...] = _registered_specs()
"""Every declared op, in registration order (``spec.public`` tells the public ones)."""
