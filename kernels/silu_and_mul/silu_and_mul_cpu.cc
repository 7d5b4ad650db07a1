// SPDX-License-Identifier: Apache-2.0
// CPU twin of the Triton kernels of silu_and_mul: the math of kernels/silu_and_mul/silu_and_mul.h,
// rows split across the CPU pool. The row loops are compiled for each instruction set of
// cpu_float.h and vectorise there, exp included (exp_float.h); every one gives the same bits.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "silu_and_mul.h"

namespace scale_lib {
namespace {

template <typename T>
using C = host::Compute<T>;

// 16-bit rows are converted to float this many elements at a time (8 KB of float per array:
// the chunk stays in L1 between conversion, math and conversion back).
constexpr int64_t kChunk = 2048;

// out[r] = SiluGate(a, b) for rows [begin, end) of x, a and b each row's halves.
template <typename T>
[[gnu::always_inline]] inline void ForwardRows(const T* x, T* out, int64_t d, int64_t begin,
                                               int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const T* a = x + r * 2 * d;
    const T* b = a + d;
    T* o = out + r * d;
    if constexpr (std::is_same_v<T, C<T>>) {
      for (int64_t i = 0; i < d; ++i) o[i] = SiluGate(a[i], b[i]);
    } else {
      C<T> fa[kChunk], fb[kChunk];
      for (int64_t start = 0; start < d; start += kChunk) {
        const int64_t len = std::min(kChunk, d - start);
        host::LoadN(a + start, fa, len);
        host::LoadN(b + start, fb, len);
        for (int64_t i = 0; i < len; ++i) fa[i] = SiluGate(fa[i], fb[i]);
        host::StoreN(fa, o + start, len);
      }
    }
  }
}

// grad_x's rows for rows [begin, end): d/da into the first half, d/db into the second.
template <typename T>
[[gnu::always_inline]] inline void BackwardRows(const T* x, const T* grad, T* grad_x, int64_t d,
                                                int64_t begin, int64_t end) {
  C<T> fa[kChunk], fb[kChunk], fg[kChunk];
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t start = 0; start < d; start += kChunk) {
      const int64_t len = std::min(kChunk, d - start);
      host::LoadN(x + r * 2 * d + start, fa, len);
      host::LoadN(x + r * 2 * d + d + start, fb, len);
      host::LoadN(grad + r * d + start, fg, len);
      for (int64_t i = 0; i < len; ++i) SiluGateGrad(fg[i], fa[i], fb[i], &fa[i], &fb[i]);
      host::StoreN(fa, grad_x + r * 2 * d + start, len);
      host::StoreN(fb, grad_x + r * 2 * d + d + start, len);
    }
  }
}

}  // namespace

void SiluAndMulCPU(ffi::TensorView out, ffi::TensorView x) {
  const GateRows g = CheckSiluAndMulArgs(out, x);
  if (out.numel() == 0) return;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x_data = DataPtr<const T>(x);
    T* out_data = DataPtr<T>(out);
    host::ParallelForRows(g.rows, g.d, [&](int64_t begin, int64_t end) {
      host::RunWidest([&]() SCALE_LIB_INLINE { ForwardRows(x_data, out_data, g.d, begin, end); });
    });
  });
}

void SiluAndMulBackwardCPU(ffi::TensorView grad_x, ffi::TensorView x, ffi::TensorView grad) {
  const GateRows g = CheckSiluAndMulBackwardArgs(grad_x, x, grad);
  if (grad.numel() == 0) return;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x_data = DataPtr<const T>(x);
    const T* grad_data = DataPtr<const T>(grad);
    T* grad_x_data = DataPtr<T>(grad_x);
    host::ParallelForRows(g.rows, g.d, [&](int64_t begin, int64_t end) {
      host::RunWidest([&]() SCALE_LIB_INLINE {
        BackwardRows(x_data, grad_data, grad_x_data, g.d, begin, end);
      });
    });
  });
}

}  // namespace scale_lib
