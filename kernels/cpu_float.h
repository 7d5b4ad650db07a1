// SPDX-License-Identifier: Apache-2.0
// Load/compute/store rules for CPU kernels.
//
// CPU kernels compute float16 and bfloat16 in float32 (as PyTorch does) and store the result
// rounded to nearest-even. The conversions are written out here because host compilers have no
// portable 16-bit float type and CPU-only builds have no CUDA headers.
#ifndef SCALE_LIB_KERNELS_CPU_FLOAT_H_
#define SCALE_LIB_KERNELS_CPU_FLOAT_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SCALE_LIB_X86 1
#endif

#include "tvm_ffi_utils.h"

namespace scale_lib {
namespace host {

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
  // A nan stays a quiet nan with the top of its payload, as the F16C instruction makes it.
  if (magnitude > 0x7f800000u)
    return sign | 0x7e00u | static_cast<uint16_t>((magnitude >> 13) & 0x3ffu);
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

// Branch-free, so that loops of it vectorise.
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t bits = FloatToBits(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;  // nearest even
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// A double rounded to float toward zero, then its last bit set if that was inexact ("round to
// odd"). Rounding the result again to nearest-even at 16 bits (or any width at least two bits
// narrower than float's 24) gives the double's correctly rounded value: one rounding, not two.
inline float DoubleToFloatRoundToOdd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return BitsToFloat(FloatToBits(f) | 1u);
}

// FloatMath<T>: Compute is the arithmetic type; Load/Store convert to and from the storage type;
// StoreDouble rounds a double result (a sum kept in double) to T once.
template <typename T>
struct FloatMath {
  using Compute = T;
  static T Load(T v) { return v; }
  static T Store(T v) { return v; }
  static T StoreDouble(double v) { return static_cast<T>(v); }
};

template <>
struct FloatMath<float16_t> {
  using Compute = float;
  static float Load(float16_t v) { return HalfToFloat(v.bits); }
  static float16_t Store(float v) { return float16_t{FloatToHalf(v)}; }
  static float16_t StoreDouble(double v) { return Store(DoubleToFloatRoundToOdd(v)); }
};

template <>
struct FloatMath<bfloat16_t> {
  using Compute = float;
  static float Load(bfloat16_t v) { return BFloat16ToFloat(v.bits); }
  static bfloat16_t Store(float v) { return bfloat16_t{FloatToBFloat16(v)}; }
  static bfloat16_t StoreDouble(double v) { return Store(DoubleToFloatRoundToOdd(v)); }
};

template <typename T>
using Compute = typename FloatMath<T>::Compute;

// ---------------------------------------------------------------------------------------------
// Instruction sets chosen at run time. The library is built for the baseline of its target
// (x86-64: SSE2; aarch64: NEON); on x86-64 its hot loops are also compiled for AVX2 (with F16C
// and FMA) and for AVX-512, and the widest the CPU has runs. Every level computes the same
// operations in the same order (the library is compiled with -ffp-contract=off; a fused
// multiply-add only where it rounds as the two operations do, kHasFma), so every level gives the
// same bits, NaN results aside: where two different NaNs (sign, payload) meet in one operation,
// which one comes out follows the operand order each clone was compiled to, and a signalling
// float16 nan comes out quiet from F16C (as from arithmetic). SCALE_LIB_CPU_SIMD=baseline|avx2 caps
// the level (read once, at the first call; any other value is no cap): to compare the levels, or to
// rule one out.
// ---------------------------------------------------------------------------------------------
enum class SimdLevel : int { kBaseline = 0, kAVX2 = 1, kAVX512 = 2 };

inline SimdLevel SimdAllowed() {
  static const SimdLevel allowed = [] {
    const char* env = std::getenv("SCALE_LIB_CPU_SIMD");
    if (env != nullptr && std::strcmp(env, "baseline") == 0) return SimdLevel::kBaseline;
    if (env != nullptr && std::strcmp(env, "avx2") == 0) return SimdLevel::kAVX2;
    return SimdLevel::kAVX512;
  }();
  return allowed;
}

// ---------------------------------------------------------------------------------------------
// Bulk conversion between a 16-bit storage type and float32, for kernels that work on rows or
// chunks, with the CPU's vector instructions where it has them (checked once, at run time: the
// library itself is built for the baseline x86-64, where these loops do not vectorise): float16
// with F16C, bfloat16 with AVX2, both with AVX-512. LoadN and StoreN (below) choose.
// ---------------------------------------------------------------------------------------------
#if defined(SCALE_LIB_X86)
// F16C is read from CPUID (leaf 1, ECX bit 29): GCC before 11 has no __builtin_cpu_supports
// ("f16c"), and the release build's compiler is GCC 10. "avx" also checks that the OS saves the
// YMM registers.
inline bool HasF16C() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return SimdAllowed() >= SimdLevel::kAVX2 && __builtin_cpu_supports("avx") &&
           __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }();
  return has;
}

