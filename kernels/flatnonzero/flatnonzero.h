// SPDX-License-Identifier: Apache-2.0
// flatnonzero: the int64 indices of the non-zero elements of x in its flattened (row-major)
// order, like numpy.flatnonzero. NaN counts as non-zero and -0.0 as zero.
//
// The output size depends on the data, so the library allocates it (AllocHostResult /
// AllocCudaResult): from the caller's framework when it publishes an allocator (PyTorch, Paddle),
// else from memory the library owns, returned as a tvm_ffi.Tensor that the Python layer hands
// to the caller's framework through DLPack without a copy.
#ifndef SCALE_LIB_KERNELS_FLATNONZERO_H_
#define SCALE_LIB_KERNELS_FLATNONZERO_H_

#include "tvm_ffi_utils.h"

namespace scale_lib {

inline void CheckFlatNonzeroArgs(const ffi::TensorView& x) {
  CHECK_FLOATING(x);
  CHECK_CONTIGUOUS(x);
}

ffi::Tensor FlatNonzeroCPU(ffi::TensorView x);

#if defined(SCALE_LIB_WITH_CUDA)
ffi::Tensor FlatNonzeroCUDA(ffi::TensorView x);
#endif

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_FLATNONZERO_H_
