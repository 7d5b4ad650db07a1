// SPDX-License-Identifier: Apache-2.0
// Scan ops: a running combination along the last dimension (a cumulative sum, product, maximum,
// minimum or log-sum-exp, and what is built on one), each element of a row from the values of
// the row up to it. The math is written once, as a function object in the op's header (compiled
// by both the host compiler and nvcc), and run by two shared launchers:
//   gpu::LaunchScan (kernels/scan.cuh): chosen by shape at launch, a warp (or part of one) per
//     row for short rows, a block per row for many long rows, and for few long rows a block per
//     tile, each tile's prefix from a look-back over the tiles before it, combined from the
//     left; every combination in an order fixed by the shape, so the same input gives the same
//     bits from run to run;
//   host::RunScan (kernels/scan_cpu.h): each row on one thread (a long row as four segments side
//     by side, then combined), rows split across the CPU pool (host::ParallelFor,
//     kernels/cpu_parallel.h) for large inputs; an order fixed by the row's length.
// Both take contiguous rows: `rows` rows of `cols` elements, every input shaped like the output
// (AsRows in kernels/rowwise.h reads the layout of rows of a wider array, for an op that takes
// them). The function object has two parts, in the compute type C (float for 16-bit and float32
// storage, double for float64), and names its operator (one of the ScanSum, ScanProd, ScanMax,
// ScanMin, ScanLogAddExp below; a sum when it names none); its parameters are members, converted
// to C once by the caller:
//
// [scan_fn.begin]
//   template <typename C>
//   struct CumsumFn {
//     using Op = ScanSum<C>;  // how values combine along the row
//     // The value of one element, from one value per input.
//     SCALE_LIB_HOST_DEVICE C Value(C x) const { return x; }
//     // The output of one element, from the combination of the values of its row up to it,
//     // itself included (with reverse: from it to the row's end).
//     SCALE_LIB_HOST_DEVICE C Finish(C prefix) const { return prefix; }
//   };
// [scan_fn.end]
//
// An operator is associative (up to rounding) and commutative, with an identity: `Identity()`
// and `operator()(before, after)`, the combination of what comes before with what comes after
// (the CUDA launcher's tiles combine their elements in another order than the row's).
// `kStretchesStayFinite = true` says that the combination of any stretch of a row is finite
// where the row's running combinations are (a sum's, up to its largest values, a maximum's, a
// log-sum-exp's); the CPU launcher then scans stretches side by side. A product's is not: after
// a zero, the stretch 2, 2, 2, ... overflows where the running product stays 0, and 0 * inf is
// NaN; so the CPU scans it in order. On CUDA every operator's stretches are combined (warps,
// tiles): a product scan there can give NaN or inf where the in-order product is finite.
// `reverse` runs the scan from the end of each row: the gradient of a sum scan is the sum scan
// of the incoming gradient the other way (python/scale_lib/ops/ has the others'), so an op
// that has one has its vjp. Every element is read before it is written, by the block that writes
// it, so the output may be one of the inputs.
#ifndef SCALE_LIB_KERNELS_SCAN_H_
#define SCALE_LIB_KERNELS_SCAN_H_

#include <cmath>
#include <type_traits>

#include "elementwise.h"  // SCALE_LIB_HOST_DEVICE

namespace scale_lib {

// [scan_ops.begin]
// A running sum. Its identity is -0, not +0: -0 + x is x for every x, -0 itself included.
template <typename C>
struct ScanSum {
  static constexpr bool kStretchesStayFinite = true;
  SCALE_LIB_HOST_DEVICE static C Identity() { return -C(0); }
  SCALE_LIB_HOST_DEVICE C operator()(C a, C b) const { return a + b; }
};

// A running product.
template <typename C>
struct ScanProd {
  SCALE_LIB_HOST_DEVICE static C Identity() { return C(1); }
  SCALE_LIB_HOST_DEVICE C operator()(C a, C b) const { return a * b; }
};

// A running maximum; a NaN propagates (the first one met). Of equal values (-0 and +0) the
// earlier is kept, which is associative, so the result does not depend on the grouping.
template <typename C>
struct ScanMax {
  static constexpr bool kStretchesStayFinite = true;
  SCALE_LIB_HOST_DEVICE static C Identity() { return -static_cast<C>(INFINITY); }
  SCALE_LIB_HOST_DEVICE C operator()(C a, C b) const {
    return a != a ? a : (b != b ? b : (a < b ? b : a));
  }
};

// A running minimum; a NaN propagates (the first one met), of equal values the earlier is kept.
template <typename C>
struct ScanMin {
  static constexpr bool kStretchesStayFinite = true;
  SCALE_LIB_HOST_DEVICE static C Identity() { return static_cast<C>(INFINITY); }
  SCALE_LIB_HOST_DEVICE C operator()(C a, C b) const {
    return a != a ? a : (b != b ? b : (b < a ? b : a));
  }
};

// A running log(sum(exp(values))): max + log1p(exp(min - max)), exact when one side is -inf
// (the identity) or the other +inf; a NaN propagates.
template <typename C>
struct ScanLogAddExp {
  static constexpr bool kStretchesStayFinite = true;
  SCALE_LIB_HOST_DEVICE static C Identity() { return -static_cast<C>(INFINITY); }
  SCALE_LIB_HOST_DEVICE C operator()(C a, C b) const {
    if (a != a) return a;
    if (b != b) return b;
    const C hi = a < b ? b : a;
    const C lo = a < b ? a : b;
    if (lo == -static_cast<C>(INFINITY) || hi == static_cast<C>(INFINITY)) return hi;
    return hi + std::log1p(std::exp(lo - hi));
  }
};
// [scan_ops.end]

// Whether Op declares kStretchesStayFinite true (an operator that does not say is scanned in
// order on the CPU).
template <typename Op, typename = void>
struct StretchesStayFinite : std::false_type {};
template <typename Op>
struct StretchesStayFinite<Op, std::void_t<decltype(Op::kStretchesStayFinite)>>
    : std::bool_constant<Op::kStretchesStayFinite> {};

// The operator a function object names (`using Op = ...`), a sum when it names none.
template <typename Fn, typename C, typename = void>
struct ScanOpOf {
  using type = ScanSum<C>;
};
template <typename Fn, typename C>
struct ScanOpOf<Fn, C, std::void_t<typename Fn::Op>> {
  using type = typename Fn::Op;
};

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SCAN_H_
