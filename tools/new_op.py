#!/usr/bin/env python3
"""Scaffold a new op of any signature: every file an op touches, as a working op to edit.

    python3 tools/new_op.py NAME [--inputs x,y] [--attrs alpha:float,n:int,flag:bool]
                            [--kind elementwise|rows|scan|custom] [--cuda-only]
                            [--lang cuda|triton] [--scan-op sum|prod|logaddexp]

writes (see docs/adding_an_op.md):

    kernels/NAME.h             the math (one function object, for both devices), the argument
                               checks and the declarations
    kernels/NAME.cu            the CUDA function: validate, device guard, stream, dispatch, launch
    kernels/NAME_cpu.cc        its CPU twin (none with --cuda-only)
    bindings/NAME_binding.cc   the exported ABI, NAME(out, *inputs, *attrs), and device routing
    tests/test_NAME.py         the test matrix, its CASE and a property test; the float64
                               reference and the tolerances are at its top, in one place
    docs/kernels/NAME.md       the op's page

and adds NAME's section to ops.py (its OpSpec and typed public function), its export to
__init__.py and its row to the README's op table. The generated op builds, passes lint and
passes its tests as generated. Its math until you change it:

    elementwise  out = (x + y + ...) * alpha * ...   (the shared elementwise launchers)
    rows         v = x + y + ...; out = v * alpha / sqrt(mean(v**2, last axis) + 1)
                 (the shared row-wise launchers: one block per row on CUDA)
    scan         out = running sum(x + y + ..., last axis) * alpha * ..., from the end of each row
                 (a running product or log-sum-exp with --scan-op prod|logaddexp)
                 with reverse=True, a keyword the kind adds (the shared scan launchers:
                 a scheme per shape on CUDA, the CPU pool on the host; docs/scan.md)
    custom       out = (x + y + ...) * alpha * ...   (written as plain kernels of its own)

--lang triton (elementwise ops) writes the CUDA kernel in Triton instead (docs/triton.md):
kernels/triton/NAME.py (the @triton.jit kernel and the specialisations the build compiles) and
kernels/triton/NAME.cu (its launcher) take the place of kernels/NAME.cu; the CPU twin stays C++.

Integer attributes multiply like floats; a bool attribute negates the result when true.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import keyword
import os
import re
import runpy
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ATTR_TYPES = {"float": "double", "int": "int64_t", "bool": "bool"}
EXAMPLE_VALUE = {"float": "1.5", "int": "3", "bool": "True"}
KINDS = ("elementwise", "rows", "scan", "custom")
# A scan's operator (--scan-op): its C++ operator (kernels/scan.h), its NumPy running form (the
# tests' float64 reference) and its vjp in python/<lib>/_scan_vjp.py (none: the op itself the
# other way, as for a sum).
SCAN_OPS = {
    "sum": ("ScanSum", "np.add.accumulate", None),
    "prod": ("ScanProd", "np.multiply.accumulate", "cumprod_vjp"),
    "logaddexp": ("ScanLogAddExp", "np.logaddexp.accumulate", "logcumsumexp_vjp"),
}
# The attribute the scan kind adds: the direction of the scan (its vjp runs the other way).
REVERSE = "reverse"
LANGS = ("cuda", "triton")
# Triton's signature type of each attribute type, as the launcher passes it (bool as 0/1).
TRITON_ATTR_TYPES = {"float": "fp64", "int": "i64", "bool": "i32"}


@dataclass(frozen=True)
class Attr:
    name: str
    type: str  # float, int or bool

    @property
    def cpp(self) -> str:
        return ATTR_TYPES[self.type]

    @property
    def example(self) -> str:
        return "False" if self.name == REVERSE else EXAMPLE_VALUE[self.type]


@dataclass(frozen=True)
class Spec:
    op: str
    lib: str
    inputs: tuple[str, ...]
    attrs: tuple[Attr, ...]
    kind: str
    cuda_only: bool
    lang: str = "cuda"
    scan_op: str = "sum"
    like: str | None = None  # --like: the example op copied instead (tools/copy_op.py)

    # -- names --------------------------------------------------------------------------------
    @property
    def camel(self) -> str:
        return "".join(part.capitalize() for part in self.op.split("_"))

    @property
    def macro(self) -> str:
        return self.lib.upper()

    @property
    def math_devices(self) -> str:
        return "for the CUDA kernel" if self.cuda_only else "for both devices"

    @property
    def math_attrs(self) -> tuple[Attr, ...]:
        """The attributes of the math (a scan's direction is the launcher's)."""
        return tuple(a for a in self.attrs if not (self.kind == "scan" and a.name == REVERSE))

    @property
    def cuda_kernel(self) -> str:
        """The file of the op's CUDA kernel (a Triton op's: its Triton source)."""
        return f"kernels/triton/{self.op}.py" if self.lang == "triton" else f"kernels/{self.op}.cu"

    @property
    def rows_like(self) -> bool:
        """Whether the op works along the last dimension (rows of 1 or more dimensions)."""
        return self.kind in ("rows", "scan")

    @property
    def abi_names(self) -> list[str]:
        return ["out", *self.inputs, *(a.name for a in self.attrs)]

    def cpp_params(self) -> str:
        tensors = [f"ffi::TensorView {n}" for n in ("out", *self.inputs)]
        return ", ".join(tensors + [f"{a.cpp} {a.name}" for a in self.attrs])

    def cpp_args(self) -> str:
        return ", ".join(self.abi_names)

    def fn_init(self, c: str = "C") -> str:
        """The function object, built from the attributes in the compute type."""
        members = [a.name if a.type == "bool" else f"static_cast<{c}>({a.name})" for a in self.math_attrs]
        return f"{self.camel}Fn<{c}>{{{', '.join(members)}}}"

    def data_ptrs(self) -> str:
        return ", ".join(["DataPtr<T>(out)", *(f"DataPtr<const T>({n})" for n in self.inputs)])

    # -- the default math, in C++ and in Python -----------------------------------------------
    def cpp_value(self) -> str:
        total = " + ".join(self.inputs)
        return f"({total})" if len(self.inputs) > 1 else total

    def cpp_scaled(self, v: str) -> str:
        factors = [a.name for a in self.math_attrs if a.type != "bool"]
        expr = " * ".join([v, *factors])
        for a in self.math_attrs:
            if a.type == "bool":
                expr = f"{a.name} ? -({expr}) : {expr}"
        return expr

    def py_value(self) -> str:
        total = " + ".join(self.inputs)
        return f"({total})" if len(self.inputs) > 1 else total

    def py_scaled(self, v: str) -> str:
        expr = " * ".join([v, *(a.name for a in self.math_attrs if a.type != "bool")])
        for a in self.math_attrs:
            if a.type == "bool":
                expr = f"-({expr}) if {a.name} else {expr}"
        return expr

    @property
    def formula(self) -> str:
        v = self.py_value()
        if self.kind == "rows":
            return f"v = {v}; out = {self.py_scaled('v')} / sqrt(mean(v**2, axis=-1) + 1)"
        if self.kind == "scan":
            return f"out = {self.py_scaled(f'{SCAN_OPS[self.scan_op][1]}({v}, axis=-1)')}"
        return f"out = {self.py_scaled(v)}"


# ---------------------------------------------------------------------------------------------
# C++
# ---------------------------------------------------------------------------------------------
def header(s: Spec) -> str:
    guard = f"{s.macro}_KERNELS_{s.op.upper()}_H_"
    members = "".join(f"  {'bool' if a.type == 'bool' else 'C'} {a.name};\n" for a in s.math_attrs)
    values = ", ".join(f"C {n}" for n in s.inputs)
    if s.kind == "rows":
        include = '#include "rowwise.h"'
        fn = f"""// The math, {s.math_devices}, in the compute type C (see kernels/rowwise.h).
// TODO(author): write {s.op}'s math here; the tests' reference is in tests/test_{s.op}.py.
template <typename C>
struct {s.camel}Fn {{
{members}  {s.macro}_HOST_DEVICE C Value({values}) const {{
    // The value of one element, from one value per input.
    return {s.cpp_value()};
  }}
  {s.macro}_HOST_DEVICE C Term(C v) const {{
    // What the row sums, for one element's value.
    return v * v;
  }}
  {s.macro}_HOST_DEVICE C Finish(C v, C sum, int64_t cols) const {{
    // The output of one element, from its value and the sum over its row of `cols` elements.
    return {s.cpp_scaled("v")} / std::sqrt(sum / static_cast<C>(cols) + C(1));
  }}
}};
"""
    elif s.kind == "scan":
        include = '#include "scan.h"'
        fn = f"""// The math, {s.math_devices}, in the compute type C (see kernels/scan.h).
