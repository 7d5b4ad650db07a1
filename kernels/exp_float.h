// SPDX-License-Identifier: Apache-2.0
// ExpFloat: exp for float in plain C++ (no intrinsics, no branches, no table), so that a loop
// calling it vectorises for whatever SIMD the loop is compiled for, and gives the same bits on
// every one of them: it uses only IEEE additions and multiplications, which the library compiles
// without contraction into fused multiply-adds (-ffp-contract=off), and integer bit operations.
//
// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 split in a
// short head, whose product with n is exact, and a tail), exp(r) by a degree-7 polynomial (the
// Cephes single-precision coefficients). 2^n is applied in two halves, so that results below the
// smallest normal float (subnormals) are rounded once and results past the largest are infinity.
// exp(NaN) is NaN, exp(+inf) inf, exp(-inf) 0. The tests check its accuracy through the ops
// that call it, against float64.
#ifndef SCALE_LIB_KERNELS_EXP_FLOAT_H_
#define SCALE_LIB_KERNELS_EXP_FLOAT_H_

#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace exp_float

// exp(x) as p * 2^n, p in [sqrt(1/2), sqrt(2)] (so that a product with p can be taken before
// the scaling: rounded once, even where the result is subnormal). n is a two's complement
// integer in [-159, 129].
struct ExpFloatParts {
  float p;
  uint32_t n;
};

[[gnu::always_inline]] inline ExpFloatParts ExpFloatReduce(float x) {
  using exp_float::Bits;
  // exp is below half the smallest subnormal under -104 and above the largest float over 89; the
  // low clamp leaves room for a product with p of up to 2^8 in magnitude (which exp(x) times a
  // number of magnitude up to 110 needs). A NaN fails both comparisons and stays a NaN.
  x = x < -110.0f ? -110.0f : x;
  x = x > 89.0f ? 89.0f : x;
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

// The same interface for double, where the C library's exp is used whole.
struct ExpDoubleParts {
  double p;
  uint32_t n;
};
[[gnu::always_inline]] inline ExpDoubleParts ExpReduce(double x) { return {std::exp(x), 0}; }
[[gnu::always_inline]] inline double ScaleByPow2(double v, uint32_t) { return v; }
[[gnu::always_inline]] inline ExpFloatParts ExpReduce(float x) { return ExpFloatReduce(x); }

// Exp: ExpFloat for float, the C library's exp for double.
[[gnu::always_inline]] inline float Exp(float x) { return ExpFloat(x); }
[[gnu::always_inline]] inline double Exp(double x) { return std::exp(x); }

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_EXP_FLOAT_H_
