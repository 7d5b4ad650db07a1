// SPDX-License-Identifier: Apache-2.0
// Scan ops: a running combination along the last dimension (a cumulative sum, product, maximum,
// minimum or log-sum-exp, and what is built on one), each element of a row from the values of
// the row up to it. The math is written once, as a function object in the op's header (compiled
// by both the host compiler and nvcc), and run by two shared launchers:
//   gpu::LaunchScan (kernels/scan.cuh): chosen by shape at launch, a warp (or part of one) per
//     row for short rows, a block per row for many long rows, and for few long rows a block per
//     tile, each tile's prefix from a look-back over the tiles before it, a window of 32 tiles
//     at a time, each window's totals in a grouping fixed by their places; every combination in
//     an order fixed by the shape, so the same input gives the same bits from run to run;
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
// (the CUDA launcher's tiles combine their elements in another order than the row's). It may
// carry its running combination in a state of its own (`using State`, with `Lift(C)` from a
// value and `Lower(State)` to one; C itself when it declares none): a product's is m * 2^e, so
// that no stretch of a row overflows or underflows where the row's running product does not
// (after a zero, the stretch 2, 2, 2, ... would overflow, and 0 * inf is NaN). A state that
// needs a check to stay within its own range declares `Settle(State)`, and may leave it out of
// `operator()`: the launchers settle the states they carry along a row at fixed places (the CUDA
// launcher: after each tile, and on the tiled path after each window of 32 tiles), so that
// `operator()` combines unchecked the values of at most 32 tiles with a settled state (Settled
// below).
// `kStretchesStayFinite = true` says that the combination of any stretch of a row is finite
// where the row's running combinations are (a sum's, up to its largest values, a maximum's, a
// log-sum-exp's), and cheap: the CPU launcher then scans stretches side by side, and scans an
// operator that does not say in order (a product, whose stretches stay finite in its state but
// whose combination costs more than the side-by-side segments save). On CUDA every operator's
// stretches are combined (warps, tiles), so an operator written for a scan there must keep them
// finite.
// `reverse` runs the scan from the end of each row: the gradient of a sum scan is the sum scan
// of the incoming gradient the other way (python/scale_lib/ops/ has the others'), so an op
// that has one has its vjp. Every element is read before it is written, by the block that writes
// it, so the output may be one of the inputs.
#ifndef SCALE_LIB_KERNELS_SCAN_H_
#define SCALE_LIB_KERNELS_SCAN_H_

#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>  // std::declval

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

// A running product, carried as m * 2^e (ScaledProduct): e is an exact integer, and only the
// output is rounded to C's range (Lower). Past +-kMaxExponent binary orders (far beyond any C's
// range) the product is taken as inf or 0 for good, as the product in C would be: on the CPU at
// every combination, on CUDA where the launchers settle a state (Settle: between tiles, as at
// most 32 tiles' values, each within 2^+-1075, cannot take e past int's range; in between e is
// exact, so a product that passes 2^29 orders and comes back before the next settling is the
// true product, rounded once, where the CPU gives inf or 0). The product of
// two m of magnitudes within [2^-kBound, 2^kBound] is a normal number, rounded as the exact product
// of the values is (the same bits as in order while that stays normal); moving a power of two
// between m and e is exact, a few integer instructions on the bits. Each device keeps the products
// within the bounds its own way:
//   - on CUDA, where the warps and tiles combine stretches and a branch costs every lane, every
//     m is within [1, 2) (or 0, inf, NaN): a product of two is within [1, 4), halved (exactly)
//     when it reaches 2;
//   - on the CPU, which scans a product in order (it does not declare kStretchesStayFinite: the
//     CPU's side-by-side segments pay for a cheap combination, not for this one), a value is
//     its own state, and m is the running product itself while that stays within the bounds;
//     when it leaves them, the product is taken again from both sides brought to [1, 2). A
//     predicted branch beside the chain of multiplications.
template <typename C>
struct ScaledProduct {
  C m;
  int e;
};

template <typename C>
struct ScanProd {
  using State = ScaledProduct<C>;
  static constexpr int kBound = sizeof(C) == 8 ? 510 : 62;
  static constexpr int kMaxExponent = 1 << 29;

  SCALE_LIB_HOST_DEVICE static State Identity() { return {C(1), 0}; }
  SCALE_LIB_HOST_DEVICE static State Lift(C v) {
#if defined(__CUDA_ARCH__)
    return Normalised(v, 0);
#else
    return {v, 0};
#endif
  }
  SCALE_LIB_HOST_DEVICE State operator()(State a, State b) const {
    const C m = a.m * b.m;
    // No overflow: a settled state's e is within kMaxExponent, and between two settlings (on CUDA
    // at most 32 tiles apart) a state adds at most about 2^23 binary orders a tile.
    const int e = a.e + b.e;
#if defined(__CUDA_ARCH__)
    const bool halve = (m < 0 ? -m : m) >= C(2);  // false for 0 and NaN; inf stays inf
    return {halve ? m * C(0.5) : m, e + (halve ? 1 : 0)};  // settled between tiles
#else
    if (InBounds(m)) return Saturated(m, e);  // a normal number: rounded as the exact product
    if ((!InBounds(a.m) && !Special(a.m)) || (!InBounds(b.m) && !Special(b.m))) {
      // A side beyond the bounds (a value, or a state past a product of two within them):
      // from both sides within [1, 2), as on CUDA.
      const State x = Normalised(a.m, a.e), y = Normalised(b.m, b.e);
      const State product = Normalised(x.m * y.m, x.e + y.e);
      return Saturated(product.m, product.e);
    }
    const State product = Normalised(m, e);  // within the bounds on both sides: only rescaled
    return Saturated(product.m, product.e);
#endif
  }
  // Saturated without a branch: the CUDA look-back settles once a window on its chain, whose
  // latency this adds to.
  SCALE_LIB_HOST_DEVICE static State Settle(State s) {
    const bool over = s.e > kMaxExponent;
    const bool under = s.e < -kMaxExponent;
    const C big = s.m != 0 ? s.m * static_cast<C>(INFINITY) : s.m;
    const C small = s.m - s.m == 0 ? s.m * C(0) : s.m;
    return {over ? big : (under ? small : s.m), over || under ? 0 : s.e};
  }
  // m * 2^e in C, rounded once.
  SCALE_LIB_HOST_DEVICE static C Lower(State s) {
    if (s.e == 0) return s.m;
    // With m within [1, 2), the first step is exact (m * 2^e1 is a normal number) and only the
    // second rounds (to a subnormal, 0 or inf past C's range; past both steps' reach the
    // result is that of the second alone).
#if defined(__CUDA_ARCH__)
    const State n = s;  // m within [1, 2) already
#else
    const State n = Normalised(s.m, s.e);
#endif
    const int e1 = n.e < 1 - kBias ? 1 - kBias : (n.e > kBias ? kBias : n.e);
    const int rest = n.e - e1;
    const int e2 = rest < 1 - kBias ? 1 - kBias : (rest > kBias ? kBias : rest);
    return n.m * Pow2(e1) * Pow2(e2);
  }

