// SPDX-License-Identifier: Apache-2.0
// silu_and_mul: the SwiGLU gate. x of shape (..., 2d) gives out[..., i] = silu(x[..., i]) *
// x[..., d + i], of shape (..., d); silu(a) = a / (1 + exp(-a)). The CUDA kernels are written in
// Triton (kernels/silu_and_mul/silu_and_mul.py, launched by kernels/silu_and_mul/silu_and_mul.cu);
// the CPU twin is silu_and_mul_cpu.cc. Both compute in float32 (float64 for float64).
#ifndef SCALE_LIB_KERNELS_SILU_AND_MUL_H_
#define SCALE_LIB_KERNELS_SILU_AND_MUL_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "exp_float.h"
#include "tvm_ffi_utils.h"

namespace scale_lib {

// The math, in the compute type C. silu(a) = a / (1 + exp(-a)), written for a < 0 as
// a * exp(a) / (1 + exp(a)): exp(-|a|) never overflows, and a * exp(a) is scaled by its power of
// two last (exp_float.h), so a result too small for a normal number keeps its precision. silu(a)
// for a below exp's clamp (kExpLowest: -110 in float, -752 in double) is below the smallest
// subnormal: 0 times a (-0.0, and NaN for -inf, as a / (1 + exp(-a)) gives). exp is exp_float.h's
// branch-free one, which vectorises in the CPU twin's loops; the Triton kernels write
// a / (1 + exp(-a)) as it stands.
template <typename C>
[[gnu::always_inline]] inline C SiluGate(C a, C b) {
  constexpr C kZeroBelow = kExpLowest<C>;
  const auto e = ExpReduceNonPositive(-std::fabs(a));  // exp(-|a|) = e.p * 2^e.n
  // Both sides computed, then chosen: a select, which vectorises, not a branch.
  const C a_exp_a = ScaleByPow2(a * e.p, e.n);
  const C zero = a * C(0);
  const C negative = a < kZeroBelow ? zero : a_exp_a;
  const C gated = a < C(0) ? negative : a;
  return gated / OnePlusScaled(e.p, e.n) * b;
}

// The gradients of silu(a) * b for the output's gradient g: d/da = g * b * s * (1 + a * (1 - s))
// with s = sigmoid(a), d/db = g * silu(a).
template <typename C>
[[gnu::always_inline]] inline void SiluGateGrad(C g, C a, C b, C* grad_a, C* grad_b) {
  const C s = C(1) / (C(1) + Exp(-a));
  *grad_a = g * b * s * (C(1) + a * (C(1) - s));
  *grad_b = g * a * s;
}

// x (..., 2d) as rows: `rows` rows of 2 * `d` elements.
struct GateRows {
  int64_t rows;
  int64_t d;
};

inline GateRows CheckSiluAndMulInput(const ffi::TensorView& x) {
  CHECK_FLOATING(x);
  CHECK_MIN_NDIM(x, 1);
  CHECK_CONTIGUOUS(x);
  const int64_t width = x.size(x.ndim() - 1);
  SCALE_LIB_CHECK(width % 2 == 0, ValueError)
      << "x's last dimension must be even (the two halves of the gate); got shape "
      << detail::ShapeString(x);
  return GateRows{width == 0 ? 0 : x.numel() / width, width / 2};
}

// `t` has x's shape with the last dimension halved, x's dtype and device, and is contiguous.
#define SCALE_LIB_CHECK_HALF_OF(t, x)                                                          \
  do {                                                                                         \
    CHECK_SAME_DTYPE(t, x);                                                                    \
    CHECK_SAME_DEVICE(t, x);                                                                   \
    bool same_ = (t).ndim() == (x).ndim();                                                     \
    for (int i_ = 0; same_ && i_ + 1 < (x).ndim(); ++i_) same_ = (t).size(i_) == (x).size(i_); \
    same_ = same_ && 2 * (t).size((t).ndim() - 1) == (x).size((x).ndim() - 1);                 \
    SCALE_LIB_CHECK(same_, ValueError)                                                         \
        << #t " must have x's shape with the last dimension halved; got " #t " shape "         \
        << detail::ShapeString(t) << " for x shape " << detail::ShapeString(x);                \
    CHECK_CONTIGUOUS(t);                                                                       \
  } while (0)

inline GateRows CheckSiluAndMulArgs(const ffi::TensorView& out, const ffi::TensorView& x) {
  const GateRows rows = CheckSiluAndMulInput(x);
  SCALE_LIB_CHECK_HALF_OF(out, x);
  return rows;
}

inline GateRows CheckSiluAndMulBackwardArgs(const ffi::TensorView& grad_x, const ffi::TensorView& x,
                                            const ffi::TensorView& grad) {
  const GateRows rows = CheckSiluAndMulInput(x);
  SCALE_LIB_CHECK_HALF_OF(grad, x);
  CHECK_LIKE(grad_x, x);
  CHECK_CONTIGUOUS(grad_x);
  return rows;
}

void SiluAndMulCPU(ffi::TensorView out, ffi::TensorView x);
void SiluAndMulBackwardCPU(ffi::TensorView grad_x, ffi::TensorView x, ffi::TensorView grad);

#if defined(SCALE_LIB_WITH_TRITON)
void SiluAndMulCUDA(ffi::TensorView out, ffi::TensorView x);
void SiluAndMulBackwardCUDA(ffi::TensorView grad_x, ffi::TensorView x, ffi::TensorView grad);
#endif

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SILU_AND_MUL_H_
