#!/usr/bin/env python3
"""Scaffold a new op: every file an op touches, as a working elementwise op to edit.

    python3 tools/new_op.py shift

creates, from the ``scale`` op's own sources (so the scaffold never drifts from the real thing):

    kernels/shift.h            declarations and argument checks
    kernels/shift.cu           the CUDA kernel (validate, device guard, stream, dispatch, check)
    kernels/shift_cpu.cc       its CPU twin
    bindings/shift_binding.cc  the exported ABI, shift(out, x, factor), and device routing
    tests/test_shift.py        a framework x device x dtype x shape test matrix

and adds ``shift`` to the public API (``ops.py`` and ``__init__.py``). It computes
``out = x * factor`` until you change it: edit the kernels, the reference in the test, the
vjp and the docstring. See docs/adding_an_op.md for the walkthrough.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_OP = "scale"
MARKER = re.compile(r"^[ \t]*(//|#)[ \t]*\[[a-z_]+\.(begin|end)\][ \t]*\n", re.MULTILINE)


def library_name() -> str:
    packages = [p.name for p in (ROOT / "python").iterdir() if (p / "__init__.py").exists()]
    if len(packages) != 1:
        sys.exit(f"error: expected one package under python/, found {packages}")
    return packages[0]


def derive(text: str, op: str, lib: str) -> str:
    """scale's source rewritten for `op`, leaving the library's own name alone."""
    protected = {lib: "\0lib\0", lib.upper(): "\0LIB\0"}
    for name, placeholder in protected.items():
        text = text.replace(name, placeholder)
    camel = "".join(part.capitalize() for part in op.split("_"))
    text = text.replace("Scale", camel).replace("SCALE", op.upper())
    text = re.sub(r"(?<![A-Za-z0-9])scale(?![A-Za-z0-9])", op, text)
    for name, placeholder in protected.items():
        text = text.replace(placeholder, name)
    return MARKER.sub("", text)  # the docs' include markers belong to scale alone


PUBLIC_API = '''

# ---------------------------------------------------------------------------------------------
# {op}: scaffolded by tools/new_op.py as out = x * factor. Edit kernels/{op}.cu, kernels/{op}_cpu.cc,
# this declaration (inputs, attrs, vjp) and the docstring.
# ---------------------------------------------------------------------------------------------
_{op} = Op(
    "{op}",
    attrs=(("factor", float),),
    vjp=lambda grad, out, x, factor: ({op}(grad, factor),),
    cuda_graph_safe=True,
)


def {op}(x: ArrayT, factor: float, *, out: ArrayT | None = None) -> ArrayT:
    """``out = x * factor`` (scaffolded: describe what {op} computes).

    Args:
        x: A contiguous float16, bfloat16, float32 or float64 array from any supported framework.
        factor: A real number.
        out: Optional array to write into, like ``x`` (not for JAX).

    Returns:
        ``out``, or a new array like ``x``.
    """
    return _{op}.call((x,), (_real_scalar(factor, "factor"),), out)
'''

TEST = '''"""{op}: a framework x device x dtype x shape matrix (scaffolded by tools/new_op.py)."""

from __future__ import annotations

import numpy as np
import pytest
from backends import DTYPES, Backend, backend_out_params, backend_params, check_native, shape_id
from reference import assert_close, random_data

import {lib}

SHAPES = [(), (0,), (1,), (7,), (255,), (257,), (4097,), (2**20 + 3,), (3, 5), (2, 3, 4)]
FACTOR = -1.5
NAN = float("nan")


def reference(x: np.ndarray, factor: float) -> np.ndarray:
    """{op} in float64: edit together with the kernels."""
    return x.astype(np.float64) * factor


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(), indirect=["backend"])
def test_{op}_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
    x = backend.asarray(random_data(shape, seed=sum(shape) + 1), dtype)
    x64 = backend.to_numpy(x)
    if out_mode == "out":
        buffer, out = backend.guarded_out(shape, dtype, sentinel=NAN)
        assert backend.run({lib}.{op}, x, FACTOR, out=out) is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
        result = out
    else:
        result = backend.run({lib}.{op}, x, FACTOR)
        check_native(backend, result, dtype, shape)
    assert_close(backend.to_numpy(result), reference(x64, FACTOR), dtype)
    np.testing.assert_array_equal(backend.to_numpy(x), x64)


@pytest.mark.parametrize("backend", backend_params(), indirect=True)
def test_{op}_rejects_bad_input(backend: Backend) -> None:
    with pytest.raises(TypeError, match="x has unsupported dtype int32"):
        backend.run({lib}.{op}, backend.asarray(np.ones(3), "int32"), FACTOR)
    with pytest.raises(TypeError, match="factor must be a real number"):
        backend.run({lib}.{op}, backend.asarray(np.ones(3), "float32"), "1")
    with pytest.raises(TypeError, match="x must be an array"):
        {lib}.{op}([1.0, 2.0], FACTOR)
'''


def add_to_init(init: Path, op: str) -> None:
    text = init.read_text()
    imports = re.search(r"^from \.ops import (.+)$", text, re.MULTILINE)
    names = sorted({*(n.strip() for n in imports.group(1).split(",")), op})
    text = text.replace(imports.group(0), f"from .ops import {', '.join(names)}")
    listing = re.search(r"__all__ = \[(.*?)\]", text, re.DOTALL)
    exported = sorted({*re.findall(r'"([^"]+)"', listing.group(1)), op}, key=lambda s: s.lstrip("_"))
    body = "".join(f'    "{name}",\n' for name in exported)
    init.write_text(text.replace(listing.group(0), f"__all__ = [\n{body}]"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the op's name, a lowercase identifier such as fused_add")
    args = parser.parse_args(argv)
    op, lib = args.name, library_name()
    if not re.fullmatch(r"[a-z][a-z0-9_]*", op) or keyword.iskeyword(op):
        sys.exit(f"error: {op!r} must be a lowercase Python identifier")
    sources = {
        f"kernels/{TEMPLATE_OP}.h": f"kernels/{op}.h",
        f"kernels/{TEMPLATE_OP}.cu": f"kernels/{op}.cu",
        f"kernels/{TEMPLATE_OP}_cpu.cc": f"kernels/{op}_cpu.cc",
        f"bindings/{TEMPLATE_OP}_binding.cc": f"bindings/{op}_binding.cc",
    }
    created = [*sources.values(), f"tests/test_{op}.py"]
    existing = [path for path in created if (ROOT / path).exists()]
    ops_py = ROOT / "python" / lib / "ops.py"
    if existing or re.search(rf"^def {op}\(", ops_py.read_text(), re.MULTILINE):
        sys.exit(f"error: {op} exists already ({', '.join(existing) or 'ops.py'})")

    for template, path in sources.items():
        (ROOT / path).write_text(derive((ROOT / template).read_text(), op, lib))
    (ROOT / f"tests/test_{op}.py").write_text(TEST.format(op=op, lib=lib))
    ops_py.write_text(ops_py.read_text() + PUBLIC_API.format(op=op))
    add_to_init(ROOT / "python" / lib / "__init__.py", op)

    print(f"created {', '.join(created)}; added {lib}.{op} to python/{lib}/ops.py and __init__.py")
    print(f"next: rebuild (pip install -e ... or python3 tools/dev.py tests -- tests/test_{op}.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
