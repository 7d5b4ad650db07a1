"""Every Python declaration (``scale_lib.ops.OPS``) agrees with the C++ function it is bound to.

An op's signature is written twice: in C++ (the kernel's declaration, exported by its binding's
``SCALE_LIB_EXPORT``) and in Python (its ``OpSpec``). TVM-FFI exports each function's type schema
(``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA``) and ``SCALE_LIB_EXPORT`` its argument names, so the two
are compared here for every declared op: arity, the type of every argument (tensor, optional
tensor, float, int, bool), the names of the inputs and scalar attributes, whether the library
writes an output or returns one it allocated, and the workspace variant and its size function.
A declaration that disagrees with its export fails here, with both sides in the message, before
any call can pass arguments in the wrong order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

import pytest

import scale_lib
from scale_lib._spec import Attr, Input, OpSpec, Output
from scale_lib.ops import OPS

LIB: Any = scale_lib.lib
TENSOR, OPTIONAL = "DLTensor*", "Optional[DLTensor*]"
SCALAR = {float: "float", int: "int", bool: "bool"}


@dataclass(frozen=True)
class Signature:
    """One exported function: its arguments as (name, type), outputs first, and what it returns.
    A name of ``None`` matches any name (an output is named by its C++ function alone)."""

    name: str
    params: tuple[tuple[str | None, str], ...]
    returns: str


def _type(entry: dict[str, Any]) -> str:
    args = entry.get("args")
    return f"{entry['type']}[{', '.join(_type(a) for a in args)}]" if args else entry["type"]


def exported(name: str) -> Signature:
    """The signature of exported function ``name``, from the library's metadata."""
    metadata = LIB.get_function_metadata(name)
    if metadata is None:
        raise AssertionError(f"the library exports no function {name!r} (or exports it without metadata)")
    schema = json.loads(metadata["type_schema"])
    types = [_type(p) for p in schema["named_args"]["params"]]
    match = re.match(r"(\w+)\((.*)\)", LIB.get_function_doc(name).splitlines()[0])
    assert match is not None and match.group(1) == name, f"{name}: no signature line in its docstring"
    names = [n.strip() for n in match.group(2).split(",") if n.strip()]
    assert len(names) == len(types), f"{name}: {len(names)} names for {len(types)} parameters"
    returns = _type(schema["named_args"]["return"][0])
    return Signature(name, tuple(zip(names, types, strict=True)), returns)


def declared(spec: OpSpec) -> list[Signature]:
    """What ``spec`` says the library exports for it."""
    inputs = tuple((i.name, OPTIONAL if i.optional else TENSOR) for i in spec.inputs)
    attrs = tuple((a.name, SCALAR[a.type]) for a in spec.attrs)
    if spec.output.allocated_by_library:
        return [Signature(spec.name, inputs + attrs, "ffi.Tensor")]
    out: tuple[tuple[str | None, str], ...] = ((None, TENSOR),)
    signatures = [Signature(spec.name, out + inputs + attrs, "None")]
    if spec.workspace is not None:
        workspace = (("workspace", TENSOR),)
        signatures.append(Signature(f"{spec.name}_with_workspace", out + workspace + inputs + attrs, "None"))
        signatures.append(Signature(spec.workspace, (("numel", "int"), ("groups", "int")), "int"))
    return signatures


def _text(s: Signature) -> str:
    params = ", ".join(f"{n or '<output>'}: {t}" for n, t in s.params)
    return f"{s.name}({params}) -> {s.returns}"


def mismatches(spec: OpSpec) -> list[str]:
    """How ``spec`` disagrees with the library's exports (empty when they agree)."""
    problems = []
    for want in declared(spec):
        got = exported(want.name)
        same = (
            len(got.params) == len(want.params)
            and got.returns == want.returns
            and all(
                gt == wt and (wn is None or gn == wn)
                for (gn, gt), (wn, wt) in zip(got.params, want.params, strict=True)
            )
        )
        if not same:
            problems.append(f"declared {_text(want)}\n  exported {_text(got)}")
    return problems


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in OPS])
def test_declaration_matches_export(spec: OpSpec) -> None:
    problems = mismatches(spec)
    assert not problems, f"{spec.name}: the OpSpec in its module and the C++ export disagree:\n" + "\n".join(
        problems
    )


# -- the check catches every kind of disagreement ---------------------------------------------
SCALE = next(s for s in OPS if s.name == "scale")
WRONG = {
    "an attribute missing": replace(SCALE, attrs=()),
    "an attribute too many": replace(SCALE, attrs=(Attr("factor", float), Attr("bias", float))),
    "an attribute of another type": replace(SCALE, attrs=(Attr("factor", int),)),
    "an attribute of another name": replace(SCALE, attrs=(Attr("alpha", float),)),
    "an input too many": replace(SCALE, inputs=(Input("x"), Input("y"))),
    "an optional input that is required": replace(SCALE, inputs=(Input("x", optional=True),)),
    "an input of another name": replace(SCALE, inputs=(Input("a"),)),
    "an output the library allocates": replace(SCALE, output=Output(allocated_by_library=True)),
    "a workspace the op does not export": replace(SCALE, workspace="scale_workspace_bytes"),
}


@pytest.mark.parametrize("what", sorted(WRONG))
def test_a_disagreeing_declaration_is_caught(what: str) -> None:
    try:
        problems = mismatches(WRONG[what])
    except AssertionError as err:  # the declared function does not exist at all
        problems = [str(err)]
    assert problems, f"{what}: not detected"


def test_the_real_declaration_of_scale_agrees() -> None:
    assert mismatches(SCALE) == []
    assert exported("scale") == Signature(
        "scale", (("out", TENSOR), ("x", TENSOR), ("factor", "float")), "None"
    )
