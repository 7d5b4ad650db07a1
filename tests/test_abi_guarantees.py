"""The guarantees the C++ side gives every exported function, called through the bare ABI
(``scale_lib.lib.<name>``), with no help from the Python package: a tensor with elements but no
memory is a ValueError naming it; no output shares memory with another argument except as the very
same array where the function allows in-place use (judged by elements, not byte spans); user errors
carry plain messages; the exported metadata names every argument.

The argument names come from each function's exported docstring, so a function added later is
covered by adding one line to ``CALLS``; ``test_every_export_is_covered`` fails until it is.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import scale_lib
from scale_lib.ops import OPS

LIB: Any = scale_lib.lib
ROWS, HIDDEN = 6, 8


@dataclass(frozen=True)
class Call:
    """A valid call of one exported function: each tensor argument's shape and dtype, by name,
    and the value of each scalar argument."""

    tensors: dict[str, tuple[tuple[int, ...], str]]
    scalars: dict[str, Any]


X = ((ROWS, HIDDEN), "float32")
ROW_VALUES = ((ROWS,), "float64")
HALF = ((ROWS, HIDDEN // 2), "float32")  # x's shape with the last dimension halved
CALLS: dict[str, Call] = {
    "scale": Call({"out": X, "x": X}, {"factor": 2.0}),
    "axpby": Call({"out": X, "x": X, "y": X}, {"a": 2.0, "b": -1.0}),
    "rms_norm": Call({"out": X, "x": X, "weight": ((HIDDEN,), "float32")}, {"eps": 1e-6}),
    "rms_norm_rstd": Call({"rstd": ROW_VALUES, "x": X}, {"eps": 1e-6}),
    "rms_norm_backward": Call(
        {"grad_x": X, "grad": X, "x": X, "weight": ((HIDDEN,), "float32"), "rstd": ROW_VALUES}, {}
    ),
    "rms_norm_weight_grad": Call(
        {"grad_weight": ((HIDDEN,), "float32"), "grad": X, "x": X, "rstd": ROW_VALUES}, {}
    ),
    "l2_norm": Call({"out": ((), "float32"), "x": X}, {}),
    "l2_norm_with_workspace": Call({"out": ((), "float32"), "workspace": ((64,), "float64"), "x": X}, {}),
    "flatnonzero": Call({"x": X}, {}),
    "silu_and_mul": Call({"out": HALF, "x": X}, {}),
    "silu_and_mul_backward": Call({"grad_x": X, "x": X, "grad": HALF}, {}),
    # Functional forms (include/functional.h): they allocate through the caller's
    # framework, which NumPy does not publish, so here they raise ValueError; PyTorch calls them.
    "scale_new": Call({"x": X}, {"factor": 2.0}),
    "axpby_new": Call({"x": X, "y": X}, {"a": 2.0, "b": -1.0}),
    "rms_norm_new": Call({"x": X, "weight": ((HIDDEN,), "float32")}, {"eps": 1e-6}),
    "l2_norm_new": Call({"x": X}, {}),
    "silu_and_mul_new": Call({"x": X}, {}),
    "l2_norm_workspace_bytes": Call({}, {"numel": 48, "groups": 1}),
    "build_info": Call({}, {}),
}
# Ops declared in scale_lib.ops.OPS without an entry above (a scaffolded op: every input and the
# output like x, its scalars at example values) are covered from their declarations.
_EXAMPLE = {float: 1.5, int: 2, bool: True}
DERIVED = {
    spec.name
    for spec in OPS
    if spec.name not in CALLS and not spec.output.allocated_by_library and spec.workspace is None
}
CALLS |= {
    spec.name: Call(
        {"out": X, **{i.name: X for i in spec.inputs}}, {a.name: _EXAMPLE[a.type] for a in spec.attrs}
    )
    for spec in OPS
    if spec.name in DERIVED
}
# Functions of example ops that a library made from the template removed are not exported: their
# entries go (test_every_export_has_a_call below still requires an entry for every export).
CALLS = {name: call for name, call in CALLS.items() if LIB.get_function_metadata(name) is not None}
CUDA_ONLY = {spec.name for spec in OPS if "cpu" not in spec.devices}


# [read_abi.begin]
def abi_of(name: str) -> tuple[list[str], list[str], list[str]]:
    """(argument names, outputs, TVM-FFI parameter types) of exported function ``name``.

    The types come from the type schema TVM-FFI exports with every function
    (``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA``); the names from the docstring SCALE_LIB_EXPORT
    exports beside it, whose first line is the signature, outputs first, and whose "Writes:"
    line lists the outputs.
    """
    schema = json.loads(LIB.get_function_metadata(name)["type_schema"])
    types = [p["type"] for p in schema["named_args"]["params"]]
    doc = LIB.get_function_doc(name)
    m = re.match(r"(\w+)\((.*)\)", doc.splitlines()[0])
    assert m is not None and m.group(1) == name, doc
    names = [n.strip() for n in m.group(2).split(",") if n.strip()]
    writes = re.search(r"^Writes: (.*)$", doc, re.MULTILINE)
    outputs = [n.strip() for n in writes.group(1).split(",")] if writes and "(" not in writes.group(1) else []
    return names, outputs, types


# [read_abi.end]


def _exported_names() -> list[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is needed to list the library's exported symbols")
    path = Path(scale_lib.__file__).parent / "libscale_lib.so"
    if not path.exists():
        pytest.skip("the library is not next to the package sources")
    symbols = subprocess.run(
        [nm, "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True
    )
    names = re.findall(r" T __tvm_ffi_(\w+)$", symbols.stdout, re.MULTILINE)
    return sorted(n for n in names if not n.startswith("_"))


def test_every_export_is_covered() -> None:
    assert _exported_names() == sorted(CALLS)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_metadata_names_every_argument(name: str) -> None:
    names, outputs, types = abi_of(name)
    call = CALLS[name]
    assert sorted(names) == sorted([*call.tensors, *call.scalars])
    assert len(types) == len(names)
    assert names[: len(outputs)] == outputs  # outputs first
    for n, t in zip(names, types, strict=True):
        assert (t == "DLTensor*" or t.startswith("Optional")) == (n in call.tensors), (n, t)


def test_scale_signature_from_metadata() -> None:
    assert abi_of("scale") == (["out", "x", "factor"], ["out"], ["DLTensor*", "DLTensor*", "float"])


def _args(name: str, arrays: dict[str, Any]) -> list[Any]:
    names, _, _ = abi_of(name)
    call = CALLS[name]
    return [arrays[n] if n in call.tensors else call.scalars[n] for n in names]


def _valid_arrays(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}
    for n, (shape, dtype) in CALLS[name].tensors.items():
        a = rng.uniform(0.5, 2.0, size=shape).astype(dtype)
        out[n] = a
    return out


TENSOR_FUNCTIONS = sorted(n for n, c in CALLS.items() if c.tensors)


@pytest.mark.parametrize("name", TENSOR_FUNCTIONS)
def test_valid_call_runs(name: str) -> None:
    if name in CUDA_ONLY:  # these arrays are on the CPU
        with pytest.raises(ValueError, match="only a CUDA implementation"):
            LIB[name](*_args(name, _valid_arrays(name)))
        return
    LIB[name](*_args(name, _valid_arrays(name)))


# ---------------------------------------------------------------------------------------------
# Null data with elements (a PyTorch tensor whose storage was freed): in a subprocess, so that a
# crash fails one test instead of the run.
# ---------------------------------------------------------------------------------------------
_NULL_STORAGE = textwrap.dedent(
    """
    import json, sys
    import torch
    import scale_lib
    results = {}
    for name, order, tensors, scalars in json.loads(sys.argv[1]):
        for victim in tensors:
            args = []
            for n in order:
                if n in tensors:
                    shape, dtype = tensors[n]
                    t = torch.ones(shape, dtype=getattr(torch, dtype))
                    if n == victim:
                        t.untyped_storage().resize_(0)
                    args.append(t)
                else:
                    args.append(scalars[n])
            try:
                scale_lib.lib[name](*args)
                outcome = "no error"
            except Exception as e:
                outcome = type(e).__name__ + ": " + str(e)
            results[name + ":" + victim] = outcome
            print(json.dumps([name, victim, outcome]), flush=True)
    """
)


@pytest.fixture(scope="module")
def freed_storage_outcomes() -> dict[tuple[str, str], str]:
    """Every function called once per tensor argument whose storage was freed, in one subprocess:
    a crash fails every test that needs it, not the run."""
    pytest.importorskip("torch")
    spec = json.dumps([[n, abi_of(n)[0], CALLS[n].tensors, CALLS[n].scalars] for n in TENSOR_FUNCTIONS])
    proc = subprocess.run(
        [sys.executable, "-c", _NULL_STORAGE, spec], capture_output=True, text=True, timeout=600, check=False
    )
    outcomes = {}
    for line in proc.stdout.splitlines():
        if line.startswith("["):
            name, victim, outcome = json.loads(line)
            outcomes[name, victim] = outcome
    if proc.returncode != 0:
        last = list(outcomes)[-1] if outcomes else None
        pytest.fail(f"the subprocess died (status {proc.returncode}) after {last}:\n{proc.stderr[-3000:]}")
    return outcomes


@pytest.mark.parametrize("name", TENSOR_FUNCTIONS)
def test_freed_storage_is_a_value_error(
    name: str, freed_storage_outcomes: dict[tuple[str, str], str]
) -> None:
    for victim in CALLS[name].tensors:
        outcome = freed_storage_outcomes[name, victim]
        assert outcome.startswith(f"ValueError: {victim} has "), (victim, outcome)
        assert "no memory" in outcome, outcome


# ---------------------------------------------------------------------------------------------
# Overlap: every output against every other tensor argument.
# ---------------------------------------------------------------------------------------------
def _view(buffer: np.ndarray, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.ndarray(shape, dtype=dtype, buffer=buffer, offset=offset)


def _pairs() -> list[Any]:
    params = []
    for name in TENSOR_FUNCTIONS:
        names, outputs, _ = abi_of(name)
        tensors = [n for n in names if n in CALLS[name].tensors]
        for o in outputs:
            for other in tensors:
                if other != o:
                    params.append(pytest.param(name, o, other, id=f"{name}:{o}~{other}"))
    return params


@pytest.mark.parametrize(("name", "output", "other"), _pairs())
def test_output_partially_overlapping_another_argument_is_refused(name: str, output: str, other: str) -> None:
    arrays = _valid_arrays(name)
    (o_shape, o_dtype), (a_shape, a_dtype) = CALLS[name].tensors[output], CALLS[name].tensors[other]
    size = arrays[other].nbytes + arrays[output].nbytes + 64
    buffer = np.zeros(size, dtype=np.uint8)
    arrays[other] = _view(buffer, 0, a_shape, a_dtype)
    arrays[other][...] = 1
    offset = 8 if arrays[other].nbytes > 8 else 0  # inside `other`, at an element edge
    arrays[output] = _view(buffer, offset, o_shape, o_dtype)
    before = bytes(buffer)
    with pytest.raises(ValueError, match=rf"^({output} and {other}|{other} and {output}) overlap in memory"):
        LIB[name](*_args(name, arrays))
    assert bytes(buffer) == before


def _same_array_pairs() -> list[Any]:
    params = []
    for name in TENSOR_FUNCTIONS:
        names, outputs, _ = abi_of(name)
        call = CALLS[name]
        for o in outputs:
            for other in names:
                if other != o and other in call.tensors and call.tensors[other] == call.tensors[o]:
                    params.append(pytest.param(name, o, other, id=f"{name}:{o}={other}"))
    return params


IN_PLACE = {("scale", "out", "x"), ("axpby", "out", "x"), ("axpby", "out", "y"), ("rms_norm", "out", "x")}
IN_PLACE |= {("rms_norm_backward", "grad_x", "grad"), ("rms_norm_backward", "grad_x", "x")}
# A scaffolded op's output may be any of its inputs (tools/new_op.py writes "out=x, out=y, ...").
IN_PLACE |= {(spec.name, "out", i.name) for spec in OPS if spec.name in DERIVED for i in spec.inputs}


@pytest.mark.parametrize(("name", "output", "other"), _same_array_pairs())
def test_same_array_only_where_in_place_is_allowed(name: str, output: str, other: str) -> None:
    arrays = _valid_arrays(name)
    expected_arrays = {k: v.copy() for k, v in arrays.items()}
    arrays[output] = arrays[other]
    doc = LIB.get_function_doc(name)
    if (name, output, other) in IN_PLACE:
        assert f"{output}={other}" in doc
        if name in CUDA_ONLY:  # these arrays are on the CPU
            return
        LIB[name](*_args(name, arrays))
        LIB[name](*_args(name, expected_arrays))
        np.testing.assert_allclose(arrays[output], expected_arrays[output], rtol=1e-6)
    else:
        assert f"{output}={other}" not in doc
        with pytest.raises(
            ValueError, match=rf"^{output} and {other} overlap in memory; {output} must not share"
        ):
            LIB[name](*_args(name, arrays))