// TODO(author): write {s.op}'s math here; the tests' reference is in tests/test_{s.op}.py.
template <typename C>
struct {s.camel}Fn {{
  // How values combine along the row: ScanSum, or ScanProd, ScanMax, ScanMin, ScanLogAddExp
  // (kernels/scan.h; the vjp and the tests' reference change with it: docs/scan.md).
  using Op = {SCAN_OPS[s.scan_op][0]}<C>;
{members}  {s.macro}_HOST_DEVICE C Value({values}) const {{
    // The value of one element, from one value per input.
    return {s.cpp_value()};
  }}
  {s.macro}_HOST_DEVICE C Finish(C prefix) const {{
    // The output of one element, from the sum of the values of its row up to it, itself
    // included (with reverse: from it to the row's end).
    return {s.cpp_scaled("prefix")};
  }}
}};
"""
    elif s.kind == "elementwise":
        include = '#include "elementwise.h"'
        fn = f"""// The math, {s.math_devices}, in the compute type C (float for 16-bit and float32
// storage, double for float64; see kernels/elementwise.h). A comment in each body keeps it on
// lines of its own, whatever the length of the expression you write there.
// TODO(author): write {s.op}'s math here; the tests' reference is in tests/test_{s.op}.py.
template <typename C>
struct {s.camel}Fn {{
{members}  {s.macro}_HOST_DEVICE C operator()({values}) const {{
    // The output's value, from one value per input.
    return {s.cpp_scaled(s.cpp_value())};
  }}
}};
"""
    else:
        include = ""
        fn = ""
    tensor_refs = ", ".join(f"const ffi::TensorView& {n}" for n in ("out", *s.inputs))
    checks = [
        "  CHECK_FLOATING(x);".replace("x", s.inputs[0]),
        *(f"  CHECK_LIKE({n}, {s.inputs[0]});" for n in s.inputs[1:]),
        f"  CHECK_LIKE(out, {s.inputs[0]});",
    ]
    if s.rows_like:
        checks.append(f"  CHECK_MIN_NDIM({s.inputs[0]}, 1);")
    checks += [f"  CHECK_CONTIGUOUS({n});" for n in (*s.inputs, "out")]
    cpu_decl = "" if s.cuda_only else f"void {s.camel}CPU({s.cpp_params()});\n\n"
    # A Triton kernel is compiled only when the build has Triton (docs/triton.md).
    cuda_guard = f"{s.macro}_WITH_TRITON" if s.lang == "triton" else f"{s.macro}_WITH_CUDA"
    includes = "\n".join(x for x in ("#include <cmath>\n#include <cstdint>\n", include) if x)
    return f"""// SPDX-License-Identifier: Apache-2.0
// {s.op}: {s.formula}. TODO(author): describe what {s.op} computes.
//
// The one header shared by the {
        "CUDA kernel" if s.cuda_only else "CPU twin, the CUDA kernel"
    } and the binding: {"the math, " if fn else ""}the argument checks
// {"the kernel runs" if s.cuda_only else "both implementations run"} first, and their declarations.
#ifndef {guard}
#define {guard}

{includes}
#include "tvm_ffi_utils.h"

namespace {s.lib} {{

{fn}{"" if not fn else chr(10)}// Step 1 of every {s.op} implementation: TODO(author): the checks of {
        s.op
    }'s arguments.
inline void Check{s.camel}Args({tensor_refs}) {{
{chr(10).join(checks)}
}}

{cpu_decl}#if defined({cuda_guard})
void {s.camel}CUDA({s.cpp_params()});
#endif

}}  // namespace {s.lib}

#endif  // {guard}
"""


def element_count(s: Spec) -> str:
    x = s.inputs[0]
    return f"  const int64_t n = {x}.numel();\n  if (n == 0) return;\n"


def rows_and_cols(s: Spec) -> str:
    x = s.inputs[0]
    return (
        f"  const int64_t cols = {x}.size({x}.ndim() - 1);\n"
        f"  if ({x}.numel() == 0) return;\n"
        f"  const int64_t rows = {x}.numel() / cols;\n"
    )


def cuda_function_head(s: Spec, size: str) -> str:
    """The CUDA function's first steps, for every kind: validate, `size` (the element or row
    counts and the early return), device guard, stream, dtype dispatch, up to the type T."""
    x = s.inputs[0]
    return f"""void {s.camel}CUDA({s.cpp_params()}) {{
  Check{s.camel}Args({", ".join(("out", *s.inputs))});  // 1. validate
{size}  ffi::CUDADeviceGuard guard({x}.device().device_id);  // 2. device guard
  cudaStream_t stream = GetCudaStream({x}.device());   // 3. stream
  DispatchFloating({x}.dtype(), "{x}", [&](auto tag) {{  // 4. dtype dispatch + launch
    using T = typename decltype(tag)::type;
"""


def cuda_source(s: Spec) -> str:
    twin = "" if s.cuda_only else f" The CPU twin is kernels/{s.op}_cpu.cc."
    if s.kind == "custom":
        kernel_params = ", ".join(
            ["int64_t n", "T* __restrict__ out"]
            + [f"const T* __restrict__ {n}" for n in s.inputs]
            + [f"{'bool' if a.type == 'bool' else 'Compute<T>'} {a.name}" for a in s.attrs]
        )
        loads = [f"M::Load({n}[i])" for n in s.inputs]
        value = " + ".join(loads)
        value = f"({value})" if len(loads) > 1 else value
        launch_args = ", ".join(
            ["n", "DataPtr<T>(out)"]
            + [f"DataPtr<const T>({n})" for n in s.inputs]
            + [a.name if a.type == "bool" else f"static_cast<gpu::Compute<T>>({a.name})" for a in s.attrs]
        )
        return f"""// SPDX-License-Identifier: Apache-2.0
// CUDA implementation of {s.op}: a kernel of its own.{twin}
#include <cstdint>

#include "cuda_float.cuh"
#include "{s.op}.h"

namespace {s.lib} {{
namespace gpu {{

// TODO(author): {s.op}'s kernel. One element per thread in a grid-stride loop, 64-bit indices;
// values are loaded into the compute type (float for 16-bit storage) and stored back rounded.
template <typename T>
__global__ void {s.camel}Kernel({kernel_params}) {{
  using M = FloatMath<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {{
    out[i] = M::Store({s.cpp_scaled(value)});
  }}
}}

}}  // namespace gpu

{cuda_function_head(s, element_count(s))}    constexpr int kThreads = 256;
    gpu::{s.camel}Kernel<T><<<gpu::GridSize(n, kThreads), kThreads, 0, stream>>>({launch_args});
    CHECK_CUDA_LAUNCH();  // 5. check
  }});
}}

}}  // namespace {s.lib}
"""
    if s.kind == "scan":
        launcher, size = "scan.cuh", rows_and_cols(s)
        launch = f"gpu::LaunchScan<T>({s.fn_init()}, rows, cols, {REVERSE}, stream, {s.data_ptrs()});"
        shared = "the shared scan launcher (kernels/scan.cuh: a scheme per shape)"
    elif s.kind == "rows":
        launcher, size = "rowwise.cuh", rows_and_cols(s)
        launch = f"gpu::LaunchRowwise<T>({s.fn_init()}, rows, cols, stream, {s.data_ptrs()});"
        shared = "the shared row-wise launcher (kernels/rowwise.cuh)"
    else:
        launcher, size = "elementwise.cuh", element_count(s)
        launch = f"gpu::LaunchElementwise<T>({s.fn_init()}, n, stream, {s.data_ptrs()});"
        shared = "the shared elementwise launcher (kernels/elementwise.cuh)"
    return f"""// SPDX-License-Identifier: Apache-2.0
// CUDA implementation of {s.op}: the math is {s.camel}Fn (kernels/{s.op}.h), run by
// {shared}.{twin}
#include <cstdint>

#include "{launcher}"
#include "{s.op}.h"

namespace {s.lib} {{

{cuda_function_head(s, size)}    using C = gpu::Compute<T>;
    {launch}
  }});  // 5. check: inside the launcher
}}

}}  // namespace {s.lib}
"""


def triton_source(s: Spec) -> str:
    """kernels/triton/NAME.py: the kernel, and the specialisations the build compiles."""
    pointers = ["out_ptr", *(f"{n}_ptr" for n in s.inputs)]
    params = ", ".join(
        [*pointers, *(a.name for a in s.attrs), "n", "BLOCK: tl.constexpr", "COMPUTE: tl.constexpr"]
    )
    loads = "".join(f"        {n} = tl.load({n}_ptr + offsets, mask=mask).to(COMPUTE)\n" for n in s.inputs)
    value = " + ".join(s.inputs)
    value = f"({value})" if len(s.inputs) > 1 else value
    factors = [f"{a.name}.to(COMPUTE)" for a in s.attrs if a.type != "bool"]
    expr = " * ".join([value, *factors])
    flips = "".join(
        f"        out = tl.where({a.name} != 0, -out, out)\n" for a in s.attrs if a.type == "bool"
    )
    signature = ", ".join(
        [
            *(f'"{p}": f"*{{short}}"' for p in pointers),
            *(f'"{a.name}": "{TRITON_ATTR_TYPES[a.type]}"' for a in s.attrs),
            '"n": "i64"',
        ]
    )
    aligned = ", ".join(f'"{p}"' for p in [*pointers, "n"])
    formula = "\n".join(textwrap.wrap(s.formula, 96, break_long_words=False, break_on_hyphens=False))
    return f'''# SPDX-License-Identifier: Apache-2.0
"""{s.op} in Triton (scaffolded by tools/new_op.py), elementwise:
{formula}

