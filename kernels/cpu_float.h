// Load/compute/store rules for CPU kernels.
//
// CPU kernels compute float16 and bfloat16 in float32 (as PyTorch does) and store the result
// rounded to nearest-even. The conversions are written out here because host compilers have no
// portable 16-bit float type and CPU-only builds have no CUDA headers.
#ifndef SCALE_LIB_KERNELS_CPU_FLOAT_H_
#define SCALE_LIB_KERNELS_CPU_FLOAT_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tvm_ffi_utils.h"

namespace scale_lib {
namespace cpu {

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));  // inf, nan
  if (exponent != 0) return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t bits = FloatToBits(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;  // nan stays a (quiet) nan
  // 65520 and above round (to nearest even) past the largest half, 65504: infinity.
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a multiple of 2^-24, rounded to nearest even. The
    // scaling by 2^24 is exact; a result of 1024 is the correct encoding of 2^-14.
    const float units = std::nearbyint(BitsToFloat(magnitude) * 16777216.0f);
    return sign | static_cast<uint16_t>(units);
  }
  magnitude += 0xfffu + ((magnitude >> 13) & 1u);  // round to nearest even at bit 13
  return sign | static_cast<uint16_t>((magnitude - 0x38000000u) >> 13);
}

inline float BFloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits = FloatToBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even at bit 16
  return static_cast<uint16_t>(bits >> 16);
}

// FloatMath<T>: Compute is the arithmetic type; Load/Store convert to and from the storage type.
template <typename T>
struct FloatMath {
  using Compute = T;
  static T Load(T v) { return v; }
  static T Store(T v) { return v; }
};

template <>
struct FloatMath<float16_t> {
  using Compute = float;
  static float Load(float16_t v) { return HalfToFloat(v.bits); }
  static float16_t Store(float v) { return float16_t{FloatToHalf(v)}; }
};

template <>
struct FloatMath<bfloat16_t> {
  using Compute = float;
  static float Load(bfloat16_t v) { return BFloat16ToFloat(v.bits); }
  static bfloat16_t Store(float v) { return bfloat16_t{FloatToBFloat16(v)}; }
};

}  // namespace cpu
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_CPU_FLOAT_H_
