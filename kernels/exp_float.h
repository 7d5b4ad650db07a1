// SPDX-License-Identifier: Apache-2.0
// Exp: exp for float and double in plain C++ (no intrinsics, no branches, no table), so that a
// loop calling it vectorises for whatever SIMD the loop is compiled for, and gives the same bits on
// every one of them: it uses only IEEE additions and multiplications, which the library compiles
// without contraction into fused multiply-adds (-ffp-contract=off), and integer bit operations.
//
// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 split in a
// short head, whose product with n is exact, and a tail), exp(r) by a polynomial (float: degree
// 7, the Cephes single-precision coefficients; double: the Taylor series to degree 13). 2^n is
// applied in two halves, so that results below the smallest normal number (subnormals) are
// rounded once and results past the largest are infinity. exp(NaN) is NaN, exp(+inf) inf,
// exp(-inf) 0. The tests check its accuracy through the ops that call it, against float64 (for
// double, against NumPy's exp).
#ifndef SCALE_LIB_KERNELS_EXP_FLOAT_H_
#define SCALE_LIB_KERNELS_EXP_FLOAT_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace scale_lib {
namespace exp_float {

[[gnu::always_inline]] inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

[[gnu::always_inline]] inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// 2^k for k in [-126, 127], built from its exponent bits.
[[gnu::always_inline]] inline float Pow2(uint32_t k) { return FromBits((k + 127u) << 23); }

// 2^k for k in [-1022, 1023].
[[gnu::always_inline]] inline double Pow2Double(uint64_t k) {
  const uint64_t bits = (k + 1023u) << 52;
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
}

}  // namespace exp_float

// The lowest input ExpReduce takes as it is: a lower one is taken as this one. exp(x) there is
// below half the smallest subnormal even times 2^8 (float) or 2^9 (double), so a product of up to
// that magnitude with exp(x) rounds to zero, as x * exp(x) there does.
template <typename C>
inline constexpr C kExpLowest = std::is_same_v<C, float> ? C(-110) : C(-752);

// exp(x) as p * 2^n, p in [sqrt(1/2), sqrt(2)] (so that a product with p can be taken before
// the scaling: rounded once, even where the result is subnormal). n is a two's complement
// integer in [-159, 129].
struct ExpFloatParts {
  float p;
  uint32_t n;
};

// ExpFloatReduce for an x that needs no clamp from above: at most 89, or NaN.
[[gnu::always_inline]] inline ExpFloatParts ExpFloatReduceBelowOverflow(float x) {
  using exp_float::Bits;
  // exp is below half the smallest subnormal under -104; the clamp leaves room for a product with
  // p of up to 2^8 in magnitude (which exp(x) times a number of magnitude up to 110 needs). A NaN
  // fails the comparison and stays a NaN.
  x = x < kExpLowest<float> ? kExpLowest<float> : x;
  // Adding 1.5 * 2^23 rounds x / ln 2 to an integer (to nearest, the library's rounding mode),
  // which then sits in the low bits of the sum.
  constexpr float kShifter = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kShifter;
  const float n = shifted - kShifter;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r2 + r) + 1.0f;
  return {p, Bits(shifted) - Bits(kShifter)};
}

[[gnu::always_inline]] inline ExpFloatParts ExpFloatReduce(float x) {
  // exp is above the largest float over 89. A NaN fails the comparison and stays a NaN.
  return ExpFloatReduceBelowOverflow(x > 89.0f ? 89.0f : x);
}

// v * 2^n for n in [-159, 129], in two steps of at most 2^80 in magnitude each: one rounding
// (the last), and infinity past the largest float.
[[gnu::always_inline]] inline float ScaleByPow2(float v, uint32_t n) {
  const auto half = static_cast<uint32_t>(static_cast<int32_t>(n) >> 1);  // rounds down
  return v * exp_float::Pow2(half) * exp_float::Pow2(n - half);
}

[[gnu::always_inline]] inline float ExpFloat(float x) {
  const ExpFloatParts e = ExpFloatReduce(x);
  return ScaleByPow2(e.p, e.n);
}

// exp(x) for double as p * 2^n, the same scheme as ExpFloatReduce: n = round(x / ln 2) (ln 2
// split as fdlibm splits it: a head with 21 trailing zero bits, whose product with any n here is
// exact, and a tail), and exp(r) for |r| <= ln2/2 by its Taylor series to degree 13 (the first
// term left out, r^14 / 14!, is under 0.04 ulp of the result), summed as 1 + (r + r^2 q(r)), as
// the float one is. n is a two's complement integer in [-1085, 1024].
struct ExpDoubleParts {
  double p;
  uint64_t n;
};