Compiled ahead of time by the build (tools/triton_aot.py) for every CUDA architecture of the build
plus PTX, into the library: no Triton at run time. Its launcher is kernels/triton/{s.op}.cu; the
CPU twin is kernels/{s.op}_cpu.cc, with the same math in kernels/{s.op}.h. See docs/triton.md.
"""

import triton
import triton.language as tl


@triton.jit
def {s.op}_kernel({params}):
    # One block of BLOCK elements per program, in a grid-stride loop; 64-bit offsets.
    start = tl.program_id(0).to(tl.int64) * BLOCK
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    for block in range(start, n, step):
        offsets = block + tl.arange(0, BLOCK)
        mask = offsets < n
{loads}        # TODO(author): {s.op}'s math, in COMPUTE (float32; float64 for float64 inputs), the
        # same as {s.camel}Fn in kernels/{s.op}.h (the CPU twin).
        out = {expr}
{flips}        tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


# What the build compiles: one entry point per dtype and layout ("aligned": every pointer 16-byte
# aligned and n a multiple of 16, for wide loads; "any": every call). The launcher picks one.
BLOCK = 1024
DTYPES = {{"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}}


def _specializations():
    for dtype, short in DTYPES.items():
        compute = tl.float64 if dtype == "float64" else tl.float32
        for layout, aligned in (("aligned", True), ("any", False)):
            yield f"{s.op}_{{dtype}}_{{layout}}", {{
                "kernel": {s.op}_kernel,
                "signature": {{{signature}}},
                "constexprs": {{"BLOCK": BLOCK, "COMPUTE": compute}},
                "multiple_of_16": ({aligned}) if aligned else (),
                "num_warps": 4,
            }}


SPECIALIZATIONS = dict(_specializations())
'''


def triton_launcher(s: Spec) -> str:
    """kernels/triton/NAME.cu: validate, device guard, stream, pick the entry point, launch."""
    x = s.inputs[0]
    pointers = ["out", *s.inputs]
    ptr_decls = "".join(f"    void* {n}_ptr = DataPtr<T>({n});\n" for n in pointers)
    scalar_decls = "".join(
        f"    const int32_t {a.name}_arg = {a.name} ? 1 : 0;\n" for a in s.attrs if a.type == "bool"
    )
    args = (
        [f"{n}_ptr" for n in pointers]
        + [f"{a.name}_arg" if a.type == "bool" else a.name for a in s.attrs]
        + ["n"]
    )
    aligned = " && ".join(f"gpu::IsAligned({n}_ptr, 16)" for n in pointers)
    head = cuda_function_head(s, element_count(s))
    return f"""// SPDX-License-Identifier: Apache-2.0
// CUDA {s.op}: the Triton kernel of {s.op}.py (scaffolded by tools/new_op.py), compiled ahead of
// time and embedded by the build ({s.op}_triton.h is generated), launched on the caller's stream
// by the shared Triton launcher (include/triton_launcher.h). Compiled only when the build has
// Triton; the CPU twin is kernels/{s.op}_cpu.cc.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_float.cuh"
#include "{s.op}.h"
#include "{s.op}_triton.h"
#include "triton_launcher.h"

namespace {s.lib} {{
namespace {{

constexpr int64_t kBlock = 1024;          // BLOCK in {s.op}.py
constexpr int64_t kMaxPrograms = 65536;   // the kernel loops over the rest

// The entry point {s.op}_<dtype>_<layout>, loaded once per process.
template <typename T>
TritonKernel Load(const char* layout) {{
  const std::string entry = std::string("{s.op}_") + DTypeName<T>() + "_" + layout;
  return TritonKernel(FindTritonKernel(k{s.camel}TritonKernels, entry));
}}

template <typename T>
const TritonKernel& Kernel(bool aligned) {{
  static const TritonKernel kernels[] = {{Load<T>("any"), Load<T>("aligned")}};
  return kernels[aligned];
}}

}}  // namespace

{head}{ptr_decls}{scalar_decls}    const bool aligned = n % 16 == 0 && {aligned};
    const tvm::ffi::dim3 grid(static_cast<unsigned>(std::min((n + kBlock - 1) / kBlock, kMaxPrograms)));
    // The kernel's arguments in its order; 5. the launcher checks the launch.
    Kernel<T>(aligned).Launch(grid, {x}.device(), stream, {", ".join(args)});
  }});
}}

}}  // namespace {s.lib}
"""


def cpu_source(s: Spec) -> str:
    x = s.inputs[0]
    if s.kind == "custom":
        loads = [f"M::Load({n}s[i])" for n in s.inputs]
        value = " + ".join(loads)
        value = f"({value})" if len(loads) > 1 else value
        pointers = "".join(f"    const T* {n}s = DataPtr<const T>({n});\n" for n in s.inputs)
        scalars = "".join(
            f"    const C {a.name}_c = static_cast<C>({a.name});\n" for a in s.attrs if a.type != "bool"
        )
        renamed = Spec(
            s.op,
            s.lib,
            s.inputs,
            tuple(Attr(a.name if a.type == "bool" else f"{a.name}_c", a.type) for a in s.attrs),
            s.kind,
            s.cuda_only,
            s.lang,
        )
        return f"""// SPDX-License-Identifier: Apache-2.0
// CPU twin of {s.cuda_kernel}: a loop of its own.
#include <cstdint>

#include "cpu_float.h"
#include "{s.op}.h"

namespace {s.lib} {{

void {s.camel}CPU({s.cpp_params()}) {{
  Check{s.camel}Args({", ".join(("out", *s.inputs))});
  const int64_t n = {x}.numel();
  if (n == 0) return;
  DispatchFloating({x}.dtype(), "{x}", [&](auto tag) {{
    using T = typename decltype(tag)::type;
    using M = host::FloatMath<T>;
    using C = host::Compute<T>;
    T* outs = DataPtr<T>(out);
{pointers}{scalars}    // TODO(author): {s.op}'s math, per element, in the compute type C.
    for (int64_t i = 0; i < n; ++i) outs[i] = M::Store({renamed.cpp_scaled(value)});
  }});
}}

}}  // namespace {s.lib}
"""
    if s.kind == "scan":
        launcher, size = "scan_cpu.h", rows_and_cols(s)
        launch = f"host::RunScan<T>({s.fn_init()}, rows, cols, {REVERSE}, {s.data_ptrs()});"
        shared = "scan"
    elif s.kind == "rows":
        launcher, size = "rowwise_cpu.h", rows_and_cols(s)
        launch = f"host::RunRowwise<T>({s.fn_init()}, rows, cols, {s.data_ptrs()});"
        shared = "row-wise"
    else:
        launcher, size = "elementwise_cpu.h", element_count(s)
        launch = f"host::RunElementwise<T>({s.fn_init()}, n, {s.data_ptrs()});"
        shared = "elementwise"
    return f"""// SPDX-License-Identifier: Apache-2.0
// CPU twin of {s.cuda_kernel}: {s.camel}Fn (kernels/{s.op}.h), run by the shared CPU {shared} launcher.
#include <cstdint>

#include "{launcher}"
#include "{s.op}.h"

namespace {s.lib} {{

void {s.camel}CPU({s.cpp_params()}) {{
  Check{s.camel}Args({", ".join(("out", *s.inputs))});
{size}  DispatchFloating({x}.dtype(), "{x}", [&](auto tag) {{
    using T = typename decltype(tag)::type;
    using C = host::Compute<T>;
    {launch}
  }});
}}

}}  // namespace {s.lib}
"""


def binding(s: Spec) -> str:
    x, args = s.inputs[0], s.cpp_args()
    cuda_call = f"{s.camel}CUDA({args})"
    if s.lang == "triton":  # a ValueError naming the op in a build without Triton
        cuda_call = f'{s.macro}_TRITON_CALL({cuda_call}, "{s.op}")'
    if s.cuda_only:
        route = f"{s.macro}_ROUTE_CUDA_ONLY({x}, {cuda_call});"
    else:
        route = f"{s.macro}_ROUTE_BY_DEVICE({x}, {s.camel}CPU({args}), {cuda_call});"
    in_place = ", ".join(f"out={n}" for n in s.inputs)
    params = s.cpp_params()
    if s.cuda_only:  # a CPU-only build compiles no CUDA call: only the routed tensor is used there
        params = ", ".join(
            p if p == f"ffi::TensorView {x}" else f"[[maybe_unused]] {p}" for p in params.split(", ")
        )
    inputs = ", ".join(s.abi_names[1:])
    return f"""// SPDX-License-Identifier: Apache-2.0