inline bool HasAVX2() {
  static const bool has = SimdAllowed() >= SimdLevel::kAVX2 && __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma");
  return has;
}

// Whether the CPU runs the loops compiled with SCALE_LIB_TARGET_AVX2 (RunWidest's AVX2 level).
inline bool HasAVX2AndF16C() { return HasAVX2() && HasF16C(); }

// Whether it runs those compiled for AVX-512 (F, BW, VL and DQ: Skylake-SP, Zen 4 and later).
// __builtin_cpu_supports also checks that the OS saves the ZMM registers.
inline bool HasAVX512() {
  static const bool has = SimdAllowed() >= SimdLevel::kAVX512 && HasAVX2AndF16C() &&
                          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}

// The widest level this CPU runs, as SimdAllowed() caps it.
inline SimdLevel CpuSimd() {
  if (HasAVX512()) return SimdLevel::kAVX512;
  return HasAVX2AndF16C() ? SimdLevel::kAVX2 : SimdLevel::kBaseline;
}

// The target attributes of the two levels above the baseline, and of the float16 conversions
// alone (HasF16C()).
#define SCALE_LIB_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))
#define SCALE_LIB_TARGET_AVX512 \
  __attribute__((               \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,fma,prefer-vector-width=512")))
#define SCALE_LIB_TARGET_F16C __attribute__((target("avx,f16c")))

// GCC's AVX-512 intrinsics start from an "undefined" vector that its -Wmaybe-uninitialized
// reports wherever they are inlined (GCC bug 105593), here silenced.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// One block of kLanes values of a Format (Half, BFloat16) converted by ConvertLanes, one overload
// for each format, width and direction; one loop, ConvertN, serves them all. Each gives the
// results of the scalar conversions above, but for a signalling float16 nan, which the F16C and
// AVX-512 instructions return quiet (as any arithmetic on it would make it).
struct Half {};
struct BFloat16 {};
template <int kLanes>
struct Lanes {};
constexpr int kNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

SCALE_LIB_TARGET_F16C inline void ConvertLanes(Half, const uint16_t* src, float* dst, Lanes<8>) {
  _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
}

SCALE_LIB_TARGET_F16C inline void ConvertLanes(Half, const float* src, uint16_t* dst, Lanes<8>) {
  const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src), kNearestEven);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), h);
}

SCALE_LIB_TARGET_AVX512 inline void ConvertLanes(Half, const uint16_t* src, float* dst, Lanes<16>) {
  _mm512_storeu_ps(dst, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))));
}

SCALE_LIB_TARGET_AVX512 inline void ConvertLanes(Half, const float* src, uint16_t* dst, Lanes<16>) {
  const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src), kNearestEven);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
}

SCALE_LIB_TARGET_AVX2 inline void ConvertLanes(BFloat16, const uint16_t* src, float* dst,
                                               Lanes<8>) {
  const __m256i wide =
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  _mm256_storeu_ps(dst, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
}

// FloatToBFloat16, eight at a time: the same rounding and the same quiet nan.
SCALE_LIB_TARGET_AVX2 inline void ConvertLanes(BFloat16, const float* src, uint16_t* dst,
                                               Lanes<8>) {
  const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(src));
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
  // Signed compare: both sides are below 2^31.
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet, is_nan);
  // Every value fits 16 bits, so the saturating pack keeps it; the permute joins the halves.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(result, result), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
}