// The double ExpReduce for an x that needs no clamp from above: at most 710, or NaN.
[[gnu::always_inline]] inline ExpDoubleParts ExpDoubleReduceBelowOverflow(double x) {
  // exp is below half the smallest subnormal under -745.2; the clamp leaves room for a product
  // with p of up to 2^9 (kExpLowest).
  x = x < kExpLowest<double> ? kExpLowest<double> : x;
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
  const double shifted = x * 1.4426950408889634074 + kShifter;
  const double n = shifted - kShifter;
  const double r = (x - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  double q = 1.0 / 6227020800.0;  // 1/13!
  q = q * r + 1.0 / 479001600.0;
  q = q * r + 1.0 / 39916800.0;
  q = q * r + 1.0 / 3628800.0;
  q = q * r + 1.0 / 362880.0;
  q = q * r + 1.0 / 40320.0;
  q = q * r + 1.0 / 5040.0;
  q = q * r + 1.0 / 720.0;
  q = q * r + 1.0 / 120.0;
  q = q * r + 1.0 / 24.0;
  q = q * r + 1.0 / 6.0;
  q = q * r + 0.5;
  uint64_t shifted_bits, shifter_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
  std::memcpy(&shifter_bits, &kShifter, sizeof(shifter_bits));
  return {(q * (r * r) + r) + 1.0, shifted_bits - shifter_bits};
}

[[gnu::always_inline]] inline ExpDoubleParts ExpReduce(double x) {
  // exp is above the largest double over 709.8.
  return ExpDoubleReduceBelowOverflow(x > 710.0 ? 710.0 : x);
}

// v * 2^n for n in [-1085, 1024], in two steps (powers of two from 2^-543 to 2^512): one
// rounding, the last, and infinity past the largest double.
[[gnu::always_inline]] inline double ScaleByPow2(double v, uint64_t n) {
  // floor(n / 2), shifted as a positive number: AVX2 has no 64-bit arithmetic shift.
  const uint64_t half = ((n + 2048u) >> 1) - 1024u;
  return v * exp_float::Pow2Double(half) * exp_float::Pow2Double(n - half);
}

[[gnu::always_inline]] inline ExpFloatParts ExpReduce(float x) { return ExpFloatReduce(x); }

// Exp for float and for double: branch-free, so loops of it vectorise.
[[gnu::always_inline]] inline float Exp(float x) { return ExpFloat(x); }
[[gnu::always_inline]] inline double Exp(double x) {
  const ExpDoubleParts e = ExpReduce(x);
  return ScaleByPow2(e.p, e.n);
}

// ExpReduce and Exp for an x <= 0 (or NaN), such as x - max(x) or -|x|: the same bits, without
// the clamp from above, which such an x never reaches (a select that took 16% of the time of an
// AVX-512 loop of float exp).
[[gnu::always_inline]] inline ExpFloatParts ExpReduceNonPositive(float x) {
  return ExpFloatReduceBelowOverflow(x);
}
[[gnu::always_inline]] inline ExpDoubleParts ExpReduceNonPositive(double x) {
  return ExpDoubleReduceBelowOverflow(x);
}
template <typename C>
[[gnu::always_inline]] inline C ExpNonPositive(C x) {
  const auto e = ExpReduceNonPositive(x);
  return ScaleByPow2(e.p, e.n);
}

// 1 + exp(x) from ExpReduceNonPositive(x)'s p and n (n <= 0): 1 + p * 2^n with 2^n taken as at
// least the smallest normal power of two, since 1 plus any number that small is 1. One
// multiplication where ScaleByPow2 takes two, and the same bits.
[[gnu::always_inline]] inline float OnePlusScaled(float p, uint32_t n) {
  const int32_t k = static_cast<int32_t>(n) < -126 ? -126 : static_cast<int32_t>(n);
  return 1.0f + p * exp_float::Pow2(static_cast<uint32_t>(k));
}
[[gnu::always_inline]] inline double OnePlusScaled(double p, uint64_t n) {
  const int64_t k = static_cast<int64_t>(n) < -1022 ? -1022 : static_cast<int64_t>(n);
  return 1.0 + p * exp_float::Pow2Double(static_cast<uint64_t>(k));
}

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_EXP_FLOAT_H_
