// SPDX-License-Identifier: Apache-2.0
// CPU twin of kernels/softmax/softmax.cu: rows split across the CPU pool; each row's max, then its
// sum of exponentials, in the compute type. The row loops keep kLanes independent partial results
// (value i in lane i % kLanes, as cpu_float.h's SumOfSquares does for all but bfloat16), so they
// vectorise without reassociation, exp included (exp_float.h), and are compiled for each
// instruction set of cpu_float.h: every one gives the same bits.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "exp_float.h"
#include "softmax.h"

namespace scale_lib {
namespace {

template <typename T>
using C = host::Compute<T>;

constexpr int kLanes = 16;
// 16-bit rows of up to kRowBuffer elements are converted to float whole (32 KB, on the stack);
// longer ones kChunk elements at a time (8 KB: stays in L1). Both multiples of kLanes.
constexpr int64_t kRowBuffer = 8192;
constexpr int64_t kChunk = 2048;
// What an element costs against a simple elementwise one (host::ParallelForRows's cost_per_item).
constexpr int64_t kExpCost = 4;

// kLanes values as vectors of one register of the instruction set the loop is compiled for (GCC's
// vector extension): the selects and sums of the loops below stay scalar when left to the
// auto-vectoriser. Lane k is element k % kPerVec of vector k / kPerVec, so every instruction set
// adds (and compares) the same values in the same order: the same bits. Vectors wider than the
// registers, which GCC splits, made its selects scalar (64-byte vectors at AVX2: softmax of
// (64, 4096) float32 took 5-10x the time it takes at AVX-512); narrower ones cost AVX-512 three
// extractions a block to add an exp computed 16 wide (host::kVectorBytes). Load and Store are
// always inlined: a struct of vectors is returned in registers or in memory depending on the
// instruction set the function is compiled for.
template <typename CT, typename Level>
struct LaneVectors {
  static constexpr int kBytes = host::kVectorBytes<Level::value>;
  typedef CT Vec __attribute__((vector_size(kBytes)));
  static constexpr int kPerVec = kBytes / sizeof(CT), kVecs = kLanes / kPerVec;
  Vec v[kVecs];

  [[gnu::always_inline]] static LaneVectors Load(const CT* values) {
    LaneVectors lanes;
    std::memcpy(lanes.v, values, sizeof(lanes.v));
    return lanes;
  }
  [[gnu::always_inline]] void Store(CT* values) const { std::memcpy(values, v, sizeof(v)); }
};

// lanes[k] = max(lanes[k], v[i]) for i % kLanes == k. A NaN never wins: it makes its row NaN
// through the sum of exponentials instead, as a NaN maximum would.
template <typename Level, typename CT>
[[gnu::always_inline]] inline void MaxInto(Level, CT* lanes, const CT* v, int64_t n) {
  using L = LaneVectors<CT, Level>;
  L m = L::Load(lanes);
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    const L b = L::Load(v + i);
    for (int j = 0; j < L::kVecs; ++j) m.v[j] = b.v[j] > m.v[j] ? b.v[j] : m.v[j];
  }
  m.Store(lanes);
  for (int64_t i = whole; i < n; ++i) {
    lanes[i % kLanes] = v[i] > lanes[i % kLanes] ? v[i] : lanes[i % kLanes];
  }
}

// lanes[k] += exp(v[i] - max) for i % kLanes == k; with kStore, also e[i] = exp(v[i] - max) (e
// may be v: each block of kLanes values is read whole before it is written). v[i] - max is at
// most 0, or NaN (max is the row's, which no NaN wins): ExpNonPositive.
template <bool kStore, typename Level, typename CT>
[[gnu::always_inline]] inline void AddExpInto(Level, CT* lanes, const CT* v, int64_t n, CT max,
                                              CT* e) {
  using L = LaneVectors<CT, Level>;
  L sums = L::Load(lanes);
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    CT block[kLanes];
    for (int k = 0; k < kLanes; ++k) block[k] = ExpNonPositive(v[i + k] - max);
    const L b = L::Load(block);
    for (int j = 0; j < L::kVecs; ++j) sums.v[j] += b.v[j];
    if constexpr (kStore) std::memcpy(e + i, block, sizeof(block));
  }
  sums.Store(lanes);
  for (int64_t i = whole; i < n; ++i) {
    const CT value = ExpNonPositive(v[i] - max);
    if constexpr (kStore) e[i] = value;
    lanes[i % kLanes] += value;
  }
}

