"""The guarantees the C++ side gives every exported function, called through the bare ABI
(``scale_lib.lib.<name>``), with no help from the Python package: a tensor with elements but no
memory is a ValueError naming it; no output shares memory with another argument except as the very
same array where the function allows in-place use (judged by elements, not byte spans); user errors
carry plain messages; the exported metadata names every argument.

The argument names come from each function's exported docstring and the valid calls from each
op's declaration (``scale_lib.ops.OPS``), so an op added later is covered by itself;
``test_every_export_is_covered`` fails for an export no declaration accounts for.
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
from scale_lib._bound_op import _Probe  # an array as a declared shape rule sees it
from scale_lib.ops import OPS

LIB: Any = scale_lib.lib
ROWS, HIDDEN = 6, 8


@dataclass(frozen=True)
class Call:
    """A valid call of one exported function: each tensor argument's shape and dtype, by name,
    and the value of each scalar argument."""

    tensors: dict[str, tuple[tuple[int, ...], str]]
    scalars: dict[str, Any]


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


X = ((ROWS, HIDDEN), "float32")
_EXAMPLE = {float: 1.5, int: 2, bool: True}


def _declared_calls(spec: Any) -> dict[str, Call]:
    """Valid calls of every function ``spec`` exports, from its declaration alone: its inputs
    with x of shape X and the others by their shape rules, its output by the output rule under
    the name its ABI gives it, its scalars at example values; the functional form
    ``<name>_new`` and, for an op with a workspace, ``<name>_with_workspace`` and the size
    function."""
    inputs = {
        i.name: (X[0] if i.shape is None else tuple(i.shape(X[0])), i.dtype or "float32") for i in spec.inputs
    }
    scalars = {a.name: _EXAMPLE[a.type] for a in spec.attrs}
    calls = {}
    if spec.output.allocated_by_library:
        calls[spec.name] = Call(inputs, scalars)
    else:
        output = spec.output
        if output.shape is None:
            shape = inputs[output.like][0]
        else:
            shape = tuple(output.shape(*(_Probe(s, d) for s, d in inputs.values())))
        out_dtype = output.dtype or inputs[output.like][1]
        out_name = abi_of(spec.name)[1][0]
        calls[spec.name] = Call({out_name: (shape, out_dtype), **inputs}, scalars)
        if spec.workspace is not None:
            workspace = {"workspace": ((64,), "float64")}
            calls[f"{spec.name}_with_workspace"] = Call(
                {out_name: (shape, out_dtype), **workspace, **inputs}, scalars
            )
            sizes = abi_of(spec.workspace)[0]  # (numel of x, numel of out)
            calls[spec.workspace] = Call({}, dict(zip(sizes, (48, 1), strict=True)))
    calls[f"{spec.name}_new"] = Call(inputs, scalars)  # where the op has a functional form
    # An op with a kernel compiled at run time also exports its ahead-of-time kernel, same ABI.
    calls[f"{spec.name}_ahead_of_time"] = calls[spec.name]
    return calls


# Every exported function, from the declared ops (functional forms allocate through the caller's
# framework; NumPy publishes no allocator, so on the CPU they return memory the library owns).
CALLS: dict[str, Call] = {"build_info": Call({}, {})}
for _spec in OPS:
    CALLS |= _declared_calls(_spec)
# Only what the library exports (not every op has a functional form).
CALLS = {name: call for name, call in CALLS.items() if LIB.get_function_metadata(name) is not None}
# The functions of CUDA-only ops that run them (and so refuse CPU arrays).
CUDA_ONLY = {
    name
    for spec in OPS
    if "cpu" not in spec.devices
    for name in (spec.name, f"{spec.name}_new", f"{spec.name}_with_workspace", f"{spec.name}_ahead_of_time")
}


def _exported_names() -> list[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is needed to list the library's exported symbols")
    path = Path(scale_lib.__file__).parent / scale_lib.build_info()["library"]
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


# In-place use: an output may be the very same array as any input of its shape and dtype (every
# op reads each element before writing it, by the thread that writes it), and no other.
IN_PLACE = {
    (spec.name, o, i)
    for spec in OPS
    if spec.name in CALLS
    for o in abi_of(spec.name)[1]
    for i in (x.name for x in spec.inputs)
    if CALLS[spec.name].tensors[i] == CALLS[spec.name].tensors[o]
}
# An op's ahead-of-time kernel (next to one compiled at run time) allows what the op allows.
IN_PLACE |= {(f"{n}_ahead_of_time", o, i) for n, o, i in IN_PLACE if f"{n}_ahead_of_time" in CALLS}


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