// ABI of {s.op}: {s.op}({args}). Routing only; the math is in kernels/.
#include "{s.op}.h"

namespace {s.lib} {{

void {s.camel}({params}) {{
  {route}
}}

}}  // namespace {s.lib}

// {s.op}({args}): writes out, which may be {" or ".join(s.inputs)} itself (in-place).
{s.macro}_EXPORT({s.op}, {s.lib}::{s.camel}, "out", "{inputs}", "{in_place}");
"""


# ---------------------------------------------------------------------------------------------
# Python
# ---------------------------------------------------------------------------------------------
def ops_section(s: Spec) -> str:
    first = s.inputs[0]
    inputs = ", ".join(
        f'Input("{n}", min_ndim=1)' if s.rows_like and n == first else f'Input("{n}")' for n in s.inputs
    )
    attrs = ", ".join(f'Attr("{a.name}", {a.type})' for a in s.attrs)
    lines = [f'        "{s.op}",', f"        inputs=({inputs}{',' if len(s.inputs) == 1 else ''}),"]
    if s.attrs:
        lines.append(f"        attrs=({attrs},),")
    if first != "x":  # the output is like the first input (Output's default names x)
        lines.append(f'        output=Output(like="{first}"),')
    lines.append(f"        vjp=_{s.op}_vjp,")
    if s.cuda_only:
        lines.append('        devices=("cuda",),')
    # A scan, like a row-wise op, needs whole rows: its leading dimensions may be sharded (and
    # batched by jax.vmap as more rows), its last one not.
    sharding = {"custom": "None", "scan": "'rows'"}.get(s.kind, repr(s.kind))
    lines.append(f"        sharding={sharding},")
    if s.lang == "triton":
        lines.append("        triton=True,")
    params = ", ".join(
        [f"{n}: ArrayT" for n in s.inputs]
        + [f"{a.name}: {a.type}" + (" = False" if a not in s.math_attrs else "") for a in s.attrs]
        + ["*", "out: ArrayT | None = None"]
    )
    vjp_params = ", ".join(
        ["grad: Any", "out: Any", *(f"{n}: Any" for n in s.inputs), *(f"{a.name}: {a.type}" for a in s.attrs)]
    )
    n = len(s.inputs)
    if s.kind == "scan" and SCAN_OPS[s.scan_op][2]:
        helper = SCAN_OPS[s.scan_op][2]
        others = "".join(", nil" for _ in s.inputs[1:])
        nil = "    nil = array_namespace(grad).zeros_like(grad)\n" if n > 1 else ""
        neutral = "".join(
            f", {'False' if a.type == 'bool' else ('1' if a.type == 'int' else '1.0')}" for a in s.math_attrs
        )
        vjp = f"""    # out = a * p, p = the scan of v = {s.py_value()} ({SCAN_OPS[s.scan_op][0]}), a: the
    # attributes; the scan's vjp is {helper} (docs/scan.md), given the scan alone: {s.op}
    # with its attributes neutral (edit with the math).
    from ._scan_vjp import {helper}

{nil}    def scan(a: Any, backward: bool) -> Any:
        return {s.op}(a{others}{neutral}, {REVERSE}=backward)

    v = {s.py_value()}
    g = {helper}({s.py_scaled("grad")}, scan(v, {REVERSE}), v, scan, {REVERSE})
    return {"(g,)" if n == 1 else "(" + ", ".join(["g"] * n) + ")"}
"""
    elif s.kind == "scan":
        others = "".join(", zeros" for _ in s.inputs[1:])
        zeros = "    zeros = array_namespace(grad).zeros_like(grad)\n" if n > 1 else ""
        math = ", ".join(a.name for a in s.math_attrs)
        vjp = f"""    # out[..., i] sums the values of the row up to i ({REVERSE}: from i to the end), so the
    # value at j reaches every out[..., i] with i >= j ({REVERSE}: i <= j): its gradient is the
    # scan of grad the other way, which {s.op} itself computes (also differentiable).
{zeros}    g = {s.op}(grad{others}{", " + math if math else ""}, {REVERSE}=not {REVERSE})
    return {"(g,)" if n == 1 else "(" + ", ".join(["g"] * n) + ")"}
"""
    elif s.kind == "rows":
        vjp = f"""    # v = {s.py_value()}; out = a * v * r, r = 1 / sqrt(mean(v**2) + 1), a: the attributes.
    # dout/dv = a * (r * grad - r**3 * v * mean(grad * v)), the same for every input.
    xp = array_namespace({first})
    v = {s.py_value()}
    cols = v.shape[-1]
    sum_vv, sum_gv = xp.sum(v * v, axis=-1), xp.sum(grad * v, axis=-1)  # keepdims: not in Paddle
    r = 1 / xp.sqrt(xp.reshape(sum_vv, (*sum_vv.shape, 1)) / cols + 1)
    g = {s.py_scaled("(r * grad - r**3 * v * xp.reshape(sum_gv, (*sum_gv.shape, 1)) / cols)")}
    return {"(g,)" if n == 1 else "(" + ", ".join(["g"] * n) + ")"}
"""
    else:
        said = f"out = {s.py_scaled(s.py_value())}: the same gradient for every input."
        comment = "".join(f"    # {line}\n" for line in textwrap.wrap(said, 100))
        vjp = f"""{comment}    g = {s.py_scaled("grad")}
    return {"(g,)" if n == 1 else "(" + ", ".join(["g"] * n) + ")"}