// buf[i] = in[i] in the compute type, then MaxInto(level, lanes, buf, n): each block of kLanes
// values converted (host::ConvertBlock) and compared while in registers.
template <typename T, typename CT, typename Level>
[[gnu::always_inline]] inline void ConvertMaxInto(Level level, CT* lanes, const T* in, CT* buf,
                                                  int64_t n) {
  using L = LaneVectors<CT, Level>;
  static_assert(kLanes == host::kBlock, "a block of lanes is a block of ConvertBlock");
  L m = L::Load(lanes);
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    host::ConvertBlock(level, in + i, buf + i);
    const L b = L::Load(buf + i);
    for (int j = 0; j < L::kVecs; ++j) m.v[j] = b.v[j] > m.v[j] ? b.v[j] : m.v[j];
  }
  m.Store(lanes);
  for (int64_t i = whole; i < n; ++i) buf[i] = host::FloatMath<T>::Load(in[i]);
  // The tail: element whole + i is in lane i % kLanes.
  MaxInto(level, lanes, buf + whole, n - whole);
}

// out[i] = value(i) in T, kLanes values computed and converted at a time (host::ConvertBlock).
template <typename T, typename Level, typename Value>
[[gnu::always_inline]] inline void ConvertStore(Level level, T* out, int64_t n,
                                                const Value& value) {
  using CT = C<T>;
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    CT block[kLanes];
    for (int k = 0; k < kLanes; ++k) block[k] = value(i + k);
    host::ConvertBlock(level, block, out + i);
  }
  for (int64_t i = whole; i < n; ++i) out[i] = host::FloatMath<T>::Store(value(i));
}

template <typename CT>
[[gnu::always_inline]] inline CT MaxOfLanes(const CT* lanes) {
  CT m = lanes[0];
  for (int k = 1; k < kLanes; ++k) m = lanes[k] > m ? lanes[k] : m;
  return m;
}

template <typename CT>
[[gnu::always_inline]] inline CT SumOfLanes(const CT* lanes) {
  CT sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

// Rows [begin, end), compiled for `level` (a RunWidest body's). out may be x: each element is
// read before it is written.
template <typename T, typename Level>
[[gnu::always_inline]] inline void SoftmaxRows(Level level, const T* x, T* out, int64_t cols,
                                               int64_t begin, int64_t end) {
  using CT = C<T>;
  for (int64_t r = begin; r < end; ++r) {
    const T* in = x + r * cols;
    T* o = out + r * cols;
    CT max_lanes[kLanes], sum_lanes[kLanes] = {};
    std::fill(max_lanes, max_lanes + kLanes, -std::numeric_limits<CT>::infinity());
    if constexpr (std::is_same_v<T, CT>) {
      // The exponentials go to out, then are scaled in place: one exp per element.
      MaxInto(level, max_lanes, in, cols);
      const CT max = MaxOfLanes(max_lanes);
      AddExpInto<true>(level, sum_lanes, in, cols, max, o);
      const CT scale = CT(1) / SumOfLanes(sum_lanes);
      for (int64_t i = 0; i < cols; ++i) o[i] *= scale;
    } else if (cols <= kRowBuffer) {
      // The row converted once into a buffer that holds its exponentials, which are scaled as
      // they are converted back.
      CT buf[kRowBuffer];
      ConvertMaxInto(level, max_lanes, in, buf, cols);
      const CT max = MaxOfLanes(max_lanes);
      AddExpInto<true>(level, sum_lanes, buf, cols, max, buf);
      const CT scale = CT(1) / SumOfLanes(sum_lanes);
      ConvertStore(level, o, cols, [&](int64_t i) SCALE_LIB_INLINE { return buf[i] * scale; });
    } else {
      // Longer rows a chunk at a time, exp taken twice (the same bits as above: chunks are whole
      // multiples of kLanes).
      CT buf[kChunk];
      for (int64_t start = 0; start < cols; start += kChunk) {
        const int64_t len = std::min(kChunk, cols - start);
        ConvertMaxInto(level, max_lanes, in + start, buf, len);
      }
      const CT max = MaxOfLanes(max_lanes);
      for (int64_t start = 0; start < cols; start += kChunk) {
        const int64_t len = std::min(kChunk, cols - start);
        host::LoadN(in + start, buf, len);
        AddExpInto<false>(level, sum_lanes, buf, len, max, buf);
      }
      const CT scale = CT(1) / SumOfLanes(sum_lanes);
      for (int64_t start = 0; start < cols; start += kChunk) {
        const int64_t len = std::min(kChunk, cols - start);
        host::LoadN(in + start, buf, len);
        ConvertStore(level, o + start, len, [&](int64_t i) SCALE_LIB_INLINE {
          return ExpNonPositive(buf[i] - max) * scale;
        });
      }
    }
  }
}

// lanes[k] += fn.Term(fn.Value(y[i], grad[i])) for i % kLanes == k: the backward's row sum.
template <typename Level, typename CT, typename Fn>
[[gnu::always_inline]] inline void AddTermsInto(Level, CT* lanes, const Fn& fn, const CT* y,
                                                const CT* grad, int64_t n) {
  using L = LaneVectors<CT, Level>;
  L sums = L::Load(lanes);
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    CT block[kLanes];
    for (int k = 0; k < kLanes; ++k) block[k] = fn.Term(fn.Value(y[i + k], grad[i + k]));
    const L b = L::Load(block);
    for (int j = 0; j < L::kVecs; ++j) sums.v[j] += b.v[j];
  }
  sums.Store(lanes);
  for (int64_t i = whole; i < n; ++i) lanes[i % kLanes] += fn.Term(fn.Value(y[i], grad[i]));
}

