// SPDX-License-Identifier: Apache-2.0
// softmax: out = exp(x - max(x)) / sum(exp(x - max(x))) over the last dimension.
//
// The example of a kernel compiled at run time (docs/nvrtc.md): on CUDA, the first call for a
// row length, dtype and GPU compiles a kernel specialised on them with NVRTC
// (python/scale_lib/nvrtc_kernels/softmax.cu), which keeps each row in registers; the
// ahead-of-time kernel of kernels/softmax/softmax.cu, for any row length, is the fallback.
//
// The one header shared by the CPU twin, the CUDA kernel and the binding: the argument checks
// both implementations run first, and their declarations.
#ifndef SCALE_LIB_KERNELS_SOFTMAX_H_
#define SCALE_LIB_KERNELS_SOFTMAX_H_

#include <cmath>
#include <cstdint>

#include "tvm_ffi_utils.h"

namespace scale_lib {

// Step 1 of every softmax implementation.
inline void CheckSoftmaxArgs(const ffi::TensorView& out, const ffi::TensorView& x) {
  CHECK_FLOATING(x);
  CHECK_MIN_NDIM(x, 1);
  CHECK_LIKE(out, x);
  CHECK_CONTIGUOUS(x);
  CHECK_CONTIGUOUS(out);
}

void SoftmaxCPU(ffi::TensorView out, ffi::TensorView x);

#if defined(SCALE_LIB_WITH_CUDA)
// runtime_compiled=false: the ahead-of-time kernel only (softmax_ahead_of_time, for comparisons).
void SoftmaxCUDA(ffi::TensorView out, ffi::TensorView x, bool runtime_compiled = true);
#endif

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SOFTMAX_H_