 private:
  using Bits = std::conditional_t<sizeof(C) == 8, unsigned long long, unsigned>;
  static constexpr int kFraction = sizeof(C) == 8 ? 52 : 23;  // the stored fraction's bits
  static constexpr int kBias = sizeof(C) == 8 ? 1023 : 127;
  static constexpr int kAllOnes = 2 * kBias + 1;  // the exponent field of inf and NaN

  SCALE_LIB_HOST_DEVICE static Bits ToBits(C v) {
    Bits bits;
    memcpy(&bits, &v, sizeof(C));
    return bits;
  }
  SCALE_LIB_HOST_DEVICE static C FromBits(Bits bits) {
    C v;
    memcpy(&v, &bits, sizeof(C));
    return v;
  }
  SCALE_LIB_HOST_DEVICE static int Field(C v) {
    return static_cast<int>(ToBits(v) >> kFraction) & kAllOnes;
  }
  // 2^k for k within [1 - kBias, kBias], exactly.
  SCALE_LIB_HOST_DEVICE static C Pow2(int k) {
    return FromBits(static_cast<Bits>(k + kBias) << kFraction);
  }
  // Past kMaxExponent binary orders either way the product is past C's range for good: it is
  // taken as the product in C takes it, inf or 0 of m's sign (0, inf and NaN stay), and e is 0.
  SCALE_LIB_HOST_DEVICE static State Saturated(C m, int e) {
    if (e >= -kMaxExponent && e <= kMaxExponent) return {m, e};
    if (e > 0) return {m != 0 ? m * static_cast<C>(INFINITY) : m, 0};
    return {m - m == 0 ? m * C(0) : m, 0};
  }
  // Whether m is 0, inf or NaN.
  SCALE_LIB_HOST_DEVICE static bool Special(C m) { return m == 0 || m - m != 0; }
  // Whether m is within the bounds (false for 0, inf and NaN).
  SCALE_LIB_HOST_DEVICE static bool InBounds(C m) {
    const C magnitude = m < 0 ? -m : m;
    return magnitude >= Pow2(-kBound) && magnitude <= Pow2(kBound);
  }
  // m * 2^e with m within [1, 2), exactly (the exponent moves from m to e); 0, inf and NaN stay
  // as they are. A branch only for a subnormal (an input).
  SCALE_LIB_HOST_DEVICE static State Normalised(C m, int e) {
    int field = Field(m);
    if (field == 0 && m != 0) {
      m *= Pow2(kFraction + 1);
      e -= kFraction + 1;
      field = Field(m);
    }
    const bool keep = field == 0 || field == kAllOnes;
    const Bits exponent_mask = static_cast<Bits>(kAllOnes) << kFraction;
    const C moved =
        FromBits((ToBits(m) & ~exponent_mask) | (static_cast<Bits>(kBias) << kFraction));
    return {keep ? m : moved, keep ? e : e + (field - kBias)};
  }
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

// How an operator carries its running combination: in State, from a value by Lift and back by
// Lower, where it declares one (ScanProd); else in C itself.
template <typename Op, typename C, typename = void>
struct ScanCarry {
  using State = C;
  SCALE_LIB_HOST_DEVICE static C Lift(C v) { return v; }
  SCALE_LIB_HOST_DEVICE static C Lower(C s) { return s; }
};
template <typename Op, typename C>
struct ScanCarry<Op, C, std::void_t<typename Op::State>> {
  using State = typename Op::State;
  SCALE_LIB_HOST_DEVICE static State Lift(C v) { return Op::Lift(v); }
  SCALE_LIB_HOST_DEVICE static C Lower(State s) { return Op::Lower(s); }
};

// A state carried past a tile, brought back within the operator's range (Op::Settle, where it
// declares one; the state itself where not).
template <typename Op, typename S, typename = void>
struct ScanSettle {
  SCALE_LIB_HOST_DEVICE static S Apply(S s) { return s; }
};
template <typename Op, typename S>
struct ScanSettle<Op, S, std::void_t<decltype(Op::Settle(std::declval<S>()))>> {
  SCALE_LIB_HOST_DEVICE static S Apply(S s) { return Op::Settle(s); }
};
template <typename Op, typename S>
SCALE_LIB_HOST_DEVICE S Settled(S s) {
  return ScanSettle<Op, S>::Apply(s);
}

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SCAN_H_
