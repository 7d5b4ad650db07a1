"""Make this process see no Triton, as on a machine without it: the library's Triton kernels
were compiled at build time and must not need it at run time.

``install()`` wraps every import finder so that none finds ``triton``: ``import triton`` raises
ModuleNotFoundError and ``importlib.util.find_spec("triton")`` is None, exactly as when it is not
installed (frameworks that probe for it, PyTorch among them, then go without it). The suite does
it when SCALE_LIB_TESTS_WITHOUT_TRITON is set; a test of a Triton op can run
``no_triton.install()`` in a fresh interpreter to show that its CPU path needs no Triton.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any


def _is_triton(name: str) -> bool:
    return name == "triton" or name.startswith("triton.")


class _WithoutTriton(importlib.abc.MetaPathFinder):
    """An import finder that finds what ``finder`` finds, except Triton."""

    def __init__(self, finder: Any) -> None:
        self.finder = finder

    def find_spec(self, name, path, target=None):
        if _is_triton(name):
            return None
        find = getattr(self.finder, "find_spec", None)
        return None if find is None else find(name, path, target)

    def invalidate_caches(self) -> None:
        invalidate = getattr(self.finder, "invalidate_caches", None)
        if invalidate is not None:
            invalidate()


def install() -> None:
    sys.meta_path[:] = [f if isinstance(f, _WithoutTriton) else _WithoutTriton(f) for f in sys.meta_path]
    for name in [n for n in sys.modules if _is_triton(n)]:
        del sys.modules[name]