"""
    described = "".join(
        f"        {n}: A contiguous float16, bfloat16, float32 or float64 array"
        + ("" if i == 0 else f" like ``{first}``")
        + (" of 1 or more dimensions" if s.rows_like and i == 0 else "")
        + ".\n"
        for i, n in enumerate(s.inputs)
    ) + "".join(
        f"        {a.name}: "
        + (
            "Scan from the end of each row instead (default: from its start).\n"
            if a not in s.math_attrs
            else f"A Python {a.type}.\n"
        )
        for a in s.attrs
    )
    call_inputs = f"({s.inputs[0]},)" if len(s.inputs) == 1 else f"({', '.join(s.inputs)})"
    names = [a.name for a in s.attrs]
    call_attrs = f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"
    device = "CUDA GPUs only (a CPU array is a ValueError)" if s.cuda_only else "the CPU and CUDA GPUs"
    may_be = " or ".join(f"``{n}``" for n in s.inputs)
    # The formula as the summary, wrapped to the line length (a scan's with a bool attribute is
    # longer than one line); an inline literal may span lines.
    summary = "\n    ".join(textwrap.wrap(f"``{s.formula}``.", 100, break_long_words=False))
    return f'''# ===== op: {s.op} =====
# Scaffolded by tools/new_op.py ({s.kind}{", CUDA only" if s.cuda_only else ""}): edit the vjp and the
# docstring with the kernels.
def _{s.op}_vjp({vjp_params}) -> tuple[Any, ...]:
{vjp}

_{s.op} = register(
    OpSpec(
{chr(10).join(lines)}
    )
)


def {s.op}({params}) -> ArrayT:
    """{summary}

    TODO(author): describe what {s.op} computes.
    Runs on {device}.

    Args:
{described}        out: Optional array to write into, like ``{first}`` (may be {may_be}; not for JAX).

    Returns:
        ``out``, or a new array like ``{first}``. Differentiable (PyTorch, JAX, Paddle).
    """
    return _{s.op}.call({call_inputs}, {call_attrs}, out)


'''


def add_to_ops(path: Path, s: Spec) -> None:
    text = path.read_text()
    end = "# ===== end of ops ====="
    if end not in text:
        sys.exit(f"error: {path} has no '{end}' line")
    section = ops_section(s)
    text = text.replace(end, section + end, 1)
    text = _import(text, "typing", "Any")
    for name in (
        "OpSpec",
        "Input",
        *(["Attr"] if s.attrs else []),
        *(["Output"] if s.inputs[0] != "x" else []),
    ):
        text = _import(text, "._spec", name)
    if s.kind == "rows" or (s.kind == "scan" and len(s.inputs) > 1):
        text = _import(text, "._namespace", "array_namespace")
    path.write_text(text)


def _import(text: str, module: str, name: str) -> str:
    """``text`` (ops.py) importing ``name`` from ``module``: added to its import line, or a new
    line before ``from ._spec import``."""
    m = _import_statement(text, module)
    if m is None:
        return text.replace("from ._spec import", f"from {module} import {name}\nfrom ._spec import", 1)
    names = sorted({*_imported_names(m), name})
    return text.replace(m.group(0), f"from {module} import {', '.join(names)}", 1)


def _import_statement(text: str, module: str) -> re.Match[str] | None:
    """``from <module> import ...`` in ``text``, on one line or in parentheses over several (as
    the formatter wraps a long one)."""
    return re.search(rf"^from {re.escape(module)} import (?:\(([^)]*)\)|(.+))$", text, re.MULTILINE)


def _imported_names(statement: re.Match[str]) -> list[str]:
    listed = statement.group(1) if statement.group(1) is not None else statement.group(2)
    return [n.strip() for n in listed.split(",") if n.strip()]


def add_to_init(init: Path, op: str) -> None:
    text = init.read_text()
    imports = _import_statement(text, ".ops")
    assert imports is not None, f"{init}: no 'from .ops import' statement"
    names = sorted({*_imported_names(imports), op})
    statement = runpy.run_path(str(ROOT / "tools" / "remove_op.py"))["import_statement"]
    text = text.replace(imports.group(0), statement("from .ops import ", names).rstrip("\n"))
    listing = re.search(r"__all__ = \[(.*?)\]", text, re.DOTALL)
    assert listing is not None, f"{init}: no __all__"
    # Ruff's order for __all__ (RUF022): constants, then classes, then the rest, each by name.
    exported = sorted(
        {*re.findall(r'"([^"]+)"', listing.group(1)), op},
        key=lambda n: (0 if n.isupper() else 1 if n[:1].isupper() else 2, n),
    )
    body = "".join(f'    "{name}",\n' for name in exported)
    init.write_text(text.replace(listing.group(0), f"__all__ = [\n{body}]"))


def add_readme_row(readme: Path, s: Spec) -> None:
    attrs = [a.name if a in s.math_attrs else f"{a.name}=False" for a in s.attrs]  # as ops.py declares them
    signature = ", ".join([*s.inputs, *attrs, "*", "out=None"])
    pattern = {
        "elementwise": "an elementwise op",
        "rows": "a row-wise op",
        "scan": "a scan along the last dimension",
        "custom": "an op with kernels of its own",
    }
    where = " (CUDA only)" if s.cuda_only else ""
    where += ", in Triton" if s.lang == "triton" else ""
    append_readme_row(
        readme, f"| `{s.op}({signature})` | `{s.formula}` | {pattern[s.kind]}{where} (scaffolded) |\n"
    )


def append_readme_row(readme: Path, row: str) -> bool:
    """``row`` at the end of the README's op table (the ops' order in ops.py); False if none."""
    text = readme.read_text()
    head, sep, rest = text.partition("## The ops")
    table_rows = list(re.finditer(r"^\| `\w+\(.*\n", rest, re.MULTILINE))
    if not sep or not table_rows:
        return False
    at = table_rows[-1].end()
    readme.write_text(head + sep + rest[:at] + row + rest[at:])
    return True


def docs_page(s: Spec) -> str:
    cuda_files = (
        [f"kernels/triton/{s.op}.py", f"kernels/triton/{s.op}.cu"]
        if s.lang == "triton"
        else [f"kernels/{s.op}.cu"]
    )
    files = [f"kernels/{s.op}.h", *cuda_files] + ([] if s.cuda_only else [f"kernels/{s.op}_cpu.cc"])
    where = {
        "elementwise": f"the function object `{s.camel}Fn` in `kernels/{s.op}.h`, run by the shared "
        "elementwise launchers",
        "rows": f"the function object `{s.camel}Fn` in `kernels/{s.op}.h` (`Value`, `Term`, `Finish`), run "
        "by the shared row-wise launchers",
        "scan": f"the function object `{s.camel}Fn` in `kernels/{s.op}.h` (`Value`, `Finish`), run by "
        "the shared scan launchers ([a scan along the last dimension](../scan.md))",
        "custom": f"its own kernels in {', '.join(f'`{f}`' for f in files[1:])}",
    }[s.kind]
    devices = "CUDA GPUs only: a CPU array is a `ValueError`" if s.cuda_only else "the CPU and CUDA GPUs"
    triton = (
        "\nIts CUDA kernel is written in Triton, compiled ahead of time into the library (see\n"
        "[Writing a kernel in Triton](../triton.md)); the CPU kernel is its C++ twin.\n"
        if s.lang == "triton"
        else ""
    )
    if s.lang == "triton":
        where = (
            f"`{s.op}_kernel` in `kernels/triton/{s.op}.py` (CUDA) and `{s.camel}Fn` in "
            f"`kernels/{s.op}.h` (CPU)"
        )
    return f"""# `{s.op}`

`{s.lib}.{s.op}` computes `{s.formula}` (TODO(author): say what it computes and the pattern it
shows), on {devices}.
{triton}
The math is {where}; the sources are {", ".join(f"`{f}`" for f in files)} and
`bindings/{s.op}_binding.cc`, the declaration is its section of `python/{s.lib}/ops.py`, and its
tests are `tests/test_{s.op}.py`.
"""


def test_file(s: Spec) -> str:
    first, n = s.inputs[0], len(s.inputs)
    attr_consts = "".join(f"{a.name.upper()} = {a.example}\n" for a in s.attrs)
    attr_args = "".join(f", {a.name.upper()}" for a in s.attrs)
    ref_params = ", ".join(
        [*(f"{x}: np.ndarray" for x in s.inputs), *(f"{a.name}: {a.type}" for a in s.attrs)]
    )
    value = s.py_value()
    if s.kind == "scan":
        running = SCAN_OPS[s.scan_op][1]
        if s.scan_op == "sum":
            head = f"    # {REVERSE}: from the end of each row\n"
            expr = f"np.flip({running}(np.flip(v, -1), axis=-1), -1) if {REVERSE} else {running}(v, axis=-1)"
        else:  # a product may leave float64's range too
            head = (
                '    with np.errstate(over="ignore"):\n'
                f"        prefix = {running}(np.flip(v, -1) if {REVERSE} else v, axis=-1)\n"
                f"    # {REVERSE}: from the end of each row\n"
            )
            expr = f"np.flip(prefix, -1) if {REVERSE} else prefix"
        scaled = s.py_scaled("prefix")
        last = f"    return {expr}\n" if scaled == "prefix" else f"    prefix = {expr}\n    return {scaled}\n"
        body = f"    v = {value}\n{head}{last}"
        shapes = "[(1,), (7,), (3, 5), (0, 4), (4, 0), (2, 3, 257), (3, 4097), (1000, 16)]"
    elif s.kind == "rows":
        body = (
            f"    v = {value}\n"
            "    mean_square = np.sum(v * v, axis=-1, keepdims=True) / max(v.shape[-1], 1)\n"
            f"    return {s.py_scaled('v')} / np.sqrt(mean_square + 1)\n"
        )
        shapes = "[(1,), (7,), (3, 5), (0, 4), (4, 0), (2, 3, 257), (3, 4097), (1000, 16)]"
    else:
        body = f"    return {s.py_scaled(value)}\n"
        shapes = "[(), (0,), (1,), (7,), (255,), (257,), (4097,), (2**20 + 3,), (3, 5), (2, 3, 4)]"
    inputs_tuple = ", ".join(f'"{x}"' for x in s.inputs) + ("," if n == 1 else "")
    lam = ", ".join(s.inputs)
    make_inputs = "".join(
        f"    {x} = backend.asarray(random_data(shape, seed={i + 1} + sum(shape)), dtype)\n"
        for i, x in enumerate(s.inputs)
    )
    as64 = ", ".join(f"backend.to_numpy({x})" for x in s.inputs)
    names64 = ", ".join(f"{x}64" for x in s.inputs)
    unchanged = "".join(
        f"    np.testing.assert_array_equal(backend.to_numpy({x}), {x}64)\n" for x in s.inputs
    )
    min_dims = 1 if s.rows_like else 0
    case_extra = "\n    reduction=True," if s.rows_like else ""
    cpu_only_tests = ""
    if s.cuda_only:
        cpu_only_tests = f"""

# A CUDA-only op: every framework gets the library's ValueError for a CPU array, eagerly, under
# jax.jit and through autograd. These run without a GPU.
CPU_BACKENDS = [b for b in ALL_BACKENDS if b.device == "cpu"]


@pytest.mark.parametrize("backend", backend_params(CPU_BACKENDS), indirect=True)
def test_{s.op}_refuses_cpu_arrays(backend: Backend) -> None:
    arrays = [backend.asarray(np.ones((2, 3)), "float32") for _ in range({n})]
    # A NumPy caller is told that the array is NumPy's (always on the CPU), as a JAX caller is.
    said = "{s.inputs[0]} is a NumPy array .*" if backend.framework == "numpy" else ""
    with pytest.raises(ValueError, match=said + "only a CUDA implementation"):
        backend.run(lambda *a: {s.lib}.{s.op}(*a{attr_args}), *arrays)
    if backend.framework == "torch":  # through the PyTorch custom op (autograd)
        arrays[0].requires_grad_()
        with pytest.raises(ValueError, match="only a CUDA implementation"):
            {s.lib}.{s.op}(*arrays{attr_args})