// The backward's rows [begin, end), compiled for `level`: each row's sum (SoftmaxBackwardFn's
// terms, in kLanes partial sums), then its elements. 16-bit rows are converted to the compute type
// whole, or kChunk elements at a time (the same bits: chunks are whole multiples of kLanes).
template <typename T, typename Level>
[[gnu::always_inline]] inline void SoftmaxBackwardRows(Level level, const T* y, const T* grad,
                                                       T* grad_x, int64_t cols, int64_t begin,
                                                       int64_t end) {
  using CT = C<T>;
  const SoftmaxBackwardFn<CT> fn;
  for (int64_t r = begin; r < end; ++r) {
    const T* ys = y + r * cols;
    const T* gs = grad + r * cols;
    T* out = grad_x + r * cols;
    CT lanes[kLanes] = {};
    if constexpr (std::is_same_v<T, CT>) {
      AddTermsInto(level, lanes, fn, ys, gs, cols);
      const CT dot = SumOfLanes(lanes);
      for (int64_t i = 0; i < cols; ++i) out[i] = fn.Finish(fn.Value(ys[i], gs[i]), dot, cols);
    } else {
      const int64_t chunk = cols <= kRowBuffer / 2 ? cols : kChunk;
      CT ybuf[kRowBuffer / 2], gbuf[kRowBuffer / 2];
      for (int64_t start = 0; start < cols; start += chunk) {
        const int64_t len = std::min(chunk, cols - start);
        host::LoadN(ys + start, ybuf, len);
        host::LoadN(gs + start, gbuf, len);
        AddTermsInto(level, lanes, fn, ybuf, gbuf, len);
      }
      const CT dot = SumOfLanes(lanes);
      for (int64_t start = 0; start < cols; start += chunk) {
        const int64_t len = std::min(chunk, cols - start);
        if (chunk != cols) {  // a whole row is still in the buffers
          host::LoadN(ys + start, ybuf, len);
          host::LoadN(gs + start, gbuf, len);
        }
        ConvertStore(level, out + start, len, [&](int64_t i) SCALE_LIB_INLINE {
          return fn.Finish(fn.Value(ybuf[i], gbuf[i]), dot, cols);
        });
      }
    }
  }
}

}  // namespace

void SoftmaxCPU(ffi::TensorView out, ffi::TensorView x) {
  CheckSoftmaxArgs(out, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t cols = x.size(x.ndim() - 1);
  const int64_t rows = n / cols;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xs = DataPtr<const T>(x);
    T* outs = DataPtr<T>(out);
    // An exp per element: rows are shared from a quarter of the usual work on.
    host::ParallelForRows(
        rows, cols,
        [&](int64_t begin, int64_t end) {
          host::RunWidest([&](auto level)
                              SCALE_LIB_INLINE { SoftmaxRows(level, xs, outs, cols, begin, end); });
        },
        kExpCost);
  });
}

void SoftmaxBackwardCPU(ffi::TensorView grad_x, ffi::TensorView y, ffi::TensorView grad) {
  CheckSoftmaxBackwardArgs(grad_x, y, grad);
  const int64_t n = y.numel();
  if (n == 0) return;
  const int64_t cols = y.size(y.ndim() - 1);
  DispatchFloating(y.dtype(), "y", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ys = DataPtr<const T>(y);
    const T* grads = DataPtr<const T>(grad);
    T* out = DataPtr<T>(grad_x);
    host::ParallelForRows(n / cols, cols, [&](int64_t begin, int64_t end) {
      host::RunWidest([&](auto level) SCALE_LIB_INLINE {
        SoftmaxBackwardRows(level, ys, grads, out, cols, begin, end);
      });
    });
  });
}

}  // namespace scale_lib
