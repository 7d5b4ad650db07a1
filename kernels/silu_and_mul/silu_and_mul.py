# SPDX-License-Identifier: Apache-2.0
"""silu_and_mul in Triton: out[..., i] = silu(x[..., i]) * x[..., d + i] for x of shape (..., 2d).

Compiled ahead of time by the build (tools/triton_aot.py), for every CUDA architecture of the
build plus PTX, into the library; Triton is not needed at run time. The host side, which picks a
specialisation and launches it on the caller's stream, is kernels/silu_and_mul/silu_and_mul.cu; the CPU
twin is kernels/silu_and_mul/silu_and_mul_cpu.cc, with the same math in kernels/silu_and_mul/silu_and_mul.h.

Inputs are contiguous rows: ``rows`` rows of ``2 * d`` elements in, ``d`` out. Each program
handles one block of ``BLOCK`` columns of the rows ``row0, row0 + stride, ...`` (a grid-stride
loop over rows: the grid's second dimension is capped at 65535). Indices are 64-bit.
"""

import triton
import triton.language as tl


# [triton_kernel.begin]
@triton.jit
def silu_and_mul_kernel(out_ptr, x_ptr, rows, d, BLOCK: tl.constexpr, COMPUTE: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    for row in range(tl.program_id(1), rows, tl.num_programs(1)):
        x_row = x_ptr + row.to(tl.int64) * (2 * d)
        a = tl.load(x_row + cols, mask=mask).to(COMPUTE)
        b = tl.load(x_row + d + cols, mask=mask).to(COMPUTE)
        out = a / (1.0 + tl.exp(-a)) * b
        tl.store(out_ptr + row.to(tl.int64) * d + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def silu_and_mul_backward_kernel(
    grad_x_ptr, grad_ptr, x_ptr, rows, d, BLOCK: tl.constexpr, COMPUTE: tl.constexpr
):
    # d/da silu(a) * b = b * s * (1 + a * (1 - s)) with s = sigmoid(a); d/db = silu(a). Each
    # element of x is loaded before its gradient is stored, by the same program: grad_x may be x.
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    for row in range(tl.program_id(1), rows, tl.num_programs(1)):
        x_row = x_ptr + row.to(tl.int64) * (2 * d)
        grad_x_row = grad_x_ptr + row.to(tl.int64) * (2 * d)
        g = tl.load(grad_ptr + row.to(tl.int64) * d + cols, mask=mask).to(COMPUTE)
        a = tl.load(x_row + cols, mask=mask).to(COMPUTE)
        b = tl.load(x_row + d + cols, mask=mask).to(COMPUTE)
        s = 1.0 / (1.0 + tl.exp(-a))
        grad_a = g * b * s * (1.0 + a * (1.0 - s))
        grad_b = g * a * s
        tl.store(grad_x_row + cols, grad_a.to(grad_x_ptr.dtype.element_ty), mask=mask)
        tl.store(grad_x_row + d + cols, grad_b.to(grad_x_ptr.dtype.element_ty), mask=mask)


# [triton_kernel.end]

# [triton_specializations.begin]
# What the build compiles: one entry point per name, each a kernel with every argument typed
# (Triton's signature notation), its constexprs, the arguments known to be multiples of 16
# (pointers: 16-byte aligned; integers: divisible by 16), and its launch options. The launcher
# picks the aligned entry point when the call's pointers and d allow it, else the general one.
BLOCK = 1024
NUM_WARPS = 4
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}


def _specializations():
    for dtype, short in DTYPES.items():
        # float64 computes in float64; float16, bfloat16 and float32 in float32 (as the C++ twin).
        compute = tl.float64 if dtype == "float64" else tl.float32
        for layout, aligned in (("aligned", True), ("any", False)):
            yield (
                f"silu_and_mul_{dtype}_{layout}",
                {
                    "kernel": silu_and_mul_kernel,
                    "signature": {"out_ptr": f"*{short}", "x_ptr": f"*{short}", "rows": "i64", "d": "i64"},
                    "constexprs": {"BLOCK": BLOCK, "COMPUTE": compute},
                    "multiple_of_16": ("out_ptr", "x_ptr", "d") if aligned else (),
                    "num_warps": NUM_WARPS,
                },
            )
            yield (
                f"silu_and_mul_backward_{dtype}_{layout}",
                {
                    "kernel": silu_and_mul_backward_kernel,
                    "signature": {
                        "grad_x_ptr": f"*{short}",
                        "grad_ptr": f"*{short}",
                        "x_ptr": f"*{short}",
                        "rows": "i64",
                        "d": "i64",
                    },
                    "constexprs": {"BLOCK": BLOCK, "COMPUTE": compute},
                    "multiple_of_16": ("grad_x_ptr", "grad_ptr", "x_ptr", "d") if aligned else (),
                    "num_warps": NUM_WARPS,
                },
            )


SPECIALIZATIONS = dict(_specializations())
# [triton_specializations.end]