// The 16-lane bfloat16 conversions are written with GCC's vector extensions, which compile to
// what the intrinsics would at this width (at 8 lanes the extensions narrow float to bfloat16 in
// more instructions: 5-8% slower, so the AVX2 ones above keep their intrinsics).
using U32x16 = uint32_t __attribute__((vector_size(64)));
using I32x16 = int32_t __attribute__((vector_size(64)));
using U16x16 = uint16_t __attribute__((vector_size(32)));

SCALE_LIB_TARGET_AVX512 inline void ConvertLanes(BFloat16, const uint16_t* src, float* dst,
                                                 Lanes<16>) {
  U16x16 half;
  std::memcpy(&half, src, sizeof(half));
  const U32x16 bits = __builtin_convertvector(half, U32x16) << 16;
  std::memcpy(dst, &bits, sizeof(bits));
}

SCALE_LIB_TARGET_AVX512 inline void ConvertLanes(BFloat16, const float* src, uint16_t* dst,
                                                 Lanes<16>) {
  U32x16 bits;
  std::memcpy(&bits, src, sizeof(bits));
  const U32x16 high = bits >> 16;
  const U32x16 rounded = (bits + 0x7fff + (high & 1)) >> 16;
  const I32x16 is_nan = (I32x16)(bits & 0x7fffffff) > 0x7f800000;
  // Every value fits 16 bits: narrowing keeps it.
  const U16x16 result = __builtin_convertvector(is_nan ? (high | 0x40) : rounded, U16x16);
  std::memcpy(dst, &result, sizeof(result));
}

// Inlined into the entry points below, whose target lets ConvertLanes inline in turn.
template <typename Format, int kLanes, typename Src, typename Dst>
[[gnu::always_inline]] inline void ConvertN(const Src* src, Dst* dst, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) ConvertLanes(Format{}, src + i, dst + i, Lanes<kLanes>{});
  if (i < n) {  // the tail, through a zero-padded block: the same instructions, the same results
    Src block[kLanes] = {};
    Dst converted[kLanes];
    std::memcpy(block, src + i, static_cast<size_t>(n - i) * sizeof(Src));
    ConvertLanes(Format{}, block, converted, Lanes<kLanes>{});
    std::memcpy(dst + i, converted, static_cast<size_t>(n - i) * sizeof(Dst));
  }
}

template <typename Src, typename Dst>
SCALE_LIB_TARGET_F16C void ConvertHalfF16C(const Src* src, Dst* dst, int64_t n) {
  ConvertN<Half, 8>(src, dst, n);
}

template <typename Src, typename Dst>
SCALE_LIB_TARGET_AVX2 void ConvertBFloat16AVX2(const Src* src, Dst* dst, int64_t n) {
  ConvertN<BFloat16, 8>(src, dst, n);
}

template <typename Format, typename Src, typename Dst>
SCALE_LIB_TARGET_AVX512 void ConvertAVX512(const Src* src, Dst* dst, int64_t n) {
  ConvertN<Format, 16>(src, dst, n);
}

