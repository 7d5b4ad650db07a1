// SPDX-License-Identifier: Apache-2.0
// softmax over the last dimension, compiled at run time by NVRTC (python/scale_lib/_nvrtc.py)
// for one row length, dtype and layout, which arrive as -D values chosen by kernels/softmax/softmax.cu:
//   SCALE_LIB_COLS             the row length
//   SCALE_LIB_DTYPE            0 float16, 1 bfloat16, 2 float32, 3 float64
//   SCALE_LIB_THREADS_PER_ROW  threads that share a row (a power of two, at most 1024)
//   SCALE_LIB_ROWS_PER_BLOCK   rows per block (SCALE_LIB_THREADS_PER_ROW <= 32 only)
//   SCALE_LIB_VEC              elements per load (1, or 16 bytes' worth when rows are aligned)
// Knowing the row length at compile time, each thread keeps its share of the row in registers:
// the row is read from memory once (the ahead-of-time kernel, for any length, reads it twice).
// NVRTC brings no CUDA headers: 16-bit floats are converted with PTX and integer arithmetic.

// [nvrtc_kernel.begin]
#if SCALE_LIB_DTYPE == 0
typedef unsigned short Storage;  // float16 bits
typedef float Compute;
__device__ __forceinline__ float Load(Storage v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
}
__device__ __forceinline__ Storage Store(float f) {
  Storage v;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
  return v;
}
#elif SCALE_LIB_DTYPE == 1
typedef unsigned short Storage;  // bfloat16 bits
typedef float Compute;
__device__ __forceinline__ float Load(Storage v) { return __uint_as_float(unsigned(v) << 16); }
__device__ __forceinline__ Storage Store(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Storage((u >> 16) | 0x40u);  // NaN stays NaN
  return Storage((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
}
#elif SCALE_LIB_DTYPE == 2
typedef float Storage;
typedef float Compute;
__device__ __forceinline__ float Load(float v) { return v; }
__device__ __forceinline__ float Store(float f) { return f; }
#else
typedef double Storage;
typedef double Compute;
__device__ __forceinline__ double Load(double v) { return v; }
__device__ __forceinline__ double Store(double f) { return f; }
#endif

__device__ __forceinline__ float Exp(float v) { return expf(v); }
__device__ __forceinline__ double Exp(double v) { return exp(v); }

constexpr int kCols = SCALE_LIB_COLS;
constexpr int kThreads = SCALE_LIB_THREADS_PER_ROW;
constexpr int kRowsPerBlock = SCALE_LIB_ROWS_PER_BLOCK;
constexpr int kVec = SCALE_LIB_VEC;
constexpr int kChunks = (kCols / kVec + kThreads - 1) / kThreads;  // loads per thread
constexpr int kWarps = kThreads / 32;

struct __align__(sizeof(Storage) * kVec) Pack {
  Storage v[kVec];
};

// The reduction over the threads of a row: shuffles within a warp (or within kThreads < 32
// lanes), then shared memory across the warps of a row.
template <bool kMax>
__device__ __forceinline__ Compute Reduce(Compute v, Compute* shared) {
  constexpr int kWidth = kThreads < 32 ? kThreads : 32;
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    const Compute other = __shfl_xor_sync(0xffffffffu, v, offset, kWidth);
    v = kMax ? fmax(v, other) : v + other;
  }
  if (kWarps > 1) {
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) shared[warp] = v;
    __syncthreads();
    v = shared[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v = kMax ? fmax(v, shared[w]) : v + shared[w];
    __syncthreads();  // shared is reused by the next reduction
  }
  return v;
}

extern "C" __global__ void __launch_bounds__(kThreads* kRowsPerBlock)
    softmax_rows(Storage* __restrict__ out, const Storage* __restrict__ x, long long rows) {
  __shared__ Compute shared[kWarps > 1 ? kWarps : 1];
  const int lane = threadIdx.x % kThreads;  // the thread within its row
  const long long step = static_cast<long long>(gridDim.x) * kRowsPerBlock;
  // Every thread of a block runs the same number of iterations (the reductions synchronise).
  for (long long base = static_cast<long long>(blockIdx.x) * kRowsPerBlock; base < rows;
       base += step) {
    const long long row = base + threadIdx.x / kThreads;
    const bool active = row < rows;
    const Pack* in = reinterpret_cast<const Pack*>(x + (active ? row : 0) * kCols);
    Compute v[kChunks][kVec];
    Compute max_v = -__int_as_float(0x7f800000);  // -inf
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int p = c * kThreads + lane;  // this thread's pack
      if ((kCols / kVec) % kThreads == 0 || p < kCols / kVec) {
        const Pack pack = active ? in[p] : Pack{};
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          v[c][k] = Load(pack.v[k]);
          max_v = fmax(max_v, v[c][k]);
        }
      }
    }
    max_v = Reduce<true>(max_v, shared);
    Compute sum = 0;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int p = c * kThreads + lane;
      if ((kCols / kVec) % kThreads == 0 || p < kCols / kVec) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          v[c][k] = Exp(v[c][k] - max_v);
          sum += v[c][k];
        }
      }
    }
    const Compute scale = Compute(1) / Reduce<false>(sum, shared);
    Pack* o = reinterpret_cast<Pack*>(out + (active ? row : 0) * kCols);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int p = c * kThreads + lane;
      if (active && ((kCols / kVec) % kThreads == 0 || p < kCols / kVec)) {
        Pack pack;
#pragma unroll
        for (int k = 0; k < kVec; ++k) pack.v[k] = Store(v[c][k] * scale);
        o[p] = pack;
      }
    }
  }
}
// [nvrtc_kernel.end]
