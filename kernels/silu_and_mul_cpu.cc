// SPDX-License-Identifier: Apache-2.0
// CPU twin of the Triton kernels of silu_and_mul: the math of kernels/silu_and_mul.h, rows split
// across the CPU pool.
#include <cstdint>
#include <vector>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "silu_and_mul.h"

namespace scale_lib {
namespace {

template <typename T>
using C = host::Compute<T>;

}  // namespace

void SiluAndMulCPU(ffi::TensorView out, ffi::TensorView x) {
  const GateRows g = CheckSiluAndMulArgs(out, x);
  if (out.numel() == 0) return;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x_data = DataPtr<const T>(x);
    T* out_data = DataPtr<T>(out);
    host::ParallelForRows(g.rows, g.d, [&](int64_t begin, int64_t end) {
      std::vector<C<T>> a(g.d), b(g.d);
      for (int64_t r = begin; r < end; ++r) {
        host::LoadN(x_data + r * 2 * g.d, a.data(), g.d);
        host::LoadN(x_data + r * 2 * g.d + g.d, b.data(), g.d);
        for (int64_t i = 0; i < g.d; ++i) a[i] = SiluGate(a[i], b[i]);
        host::StoreN(a.data(), out_data + r * g.d, g.d);
      }
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
      std::vector<C<T>> a(g.d), b(g.d), gr(g.d);
      for (int64_t r = begin; r < end; ++r) {
        host::LoadN(x_data + r * 2 * g.d, a.data(), g.d);
        host::LoadN(x_data + r * 2 * g.d + g.d, b.data(), g.d);
        host::LoadN(grad_data + r * g.d, gr.data(), g.d);
        for (int64_t i = 0; i < g.d; ++i) SiluGateGrad(gr[i], a[i], b[i], &a[i], &b[i]);
        host::StoreN(a.data(), grad_x_data + r * 2 * g.d, g.d);
        host::StoreN(b.data(), grad_x_data + r * 2 * g.d + g.d, g.d);
      }
    });
  });
}

}  // namespace scale_lib
