// SPDX-License-Identifier: Apache-2.0
// CPU twin of kernels/cumsum/cumsum.cu: the same CumsumFn, run by the shared CPU scan launcher.
#include <cstdint>

#include "cumsum.h"
#include "scan_cpu.h"

namespace scale_lib {

void CumsumCPU(ffi::TensorView out, ffi::TensorView x, bool reverse) {
  CheckCumsumArgs(out, x);
  const int64_t cols = x.size(x.ndim() - 1);
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / cols;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = host::Compute<T>;
    host::RunScan<T>(CumsumFn<C>{}, rows, cols, reverse, DataPtr<T>(out), DataPtr<const T>(x));
  });
}

}  // namespace scale_lib
