// SPDX-License-Identifier: Apache-2.0
// Scan ops: a running sum along the last dimension (a cumulative sum, and what is built on one),
// each element of a row from the sum of the values of the row up to it. The math is written once,
// as a function object in the op's header (compiled by both the host compiler and nvcc), and run
// by two shared launchers:
//   gpu::LaunchScan (kernels/scan.cuh): one block per row (a grid-stride loop over rows), the row
//     taken in tiles whose prefix sums cub::BlockScan computes, carried from tile to tile;
//   host::RunScan (kernels/scan_cpu.h): each row in order on one thread, rows split across the
//     CPU pool (host::ParallelFor, kernels/cpu_parallel.h) for large inputs.
// Both take contiguous rows: `rows` rows of `cols` elements, every input shaped like the output
// (AsRows in kernels/rowwise.h reads the layout of rows of a wider array, for an op that takes
// them). The function object has two parts, in the compute type C (float for 16-bit and float32
// storage, double for float64); its parameters are members, converted to C once by the caller:
//
// [scan_fn.begin]
//   template <typename C>
//   struct CumsumFn {
//     // The value of one element, from one value per input.
//     SCALE_LIB_HOST_DEVICE C Value(C x) const { return x; }
//     // The output of one element, from the sum of the values of its row up to it, itself
//     // included (with reverse: from it to the row's end).
//     SCALE_LIB_HOST_DEVICE C Finish(C prefix) const { return prefix; }
//   };
// [scan_fn.end]
//
// `reverse` runs the scan from the end of each row: the gradient of a scan is the scan of the
// incoming gradient the other way, so an op that has one has its vjp. Every element is read by
// the thread that writes it, before it writes it, so the output may be one of the inputs.
#ifndef SCALE_LIB_KERNELS_SCAN_H_
#define SCALE_LIB_KERNELS_SCAN_H_

#include "elementwise.h"  // SCALE_LIB_HOST_DEVICE

#endif  // SCALE_LIB_KERNELS_SCAN_H_