// sum_of_squares::BFloat16PairsToLanes for 16 values in float64 at AVX-512: a float64 conversion
// of eight floats from one 256-bit register each (GCC's vector extension split it in two).
SCALE_LIB_TARGET_AVX512 inline void BFloat16PairsToDoubles(const uint16_t* src, double* dst) {
  const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  const __m256i first = _mm256_slli_epi32(words, 16);
  const __m256i second = _mm256_and_si256(words, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
  _mm512_storeu_pd(dst, _mm512_cvtps_pd(_mm256_castsi256_ps(first)));
  _mm512_storeu_pd(dst + 8, _mm512_cvtps_pd(_mm256_castsi256_ps(second)));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif

// The level a RunWidest body is compiled for, as a type (Simd<SimdLevel::kAVX512>): a body that
// takes it can call what inlines only at that level (ConvertBlock).
template <SimdLevel kLevel>
using Simd = std::integral_constant<SimdLevel, kLevel>;

// Whether a level's instructions include fused multiply-add (__builtin_fma inline, and
// vectorised): x86-64's AVX2 and AVX-512 clones, and aarch64 (where every CPU has it). Only code
// that asks for it uses it: the library is built with -ffp-contract=off.
template <SimdLevel kLevel>
inline constexpr bool kHasFma =
#if defined(SCALE_LIB_X86)
    kLevel != SimdLevel::kBaseline;
#elif defined(__FP_FAST_FMA)
    true;
#else
    false;
#endif

// The bytes of one vector register at a level: the width for GCC's vector extension in a loop
// compiled for it. A wider vector is split by GCC, which then made selects scalar (a row's
// running maximum at AVX2 and the baseline took 5-10x its AVX-512 time).
template <SimdLevel kLevel>
inline constexpr int kVectorBytes =
    kLevel == SimdLevel::kAVX512 ? 64 : (kLevel == SimdLevel::kAVX2 ? 32 : 16);

template <SimdLevel kLevel, typename Body>
[[gnu::always_inline]] inline void CallAt(const Body& body) {
  if constexpr (std::is_invocable_v<const Body&, Simd<kLevel>>) {
    body(Simd<kLevel>{});
  } else {
    body();
  }
}

#if defined(SCALE_LIB_X86)
template <typename Body>
SCALE_LIB_TARGET_AVX2 void RunAVX2(const Body& body) {
  CallAt<SimdLevel::kAVX2>(body);
}

template <typename Body>
SCALE_LIB_TARGET_AVX512 void RunAVX512(const Body& body) {
  CallAt<SimdLevel::kAVX512>(body);
}
#endif

// What a lambda given to RunWidest is marked with, and every function it calls for its loops:
// inlined into each clone below, so compiled for that clone's instruction set.
#define SCALE_LIB_INLINE __attribute__((always_inline))

// Runs body() compiled for the widest level this CPU has (CpuSimd()): one copy of body per level,
// each its own function, on x86-64; the baseline elsewhere. body is a lambda marked
// SCALE_LIB_INLINE whose loops are in functions marked [[gnu::always_inline]]:
//   host::RunWidest([&]() SCALE_LIB_INLINE { MyRows(x, out, cols, begin, end); });
// A body that takes an argument is given its level (Simd<...>), for ConvertBlock:
//   host::RunWidest([&](auto level) SCALE_LIB_INLINE { MyRows(level, x, out, cols, begin, end); });
template <typename Body>
void RunWidest(const Body& body) {
#if defined(SCALE_LIB_X86)
  switch (CpuSimd()) {
    case SimdLevel::kAVX512:
      return RunAVX512(body);
    case SimdLevel::kAVX2:
      return RunAVX2(body);
    case SimdLevel::kBaseline:
      break;
  }
#endif
  CallAt<SimdLevel::kBaseline>(body);
}

// ConvertBlock(level, src, dst): kBlock values of a 16-bit type to float, or back (the pointers'
// types say which), by instructions inlined into the caller's loop, compiled for `level` (the
// caller is a RunWidest body, given its level). A loop that converts, computes and stores a block
// at a time reads and writes memory as one stream, as a float loop does; converting a chunk at a
// time (LoadN, StoreN) makes the memory wait in turns (about 1.3x the time for 8 MB of bfloat16
// on one core). The same results as LoadN and StoreN at every level (a signalling float16 nan
// aside, see ConvertLanes).
constexpr int kBlock = 16;

#if defined(SCALE_LIB_X86)
// The elements as ConvertLanes takes them: a 16-bit type's as its bits, float's as they are.
template <typename T>
[[gnu::always_inline]] inline auto* LaneBits(T* p) {
  if constexpr (std::is_same_v<std::remove_const_t<T>, float>) {
    return p;
  } else {
    using Bits = std::conditional_t<std::is_const_v<T>, const uint16_t, uint16_t>;
    return reinterpret_cast<Bits*>(p);
  }
}
#endif

template <typename Src, typename Dst, SimdLevel kLevel>
[[gnu::always_inline]] inline void ConvertBlock(Simd<kLevel>, const Src* src, Dst* dst) {
  constexpr bool kLoad = std::is_same_v<Dst, float>;
  using T = std::conditional_t<kLoad, Src, Dst>;
#if defined(SCALE_LIB_X86)
  using Format = std::conditional_t<std::is_same_v<T, float16_t>, Half, BFloat16>;
  if constexpr (kLevel == SimdLevel::kAVX512) {
    return ConvertLanes(Format{}, LaneBits(src), LaneBits(dst), Lanes<16>{});
  } else if constexpr (kLevel == SimdLevel::kAVX2) {
    ConvertLanes(Format{}, LaneBits(src), LaneBits(dst), Lanes<8>{});
    return ConvertLanes(Format{}, LaneBits(src + 8), LaneBits(dst + 8), Lanes<8>{});
  } else if constexpr (std::is_same_v<T, float16_t>) {
    // A CPU with F16C but not AVX2 (Ivy Bridge) runs the baseline loops: F16C, not inlined.
    if (HasF16C()) return ConvertHalfF16C(LaneBits(src), LaneBits(dst), kBlock);
  }
#endif
  for (int k = 0; k < kBlock; ++k) {
    if constexpr (kLoad) {
      dst[k] = FloatMath<T>::Load(src[k]);
    } else {
      dst[k] = FloatMath<T>::Store(src[k]);
    }
  }
}

template <typename T>
void LoadN(const T* src, typename FloatMath<T>::Compute* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float16_t>) {
#if defined(SCALE_LIB_X86)
    const auto* bits = reinterpret_cast<const uint16_t*>(src);
    if (HasAVX512()) return ConvertAVX512<Half>(bits, dst, n);
    if (HasF16C()) return ConvertHalfF16C(bits, dst, n);
#endif
    for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i].bits);
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
#if defined(SCALE_LIB_X86)
    const auto* bits = reinterpret_cast<const uint16_t*>(src);
    if (HasAVX512()) return ConvertAVX512<BFloat16>(bits, dst, n);
    if (HasAVX2()) return ConvertBFloat16AVX2(bits, dst, n);
#endif
    for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(src[i].bits);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = FloatMath<T>::Load(src[i]);
  }
}

