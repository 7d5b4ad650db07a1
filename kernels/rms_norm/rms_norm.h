// SPDX-License-Identifier: Apache-2.0
// rms_norm: out = x * rsqrt(mean(x^2 over the last dimension) + eps) * weight, for every row of
// an N-d x (the leading dimensions are rows). Accumulation is in float32 (float64 for float64).
//
// Backward, as three ops the vjp composes (see python/scale_lib/ops/rms_norm.py):
//   rstd                 = rms_norm_rstd(x, eps)                  float64, shape x.shape[:-1]
//   grad_x               = rms_norm_backward(grad, x, weight, rstd)
//   grad_weight          = rms_norm_weight_grad(grad, x, rstd)    sum over rows (per batch
//                                                                 group, see WeightGradGroups)
#ifndef SCALE_LIB_KERNELS_RMS_NORM_H_
#define SCALE_LIB_KERNELS_RMS_NORM_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "float_env.h"
#include "rowwise.h"  // AsRows
#include "tvm_ffi_utils.h"

namespace scale_lib {

// [eps.begin]
// eps in the accumulation type A (float32, or float64 for float64 input), rounded to nearest,
// except that a positive eps that would round to 0 becomes A's smallest subnormal (2^-149 in
// float32, 2^-1074 in float64). So rstd = 1 / sqrt(mean(x^2) + eps) adds eps
// as given wherever A can hold it, and an all-zero row normalises to 0 for every positive eps.
// Subnormals count: CUDA kernels keep them (no flush-to-zero), and the CPU code runs with the
// calling thread's flush-to-zero modes off (IeeeSubnormals), this rounding included.
template <typename A>
A EpsIn(double eps) {
  IeeeSubnormals ieee;
  const A rounded = static_cast<A>(eps);
  return eps > 0 && rounded == 0 ? std::numeric_limits<A>::denorm_min() : rounded;
}
// [eps.end]

// weight: shape (hidden,). Leading dimensions of size 1 are accepted too: jax.vmap passes an
// unbatched weight that way.
inline void CheckWeight(const ffi::TensorView& weight, const ffi::TensorView& x) {
  CHECK_SAME_DTYPE(weight, x);
  CHECK_SAME_DEVICE(weight, x);
  CHECK_CONTIGUOUS(weight);
  const int64_t hidden = x.size(x.ndim() - 1);
  if (weight.ndim() < 1 || weight.size(weight.ndim() - 1) != hidden || weight.numel() != hidden) {
    TVM_FFI_THROW(ValueError) << "weight must have shape (" << hidden
                              << ",) to match the last dimension of x; got " << ShapeString(weight);
  }
}

// grad_weight: shape (*batch, hidden), where `batch` (often empty) is a prefix of x's leading
// dimensions: one weight gradient per batch element, summed over that element's rows. This is
// how jax.vmap of a weight gradient (per-example gradients) reaches the kernel. Returns the
// number of groups, prod(batch).
inline int64_t WeightGradGroups(const ffi::TensorView& grad_weight, const ffi::TensorView& x) {
  CHECK_SAME_DTYPE(grad_weight, x);
  CHECK_SAME_DEVICE(grad_weight, x);
  CHECK_CONTIGUOUS(grad_weight);
  const int32_t k = grad_weight.ndim() - 1;
  bool ok = k >= 0 && k < x.ndim() && grad_weight.size(k) == x.size(x.ndim() - 1);
  for (int32_t i = 0; ok && i < k; ++i) ok = grad_weight.size(i) == x.size(i);
  if (!ok) {
    TVM_FFI_THROW(ValueError) << "grad_weight must have shape (..., " << x.size(x.ndim() - 1)
                              << ") with leading dimensions a prefix of x's " << ShapeString(x)
                              << "; got " << ShapeString(grad_weight);
  }
  int64_t groups = 1;
  for (int32_t i = 0; i < k; ++i) groups *= grad_weight.size(i);
  return groups;
}

// Step 1 of every rms_norm implementation.
inline void CheckRmsNormArgs(const ffi::TensorView& out, const ffi::TensorView& x,
                             const ffi::Optional<ffi::TensorView>& weight, double eps) {
  CHECK_FLOATING(x);
  CHECK_MIN_NDIM(x, 1);
  CHECK_LIKE(out, x);
  if (weight.has_value()) CheckWeight(weight.value(), x);
  SCALE_LIB_CHECK(eps >= 0, ValueError) << "eps must be non-negative; got " << eps;
  AsRows(x, "x");
  AsRows(out, "out");
}

inline void CheckRstd(const ffi::TensorView& rstd, const ffi::TensorView& x) {
  CHECK_DTYPE(rstd, kFloat64);
  CHECK_SAME_DEVICE(rstd, x);
  CHECK_CONTIGUOUS(rstd);
  SCALE_LIB_CHECK(rstd.numel() == AsRows(x, "x").rows, ValueError)
      << "rstd must have one element per row of x (" << AsRows(x, "x").rows << "); got shape "
      << ShapeString(rstd);
}

inline void CheckRmsNormRstdArgs(const ffi::TensorView& rstd, const ffi::TensorView& x,
                                 double eps) {
  CHECK_FLOATING(x);
  CHECK_MIN_NDIM(x, 1);
  CheckRstd(rstd, x);
  SCALE_LIB_CHECK(eps >= 0, ValueError) << "eps must be non-negative; got " << eps;
}

void RmsNormCPU(ffi::TensorView out, ffi::TensorView x, ffi::Optional<ffi::TensorView> weight,
                double eps);
void RmsNormRstdCPU(ffi::TensorView rstd, ffi::TensorView x, double eps);
void RmsNormBackwardCPU(ffi::TensorView grad_x, ffi::TensorView grad, ffi::TensorView x,
                        ffi::Optional<ffi::TensorView> weight, ffi::TensorView rstd);
void RmsNormWeightGradCPU(ffi::TensorView grad_weight, ffi::TensorView grad, ffi::TensorView x,
                          ffi::TensorView rstd);

#if defined(SCALE_LIB_WITH_CUDA)
void RmsNormCUDA(ffi::TensorView out, ffi::TensorView x, ffi::Optional<ffi::TensorView> weight,
                 double eps);
void RmsNormRstdCUDA(ffi::TensorView rstd, ffi::TensorView x, double eps);
void RmsNormBackwardCUDA(ffi::TensorView grad_x, ffi::TensorView grad, ffi::TensorView x,
                         ffi::Optional<ffi::TensorView> weight, ffi::TensorView rstd);
void RmsNormWeightGradCUDA(ffi::TensorView grad_weight, ffi::TensorView grad, ffi::TensorView x,
                           ffi::TensorView rstd);
#endif

// Shared checks of the backward ops.
inline void CheckRmsNormBackwardArgs(const ffi::TensorView& grad_x, const ffi::TensorView& grad,
                                     const ffi::TensorView& x,
                                     const ffi::Optional<ffi::TensorView>& weight,
                                     const ffi::TensorView& rstd) {
  CHECK_FLOATING(x);
  CHECK_MIN_NDIM(x, 1);
  CHECK_LIKE(grad, x);
  CHECK_LIKE(grad_x, x);
  CHECK_CONTIGUOUS(grad);
  CHECK_CONTIGUOUS(grad_x);
  AsRows(x, "x");
  if (weight.has_value()) CheckWeight(weight.value(), x);
  CheckRstd(rstd, x);
}

inline void CheckRmsNormWeightGradArgs(const ffi::TensorView& grad_weight,
                                       const ffi::TensorView& grad, const ffi::TensorView& x,
                                       const ffi::TensorView& rstd) {
  CHECK_FLOATING(x);
  CHECK_MIN_NDIM(x, 1);
  CHECK_LIKE(grad, x);
  CHECK_CONTIGUOUS(grad);
  AsRows(x, "x");
  WeightGradGroups(grad_weight, x);
  CheckRstd(rstd, x);
}

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_RMS_NORM_H_
