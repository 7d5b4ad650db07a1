// SPDX-License-Identifier: Apache-2.0
// l2_norm: out = sqrt(sum of x^2), accumulated in float64, as a 0-d tensor of x's dtype.
// Deterministic: the same input gives the same bits every run.
//
// out may also have shape (*batch) with `batch` a prefix of x's shape: then each element is the
// norm of its slice x[b] (jax.vmap reaches the kernel this way: per-example norms).
//
// The CUDA version reduces norms of more than kL2NormOneBlockMax elements in two passes, with
// scratch memory between them (one float64 partial sum per block); smaller norms take one pass
// and no scratch memory. It never allocates behind the caller's back: the workspace is either
// passed in (l2_norm_with_workspace, for callers such as CuPy that publish no allocator) or
// taken from the calling framework's allocator (PyTorch, Paddle, and JAX through jax-tvm-ffi's
// workspace).
#ifndef SCALE_LIB_KERNELS_L2_NORM_H_
#define SCALE_LIB_KERNELS_L2_NORM_H_

#include "tvm_ffi_utils.h"

namespace scale_lib {

// [workspace_size.begin]
// Bytes of workspace the CUDA version needs: a pure function of the sizes, so that every caller
// (and JAX at trace time) can size it without a device.
inline constexpr int64_t kL2NormThreads = 256;
inline constexpr int64_t kL2NormMaxBlocks = 1024;  // per group
// Norms of at most this many elements are one block each on CUDA, and need no workspace.
inline constexpr int64_t kL2NormOneBlockMax = int64_t{1} << 14;

inline int64_t L2NormBlocksPerGroup(int64_t numel_per_group) {
  const int64_t per_block = kL2NormThreads * 8;
  return std::max<int64_t>(
      1, std::min(kL2NormMaxBlocks, (numel_per_group + per_block - 1) / per_block));
}

inline int64_t L2NormWorkspaceBytes(int64_t numel, int64_t groups) {
  SCALE_LIB_CHECK(numel >= 0 && groups >= 1 && numel % groups == 0, ValueError)
      << "numel must be a non-negative multiple of groups; got numel=" << numel
      << ", groups=" << groups;
  return groups * L2NormBlocksPerGroup(numel / groups) * static_cast<int64_t>(sizeof(double));
}
// [workspace_size.end]

// The number of norms: out's shape is a prefix of x's.
inline int64_t CheckL2NormArgs(const ffi::TensorView& out, const ffi::TensorView& x) {
  CHECK_FLOATING(x);
  CHECK_CONTIGUOUS(x);
  CHECK_SAME_DTYPE(out, x);
  CHECK_SAME_DEVICE(out, x);
  CHECK_CONTIGUOUS(out);
  bool ok = out.ndim() <= x.ndim();
  for (int32_t i = 0; ok && i < out.ndim(); ++i) ok = out.size(i) == x.size(i);
  if (!ok) {
    TVM_FFI_THROW(ValueError) << "out must be a 0-d array (or have the leading dimensions of x "
                                 "for one norm per slice); got shape "
                              << ShapeString(out) << " for x of shape " << ShapeString(x);
  }
  return out.numel();
}

inline void CheckWorkspace(const ffi::TensorView& workspace, const ffi::TensorView& x,
                           int64_t groups) {
  CHECK_SAME_DEVICE(workspace, x);
  CHECK_CONTIGUOUS(workspace);
  const int64_t needed = L2NormWorkspaceBytes(x.numel(), groups);
  const auto bytes = static_cast<int64_t>(ffi::GetDataSize(workspace.numel(), workspace.dtype()));
  SCALE_LIB_CHECK(bytes >= needed, ValueError) << "workspace must hold at least " << needed
                                               << " bytes (l2_norm_workspace_bytes); got " << bytes;
  SCALE_LIB_CHECK(
      reinterpret_cast<uintptr_t>(DataPtr<const char>(workspace)) % alignof(double) == 0,
      ValueError)
      << "workspace must be 8-byte aligned";
}

void L2NormCPU(ffi::TensorView out, ffi::TensorView x);

#if defined(SCALE_LIB_WITH_CUDA)
void L2NormCUDA(ffi::TensorView out, ffi::TensorView x, ffi::Optional<ffi::TensorView> workspace);
#endif

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_L2_NORM_H_
