// SPDX-License-Identifier: Apache-2.0
// Row-wise ops: a reduction over the last dimension, then each element of the row from its value
// and the row's sum. The math is written once, as a function object in the op's header (compiled
// by both the host compiler and nvcc), and run by two shared launchers:
//   gpu::LaunchRowwise (kernels/rowwise.cuh): one block per row (a grid-stride loop over rows),
//     the row's sum with cub::BlockReduce, 64-bit indices, the launch check;
//   host::RunRowwise (kernels/rowwise_cpu.h): rows split across threads for large inputs.
// Both take contiguous rows: `rows` rows of `cols` elements, every input shaped like the output.
// The function object has three parts, in the compute type C (float for 16-bit and float32
// storage, double for float64); its parameters are members, converted to C once by the caller:
//
//   template <typename C>
//   struct RowNormFn {
//     C alpha;
//     // The value of one element, from one value per input.
//     SCALE_LIB_HOST_DEVICE C Value(C x) const { return x; }
//     // What the row sums, for one element's value.
//     SCALE_LIB_HOST_DEVICE C Term(C v) const { return v * v; }
//     // The output of one element, from its value and the sum over its row of `cols` elements.
//     SCALE_LIB_HOST_DEVICE C Finish(C v, C sum, int64_t cols) const { ... }
//   };
//
// Every element of a row is read by the thread that writes it, and only after the row's sum is
// complete, so the output may be one of the inputs (in-place use).
#ifndef SCALE_LIB_KERNELS_ROWWISE_H_
#define SCALE_LIB_KERNELS_ROWWISE_H_

#include <cstdint>

#include "elementwise.h"  // SCALE_LIB_HOST_DEVICE
#include "tvm_ffi_utils.h"

namespace scale_lib {

// Ops that take rows of a wider array (an N-d x whose leading dimensions are rows, given as
// x[:, :hidden]) read its layout with AsRows instead of requiring CHECK_CONTIGUOUS; the launchers
// above take contiguous rows.
// [rows.begin]
// A tensor seen as `rows` rows of `hidden` contiguous elements, `row_stride` elements apart.
// Rows of a wider tensor (x[:, :hidden]) qualify; transposed or interleaved layouts do not.
struct RowLayout {
  int64_t rows;
  int64_t hidden;
  int64_t row_stride;
};

inline RowLayout AsRows(const ffi::TensorView& t, const char* arg_name) {
  const int32_t ndim = t.ndim();
  const int64_t hidden = t.size(ndim - 1);
  int64_t rows = 1;
  for (int32_t i = 0; i + 1 < ndim; ++i) rows *= t.size(i);
  RowLayout layout{rows, hidden, hidden};
  if (t.numel() == 0) return layout;
  bool ok = hidden == 1 || t.stride(ndim - 1) == 1;
  int64_t next_stride = -1;  // the stride the next outer non-trivial dimension must have
  for (int32_t i = ndim - 2; ok && i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (next_stride < 0) {
      layout.row_stride = t.stride(i);
    } else {
      ok = t.stride(i) == next_stride;
    }
    next_stride = t.stride(i) * t.size(i);
  }
  ok = ok && (rows == 1 || layout.row_stride >= hidden);
  if (!ok) {
    TVM_FFI_THROW(ValueError) << arg_name
                              << " must be rows of contiguous elements: the last dimension "
                                 "contiguous and the leading ones a (possibly strided) stack of "
                                 "rows; got shape "
                              << ShapeString(t) << " with element strides " << StridesString(t);
  }
  return layout;
}
// [rows.end]

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_ROWWISE_H_
