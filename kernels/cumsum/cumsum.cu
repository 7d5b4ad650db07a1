// SPDX-License-Identifier: Apache-2.0
// CUDA implementation of cumsum: the math is CumsumFn (kernels/cumsum/cumsum.h), run by
// the shared scan launcher (kernels/scan.cuh: by shape, a warp per short row, a block per long
// row, or a block per tile with a look-back for few long rows). The CPU twin is
// kernels/cumsum/cumsum_cpu.cc.
#include <cstdint>

#include "cumsum.h"
#include "scan.cuh"

namespace scale_lib {

void CumsumCUDA(ffi::TensorView out, ffi::TensorView x, bool reverse) {
  CheckCumsumArgs(out, x);  // 1. validate
  const int64_t cols = x.size(x.ndim() - 1);
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / cols;
  ffi::CUDADeviceGuard guard(x.device().device_id);  // 2. device guard
  cudaStream_t stream = GetCudaStream(x.device());   // 3. stream
  DispatchFloating(x.dtype(), "x", [&](auto tag) {  // 4. dtype dispatch + launch
    using T = typename decltype(tag)::type;
    using C = gpu::Compute<T>;
    gpu::LaunchScan<T>(CumsumFn<C>{}, rows, cols, reverse, stream, DataPtr<T>(out),
                       DataPtr<const T>(x));
  });  // 5. check: inside the launcher
}

}  // namespace scale_lib
