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

#include "elementwise.h"  // SCALE_LIB_HOST_DEVICE

#endif  // SCALE_LIB_KERNELS_ROWWISE_H_