"""
    text = f'''"""{s.op}: a framework x device x dtype x shape matrix against a float64 reference, gradients
and a property test (scaffolded by tools/new_op.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from backends import ALL_BACKENDS, DTYPES, Backend, backend_out_params, backend_params, check_native, shape_id
from cases import OpCase, built_devices
from hypothesis import given
from hypothesis import strategies as st
from properties import PROFILE_SETTINGS, _dtypes_for, float_arrays, shapes
from reference import random_data

import {s.lib}
from {s.lib}.ops import OPS


# ---- What the author edits: the float64 reference and the tolerances, nothing else. --------
def reference({ref_params}) -> np.ndarray:
    """{s.op} in float64, from the float64 values of the inputs as stored."""
{body}

# (rtol, atol) of the results per dtype, against the reference. These allow a few roundings in
# the compute type (float32 for 16-bit inputs); math with exp or tanh needs about 1e-6 relative
# in float32.
TOLERANCES = {{
    "float16": (2e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (3e-5, 1e-6),
    "float64": (1e-12, 1e-14),
}}
MAX_ABS = 16.0  # inputs of the property test are within [-MAX_ABS, MAX_ABS]
# Example values of the scalar arguments.
{attr_consts}# ----------------------------------------------------------------------------------------------

DEVICES = built_devices(next(spec for spec in OPS if spec.name == "{s.op}"))
BACKENDS = tuple(b for b in ALL_BACKENDS if b.device in DEVICES)
SHAPES = {shapes}
NAN = float("nan")
DIFFERENTIABLE = [b for b in BACKENDS if b.framework in ("torch", "jax", "paddle")]

# The example call the cross-cutting suites (bad input, threads, lifetimes, the ABI) make.
CASE = OpCase(
    "{s.op}",
    ({inputs_tuple}),
    lambda {lam}, out=None: {s.lib}.{s.op}({lam}{attr_args}, out=out),
    reference=lambda {lam}: reference({lam}{attr_args}),
    exports={{"{s.op}": {len(s.abi_names)}}},{case_extra}
)


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    rtol, atol = TOLERANCES[dtype]
    assert actual.shape == expected.shape, f"shape {{actual.shape}} != {{expected.shape}}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("backend", "out_mode"), backend_out_params(BACKENDS), indirect=["backend"])
def test_{s.op}_matches_reference(backend: Backend, out_mode: str, dtype: str, shape) -> None:
{make_inputs}    {names64} = {as64}
    if out_mode == "out":
        buffer, out = backend.guarded_out(shape, dtype, sentinel=NAN)
        assert backend.run({s.lib}.{s.op}, {lam}{attr_args}, out=out) is out
        guards = backend.to_numpy(buffer)
        assert np.isnan(guards[:16]).all() and np.isnan(guards[-16:]).all(), "stray write"
        result = out
    else:
        result = backend.run({s.lib}.{s.op}, {lam}{attr_args})
        check_native(backend, result, dtype, shape)
    assert_close(backend.to_numpy(result), reference({names64}{attr_args}), dtype)
{unchanged}

@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
def test_{s.op}_rejects_bad_input(backend: Backend) -> None:
    good = [backend.asarray(np.ones((2, 3)), "float32") for _ in range({n})]
    with pytest.raises(TypeError, match="{first} has unsupported dtype int32"):
        backend.run({s.lib}.{s.op}, backend.asarray(np.ones((2, 3)), "int32"), *good[1:]{attr_args})
    with pytest.raises(TypeError, match="{first} must be an array"):
        {s.lib}.{s.op}([1.0, 2.0], *good[1:]{attr_args})


@pytest.mark.parametrize("backend", backend_params(DIFFERENTIABLE), indirect=True)
def test_{s.op}_gradients(backend: Backend) -> None:
    """The op's vjp against central differences of the float64 reference."""
    shape = (3, 4)
    data = [random_data(shape, seed=10 + i) for i in range({n})]
    weights = random_data(shape, seed=20)  # the gradient flowing in
    arrays = [backend.asarray(d, "float64") for d in data]
    grad_in = backend.asarray(weights, "float64")
    if backend.framework == "torch":
        for a in arrays:
            a.requires_grad_()
        {s.lib}.{s.op}(*arrays{attr_args}).backward(grad_in)
        grads = [a.grad for a in arrays]
    elif backend.framework == "jax":
        import jax

        _, pullback = jax.vjp(lambda *a: {s.lib}.{s.op}(*a{attr_args}), *arrays)
        grads = list(pullback(grad_in))
    else:
        for a in arrays:
            a.stop_gradient = False
        {s.lib}.{s.op}(*arrays{attr_args}).backward(grad_in)
        grads = [a.grad for a in arrays]
    h = 1e-6
    for i, g in enumerate(grads):
        expected = np.empty(shape)
        for j in np.ndindex(*shape):
            up, down = [a.copy() for a in data], [a.copy() for a in data]
            up[i][j] += h
            down[i][j] -= h
            change = reference(*up{attr_args}) - reference(*down{attr_args})
            expected[j] = np.sum(change * weights) / (2 * h)
        np.testing.assert_allclose(backend.to_numpy(g), expected, rtol=1e-5, atol=1e-7, err_msg=f"{{i}}")
{cpu_only_tests}

# -- properties (Hypothesis; shared machinery in properties.py) ------------------------------
@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
@PROFILE_SETTINGS
@given(data=st.data())
def test_{s.op}_property(backend: Backend, data) -> None:
    dtype = data.draw(st.sampled_from(_dtypes_for(backend)), label="dtype")
    shape = data.draw(shapes(min_dims={min_dims}), label="shape")
    values = [
        data.draw(float_arrays(shape, dtype, max_abs=MAX_ABS, min_abs=2.0**-8), label=name)
        for name in CASE.arrays
    ]
    arrays = [backend.asarray(v, dtype) for v in values]
    stored = [backend.to_numpy(a) for a in arrays]
    result = backend.run({s.lib}.{s.op}, *arrays{attr_args})
    check_native(backend, result, dtype, shape)
    assert_close(backend.to_numpy(result), reference(*stored{attr_args}), dtype)
    for a, before in zip(arrays, stored, strict=True):
        np.testing.assert_array_equal(backend.to_numpy(a), before)
    assert math.prod(shape) == backend.to_numpy(result).size
'''
    if s.kind == "scan":
        text = _scan_tests(s, text)
    return text


def _scan_tests(s: Spec, text: str) -> str:
    """A scan's tests: tolerances for a running sum, and the reverse direction."""
    math_args = "".join(f", {a.name.upper()}" for a in s.math_attrs)
    text = text.replace(
        """# (rtol, atol) of the results per dtype, against the reference. These allow a few roundings in
# the compute type (float32 for 16-bit inputs); math with exp or tanh needs about 1e-6 relative
# in float32.
TOLERANCES = {
    "float16": (2e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (3e-5, 1e-6),
    "float64": (1e-12, 1e-14),
}""",
        """# (rtol, atol) of the results per dtype, against the reference: rtol for the rounding of the
# result, atol per unit of what the running sum has added (the same scan of |values|), as a sum's
# rounding error grows with its terms, not with its result, which cancellation can make small:
# a few roundings in the compute type (float32 for 16-bit inputs) per sqrt(row length).
TOLERANCES = {
    "float16": (2e-3, 2e-5),
    "bfloat16": (1.6e-2, 2e-5),
    "float32": (3e-5, 2e-5),
    "float64": (1e-12, 1e-13),
}""",
    )
    text = text.replace(
        """def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    rtol, atol = TOLERANCES[dtype]
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)""",
        """def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str, added: np.ndarray) -> None:
    rtol, atol = TOLERANCES[dtype]
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    bound = rtol * np.abs(expected) + atol * np.abs(added)  # added: the scan of |values|
    close = (actual == expected) | (np.abs(actual - expected) <= bound)
    close |= np.isnan(actual) & np.isnan(expected)
    where = np.argwhere(~close)
    assert where.size == 0, (
        f"{len(where)} of {actual.size} elements differ; first at {tuple(where[0])}: "
        f"{actual[tuple(where[0])]} != {expected[tuple(where[0])]} (bound {bound[tuple(where[0])]:.3g})"
    )""",
    )
    if s.scan_op != "sum":  # a product or exponential leaves the dtype's range where float64 does not
        old = """    bound = rtol * np.abs(expected) + atol * np.abs(added)  # added: the scan of |values|
    close = (actual == expected) | (np.abs(actual - expected) <= bound)"""
        assert old in text
        text = text.replace(
            old,
            """    # Beyond the dtype's largest value the result is inf; below its smallest normal one, the
    # absolute error is up to that (subnormals and zeros), as a product underflows.
    tiny, huge = RANGE[dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        expected = np.where(np.abs(expected) > huge, np.copysign(np.inf, expected), expected)
        bound = rtol * np.abs(expected) + atol * np.abs(added) + tiny  # added: the scan of |values|
        close = (actual == expected) | (np.abs(actual - expected) <= bound)""",
        )
        old = "MAX_ABS = "
        assert old in text
        text = text.replace(
            old,
            "# The smallest normal and the largest finite value of each dtype.\n"
            "RANGE = {\n"
            '    "float16": (6.2e-5, 65504.0),\n'
            '    "bfloat16": (1.2e-38, 3.38e38),\n'
            '    "float32": (1.2e-38, 3.4e38),\n'
            '    "float64": (2.3e-308, 1.79e308),\n'
            "}\n" + old,
            1,
        )
    names64 = ", ".join(f"{x}64" for x in s.inputs)
    attr_args = "".join(f", {a.name.upper()}" for a in s.attrs)
    lam = ", ".join(s.inputs)
    old = "    reduction=True,\n)"
    assert old in text
    text = text.replace(
        old,
        "    reduction=True,\n"
        f"    error_scale=lambda {lam}: reference(*map(np.abs, ({lam},)){attr_args}),  # see TOLERANCES\n)",
    )
    old = f"reference({names64}{attr_args}), dtype)"
    assert old in text
    text = text.replace(
        old, f"reference({names64}{attr_args}), dtype, reference(*map(np.abs, ({names64},)){attr_args}))"
    )
    old = f"reference(*stored{attr_args}), dtype)"
    assert old in text
    text = text.replace(
        old, f"reference(*stored{attr_args}), dtype, reference(*map(np.abs, stored){attr_args}))"
    )
    lam = ", ".join(s.inputs)
    make = "".join(
        f"    {x} = backend.asarray(random_data((3, 1500), seed={i + 30}), dtype)\n"
        for i, x in enumerate(s.inputs)
    )
    stored = ", ".join(f"backend.to_numpy({x})" for x in s.inputs)
    return (
        text
        + f"""

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backend_params(BACKENDS), indirect=True)
def test_{s.op}_reverse(backend: Backend, dtype: str) -> None:
    \"\"\"{REVERSE}=True: the running sum from the end of each row.\"\"\"
{make}    stored = [{stored}]
    result = backend.run(lambda {lam}: {s.lib}.{s.op}({lam}{math_args}, {REVERSE}=True), {lam})
    assert_close(
        backend.to_numpy(result),
        reference(*stored{math_args}, True),
        dtype,
        reference(*map(np.abs, stored){math_args}, True),
    )
"""
    )


# ---------------------------------------------------------------------------------------------
def library_name() -> str:
    packages = [p.name for p in (ROOT / "python").iterdir() if (p / "__init__.py").exists()]
    if len(packages) != 1:
        sys.exit(f"error: expected one package under python/, found {packages}")
    return packages[0]


# C++ keywords and alternative tokens: an op's name becomes C++ identifiers too.
CPP_KEYWORDS = frozenset(
    [
        "alignas",
        "alignof",
        "and",
        "and_eq",
        "asm",
        "auto",
        "bitand",
        "bitor",
        "bool",
        "break",
        "case",
        "catch",
        "char",
        "char8_t",
        "char16_t",
        "char32_t",
        "class",
        "compl",
        "concept",
        "const",
        "consteval",
        "constexpr",
        "constinit",
        "const_cast",
        "continue",
        "co_await",
        "co_return",
        "co_yield",
        "decltype",
        "default",
        "delete",
        "do",
        "double",
        "dynamic_cast",
        "else",
        "enum",
        "explicit",
        "export",
        "extern",
        "false",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "mutable",
        "namespace",
        "new",
        "noexcept",
        "not",
        "not_eq",
        "nullptr",
        "operator",
        "or",
        "or_eq",
        "private",
        "protected",
        "public",
        "register",
        "reinterpret_cast",
        "requires",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "static_assert",
        "static_cast",
        "struct",
        "switch",
        "template",
        "this",
        "thread_local",
        "throw",
        "true",
        "try",
        "typedef",
        "typeid",
        "typename",
        "union",
        "unsigned",
        "using",
        "virtual",
        "void",
        "volatile",
        "wchar_t",
        "while",
        "xor",
        "xor_eq",
    ]
)


def _identifier(name: str, what: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name) or keyword.issoftkeyword(name):
        sys.exit(f"error: {what} {name!r} must be a lowercase Python identifier (not a Python keyword)")
    if name in CPP_KEYWORDS:
        sys.exit(f"error: {what} {name!r} is a C++ keyword; the generated C++ code could not use it")
    return name


def bound_names(library: str) -> set[str]:
    """The names an op may not take: what the package, its ``ops`` module or the library's
    exports already bind (``lib``, ``ops``, ``build_info``, an export such as ``scale_new``...).
    The op would be hidden behind them, or clash with them in the library."""
    package = ROOT / "python" / library
    names = {p.stem for p in package.glob("*.py")}
    for module in (package / "__init__.py", package / "ops.py"):
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    for binding in (ROOT / "bindings").glob("*.cc"):
        names |= set(re.findall(r"^[A-Z_]+_EXPORT\((\w+),", binding.read_text(), re.MULTILINE))
    return names


# C's standard headers (C23). kernels/ is an include directory of the build (-I, searched before
# the system's), so an op's kernels/<op>.h would stand in for <op.h> wherever a source or the
# compiler's own headers include it: kernels/errno.h for the <errno.h> that <cerrno> includes.
C_HEADERS = frozenset(
    [
        "assert",
        "complex",
        "ctype",
        "errno",
        "fenv",
        "float",
        "inttypes",
        "iso646",
        "limits",
        "locale",
        "math",
        "setjmp",
        "signal",
        "stdalign",
        "stdarg",
        "stdatomic",
        "stdbit",
        "stdbool",
        "stdckdint",
        "stddef",
        "stdint",
        "stdio",
        "stdlib",
        "stdnoreturn",
        "string",
        "tgmath",
        "threads",
        "time",
        "uchar",
        "wchar",
        "wctype",
    ]
)


def _include_dirs() -> list[Path]:
    """The system include directories of this machine's C++ compiler and of CUDA, where found."""
    dirs = []
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler:
        probe = subprocess.run(
            [compiler, "-xc++", "-E", "-v", os.devnull], capture_output=True, text=True, check=False
        )
        listed = re.search(r"#include <\.\.\.> search starts here:\n(.*?)\nEnd of search", probe.stderr, re.S)
        dirs += [Path(d.strip()) for d in listed.group(1).splitlines()] if listed else []
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs.append(Path(nvcc).resolve().parent.parent / "include")
    return [d for d in dirs if d.is_dir()]


def shadowed_headers() -> set[str]:
    """The names X for which kernels/X.h would shadow another header: C's standard headers, the
    project's own (include/), every <X.h> its sources include, and the headers at the top of the
    compiler's and CUDA's include directories."""
    names = set(C_HEADERS) | {p.stem for p in (ROOT / "include").glob("*.h")}
    for folder in ("kernels", "bindings", "include"):
        for source in (ROOT / folder).rglob("*"):
            if source.suffix in {".h", ".cuh", ".cu", ".cc"}:
                names |= set(re.findall(r"#\s*include\s*[<\"](\w+)\.h[>\"]", source.read_text()))
    for folder in _include_dirs():
        names |= {p.stem for p in folder.glob("*.h")}
    return names - _existing_ops(library_name())


def python_names_used(library: str) -> set[str]:
    """Builtins (len, max, ...) and the standard library modules the package uses: an op's
    function in ops.py and the package namespace would hide them."""
    used = set(dir(builtins))
    for module in (ROOT / "python" / library).glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                used |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                used.add(node.module.split(".")[0])
    return {n for n in used if n in sys.stdlib_module_names or n in dir(builtins)}


def _op_name(name: str, library: str) -> str:
    _identifier(name, "op name")
    if name in python_names_used(library):
        sys.exit(
            f"error: op name {name!r} would shadow the Python builtin or standard module {library} uses; "
            "choose another name"
        )
    if name in shadowed_headers():
        sys.exit(
            f"error: op name {name!r} would make kernels/{name}.h shadow the header <{name}.h> "
            "(kernels/ is an include directory); choose another name"
        )
    if name in bound_names(library) - _existing_ops(library):
        sys.exit(
            f"error: op name {name!r} is already bound by {library} (its package, ops.py or its "
            "exported functions); the op would be hidden behind it. Choose another name"
        )
    return name


def _existing_ops(library: str) -> set[str]:
    ops = (ROOT / "python" / library / "ops.py").read_text()
    return set(re.findall(r"^# ===== op: (\w+) =====", ops, re.MULTILINE))


def parse(argv: list[str]) -> tuple[Spec, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the op's name, a lowercase identifier such as fused_add")
    parser.add_argument("--inputs", default="x", help="its array arguments, comma-separated (default: x)")
    parser.add_argument(
        "--attrs", default="", help="its scalar arguments, NAME:float|int|bool, comma-separated"
    )
    parser.add_argument(
        "--kind", choices=KINDS, default="elementwise", help="its pattern (default: elementwise)"
    )
    parser.add_argument("--cuda-only", action="store_true", help="a CUDA implementation only (no CPU twin)")
    parser.add_argument(
        "--lang",
        choices=LANGS,
        default="cuda",
        help="the CUDA kernel's language (default: cuda; triton: elementwise only)",
    )
    parser.add_argument(
        "--scan-op",
        choices=tuple(SCAN_OPS),
        default="sum",
        help="a scan's operator (default: sum): the kernels' operator, the reference and the vjp",
    )
    parser.add_argument(
        "--like",
        metavar="OP",
        help="copy the example op OP under NAME instead (tools/copy_op.py): its kernels, tests, docs page",
    )
    parser.add_argument("--no-format", action="store_true", help="do not run clang-format and ruff format")
    args = parser.parse_args(argv)
    shaped = {"--inputs": "inputs", "--attrs": "attrs", "--kind": "kind", "--cuda-only": "cuda_only"}
    shaped |= {"--lang": "lang", "--scan-op": "scan_op"}
    if args.like and any(getattr(args, dest) != parser.get_default(dest) for dest in shaped.values()):
        sys.exit(f"error: --like copies {args.like} as it is; it takes none of {', '.join(shaped)}")
    inputs = tuple(_identifier(n.strip(), "input") for n in args.inputs.split(",") if n.strip())
    attrs = []
    for item in filter(None, (a.strip() for a in args.attrs.split(","))):
        name, _, kind = item.partition(":")
        if kind not in ATTR_TYPES:
            sys.exit(f"error: attribute {item!r}: write NAME:TYPE with TYPE one of {', '.join(ATTR_TYPES)}")
        attrs.append(Attr(_identifier(name, "attribute"), kind))
    names = [*inputs, *(a.name for a in attrs), "out"]
    if not inputs or len(set(names)) != len(names):
        sys.exit(f"error: inputs and attributes need distinct names other than 'out'; got {names[:-1]}")
    library = library_name()
    op = _op_name(args.name, library)
    if args.kind == "scan":
        if any(a.name == REVERSE for a in attrs):
            sys.exit(f"error: the scan kind adds the attribute {REVERSE!r} itself; name yours otherwise")
        attrs.append(Attr(REVERSE, "bool"))
    if args.lang == "triton" and args.kind != "elementwise":
        sys.exit("error: --lang triton scaffolds elementwise ops; write other patterns from docs/triton.md")
    if args.scan_op != "sum" and args.kind != "scan":
        sys.exit("error: --scan-op is the operator of a scan: use it with --kind scan")
    spec = Spec(
        op, library, inputs, tuple(attrs), args.kind, args.cuda_only, args.lang, args.scan_op, args.like
    )
    return spec, not args.no_format


def _formatters() -> dict[str, str]:
    """ruff and clang-format at the versions .pre-commit-config.yaml pins, so that the new files
    pass the lint as written: this Python's (or PATH's) where those are the pinned versions, else
    from a private environment made once from their PyPI wheels (.venv-template, shared with
    tools/update_from_template.py)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from update_from_template import tool_python

    bin_dir = tool_python(ROOT).parent
    found = {name: bin_dir / name for name in ("ruff", "clang-format")}
    return {name: str(exe) if exe.exists() else (shutil.which(name) or name) for name, exe in found.items()}


def format_files(paths: list[Path]) -> None:
    """Format what was written with the project's pinned formatters."""
    cpp = [str(p) for p in paths if p.suffix in (".h", ".cu", ".cc", ".cuh")]
    py = [str(p) for p in paths if p.suffix == ".py"]
    try:
        tools = _formatters()
        # clang-format twice: its alignment of trailing comments can settle only on a second pass
        # (a renamed copy's longer lines), and the lint runs it once.
        for tool, files, cmd in (
            ("clang-format", cpp, ["-i"]),
            ("clang-format", cpp, ["-i"]),
            ("ruff", py, ["format", "-q"]),
        ):
            if files:
                subprocess.run([tools[tool], *cmd, *files], check=True, cwd=ROOT)
    except (OSError, subprocess.CalledProcessError) as error:  # no network for the wheels, say
        print(f"note: the new files are not formatted ({error}); run `pre-commit run --all-files`")


def require_triton_to_build(pyproject: Path) -> bool:
    """Restore pyproject.toml's Triton build requirement where a library without Triton kernels
    had it commented out (tools/remove_op.py); True if the file changed."""
    toggle = runpy.run_path(str(ROOT / "tools" / "remove_op.py"))["with_triton_build"]
    text = pyproject.read_text()
    new = toggle(text, needed=True)
    if new != text:
        pyproject.write_text(new)
    return new != text


def track(paths: list[Path]) -> None:
    """Tell git about the new files (intent to add): pre-commit and `git diff` see only tracked
    files, so the lint checks them on its first run."""
    if (ROOT / ".git").exists():
        subprocess.run(["git", "add", "--intent-to-add", *map(str, paths)], cwd=ROOT, check=False)


def copy_like(s: Spec, run_formatters: bool) -> int:
    """``--like OP``: the example OP copied under the new name (tools/copy_op.py)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from copy_op import copy_example, readme_row

    created, edited = copy_example(s.like, s.op, s.lib)
    row = readme_row(s.like, s.op, s.lib, ROOT / "README.md")
    if row is not None and append_readme_row(ROOT / "README.md", row):
        edited.append("README.md")
    package = ROOT / "python" / s.lib
    add_to_init(package / "__init__.py", s.op)
    if any(p.startswith("kernels/triton/") for p in created) and require_triton_to_build(
        ROOT / "pyproject.toml"
    ):
        edited.append("pyproject.toml")
    hint = (
        f"next: change {s.op}'s math in every kernel file above, its reference in tests/test_{s.op}.py\n"
        f"      and its page docs/kernels/{s.op}.md; python3 tools/dev.py loop -- tests/test_{s.op}.py"
    )
    return finish(list(created), edited, package, run_formatters, hint)


def finish(created: list[str], edited: list[str], package: Path, run_formatters: bool, hint: str) -> int:
    """Format and track the new files, and say what was written and what to do next."""
    if run_formatters:
        format_files([ROOT / p for p in created] + [package / "ops.py", package / "__init__.py"])
    track([ROOT / p for p in created])
    print(f"created {', '.join(created)}")
    print(f"edited  {', '.join(edited)}")
    print(hint)
    return 0


def main(argv: list[str]) -> int:
    s, run_formatters = parse(argv)
    if s.like:
        return copy_like(s, run_formatters)
    cuda_files = (
        {f"kernels/triton/{s.op}.py": triton_source(s), f"kernels/triton/{s.op}.cu": triton_launcher(s)}
        if s.lang == "triton"
        else {f"kernels/{s.op}.cu": cuda_source(s)}
    )
    created = {
        f"kernels/{s.op}.h": header(s),
        **cuda_files,
        f"bindings/{s.op}_binding.cc": binding(s),
        f"tests/test_{s.op}.py": test_file(s),
        f"docs/kernels/{s.op}.md": docs_page(s),
    }
    if not s.cuda_only:
        created[f"kernels/{s.op}_cpu.cc"] = cpu_source(s)
    package = ROOT / "python" / s.lib
    ops_py = package / "ops.py"
    existing = [p for p in created if (ROOT / p).exists()]
    if existing or f"# ===== op: {s.op} =====" in ops_py.read_text():
        sys.exit(f"error: {s.op} exists already ({', '.join(existing) or 'ops.py'})")
    for path, text in created.items():
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(text)
    add_to_ops(ops_py, s)
    add_to_init(package / "__init__.py", s.op)
    add_readme_row(ROOT / "README.md", s)
    edited = [f"python/{s.lib}/ops.py", f"python/{s.lib}/__init__.py", "README.md"]
    if s.lang == "triton" and require_triton_to_build(ROOT / "pyproject.toml"):
        edited.append("pyproject.toml")
    math = f"kernels/{s.op}.h"
    if s.lang == "triton":
        math += f" and kernels/triton/{s.op}.py (the CUDA kernel's)"
    hint = (
        f"next: write the math in {math}\n"
        f"      and the reference in tests/test_{s.op}.py, then\n"
        f"      python3 tools/dev.py loop -- tests/test_{s.op}.py (docs/adding_an_op.md)"
    )
    return finish(list(created), edited, package, run_formatters, hint)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