template <typename T>
void StoreN(const typename FloatMath<T>::Compute* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float16_t>) {
#if defined(SCALE_LIB_X86)
    auto* bits = reinterpret_cast<uint16_t*>(dst);
    if (HasAVX512()) return ConvertAVX512<Half>(src, bits, n);
    if (HasF16C()) return ConvertHalfF16C(src, bits, n);
#endif
    for (int64_t i = 0; i < n; ++i) dst[i].bits = FloatToHalf(src[i]);
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
#if defined(SCALE_LIB_X86)
    auto* bits = reinterpret_cast<uint16_t*>(dst);
    if (HasAVX512()) return ConvertAVX512<BFloat16>(src, bits, n);
    if (HasAVX2()) return ConvertBFloat16AVX2(src, bits, n);
#endif
    for (int64_t i = 0; i < n; ++i) dst[i].bits = FloatToBFloat16(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = FloatMath<T>::Store(src[i]);
  }
}

// Sum of squares in the accumulation type A of n values of storage type T, in kLanes independent
// partial sums (value i goes to lane i % kLanes, a bfloat16 to another lane of its group of 16:
// BFloat16PairsToLanes; the last n % kLanes values are summed in order, then the lanes), so
// the loop vectorises without reassociation (no -ffast-math): the order is fixed and the result
// deterministic. Where the CPU has AVX2 (and F16C) or AVX-512 the same operations run on wider
// vectors (RunWidest), and 16-bit values convert exactly, so the bits are the same.
namespace sum_of_squares {

// 32 lanes: enough independent sums to keep the adds busy (doubles: 4 AVX-512, 8 AVX2 vectors;
// floats: 2 and 4).
constexpr int kLanes = 32;

// Whether the square of every C is exact in A (a float's in double: 48 bits of 53, and twice the
// exponent range). Then a fused multiply-add rounds once, where the sum rounds: the same bits.
template <typename A, typename C>
inline constexpr bool kSquareExact =
    std::numeric_limits<A>::digits >= 2 * std::numeric_limits<C>::digits &&
    std::numeric_limits<A>::max_exponent >= 2 * std::numeric_limits<C>::max_exponent &&
    std::numeric_limits<A>::min_exponent - std::numeric_limits<A>::digits <=
        2 * (std::numeric_limits<C>::min_exponent - std::numeric_limits<C>::digits);

// The kLanes bfloat16 values of v, in type A, in the order of the lanes they go to: in each group
// of 16, values 0, 2, ..., 14 to its lanes 0-7, values 1, 3, ..., 15 to lanes 8-15. A bfloat16 is
// the top half of a float, so a 32-bit word of two of them becomes two floats by a shift and a
// mask, with no shuffle; converted in order (ConvertBlock), the float64 sum took three shuffles a
// block to widen and one to split, on one port of an AVX-512 core. GCC's vector extension: as
// plain loops, GCC gathered the words one at a time.
template <SimdLevel kLevel, typename A>
[[gnu::always_inline]] inline void BFloat16PairsToLanes(Simd<kLevel>, const bfloat16_t* v,
                                                        A* values) {
  static_assert(kLanes % 16 == 0, "the lanes are whole groups of 16");
  // A word's first value is its low half only on a little-endian CPU (x86-64, aarch64 Linux).
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the lanes assume little-endian words");
  typedef uint32_t Words __attribute__((vector_size(32)));
  typedef float Floats __attribute__((vector_size(32)));
  typedef A Wide __attribute__((vector_size(8 * sizeof(A))));
  for (int group = 0; group < kLanes / 16; ++group) {
#if defined(SCALE_LIB_X86)
    if constexpr (kLevel == SimdLevel::kAVX512 && std::is_same_v<A, double>) {
      BFloat16PairsToDoubles(LaneBits(v + 16 * group), values + 16 * group);
      continue;
    }
#endif
    Words words;
    std::memcpy(&words, v + 16 * group, sizeof(words));
    const Wide first = __builtin_convertvector(reinterpret_cast<Floats>(words << 16), Wide);
    const Wide second =
        __builtin_convertvector(reinterpret_cast<Floats>(words & 0xFFFF0000u), Wide);
    std::memcpy(values + 16 * group, &first, sizeof(first));
    std::memcpy(values + 16 * group + 8, &second, sizeof(second));
  }
}

// lanes[k] += v[i]^2 for i % kLanes == k (a bfloat16's lane: BFloat16PairsToLanes), over the whole
// multiples of kLanes of v (`whole` values). 16-bit values are converted in registers. A square
// exact in A is added by the level's fused multiply-add where it has one: one instruction for two
// (float32 rows summed in double took 0.75x the time on one core with AVX-512).
template <SimdLevel kLevel, typename A, typename T>
[[gnu::always_inline]] inline void AddWholeLanes(Simd<kLevel> level, A* lanes, const T* v,
                                                 int64_t whole) {
  using C = Compute<T>;
  constexpr bool kFused = kHasFma<kLevel> && kSquareExact<A, C>;
  static_assert(kLanes % kBlock == 0, "a lane group is whole blocks of ConvertBlock");
  A partial[kLanes];
  for (int k = 0; k < kLanes; ++k) partial[k] = lanes[k];  // a local copy stays in registers
  for (int64_t i = 0; i < whole; i += kLanes) {
    [[maybe_unused]] C converted[std::is_same_v<T, float16_t> ? kLanes : 1];  // float16 only
    [[maybe_unused]] A widened[std::is_same_v<T, bfloat16_t> ? kLanes : 1];
    const auto add_squares = [&](const auto* lane_values) SCALE_LIB_INLINE {
      for (int k = 0; k < kLanes; ++k) {
        const A value = static_cast<A>(lane_values[k]);
        if constexpr (kFused) {
          partial[k] = __builtin_fma(value, value, partial[k]);
        } else {
          partial[k] += value * value;
        }
      }
    };
    if constexpr (std::is_same_v<T, bfloat16_t>) {
      BFloat16PairsToLanes(level, v + i, widened);
      add_squares(widened);
    } else if constexpr (std::is_same_v<T, C>) {
      add_squares(v + i);
    } else {
      for (int b = 0; b < kLanes; b += kBlock) ConvertBlock(level, v + i + b, converted + b);
      add_squares(converted);
    }
  }
  for (int k = 0; k < kLanes; ++k) lanes[k] = partial[k];
}

}  // namespace sum_of_squares

template <typename A, typename T>
A SumOfSquares(const T* v, int64_t n) {
  using sum_of_squares::kLanes;
  A lanes[kLanes] = {};
  const int64_t whole = n - n % kLanes;
  RunWidest([&](auto level)
                SCALE_LIB_INLINE { sum_of_squares::AddWholeLanes(level, lanes, v, whole); });
  A sum = 0;
  for (int64_t i = whole; i < n; ++i) {
    const A value = static_cast<A>(FloatMath<T>::Load(v[i]));
    sum += value * value;
  }
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

}  // namespace host
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_CPU_FLOAT_H_
