// SPDX-License-Identifier: Apache-2.0
// CUDA silu_and_mul: the Triton kernels of silu_and_mul.py, compiled ahead of time and embedded
// by the build (silu_and_mul_triton.h is generated), launched on the caller's stream by the
// shared Triton launcher (include/triton_launcher.h). Compiled only when the build has Triton.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_float.cuh"
#include "silu_and_mul.h"
#include "silu_and_mul_triton.h"
#include "triton_launcher.h"

namespace scale_lib {
namespace {

// Must match BLOCK in silu_and_mul.py: the columns each program handles.
constexpr int64_t kBlock = 1024;
// The grid's second dimension (rows) is capped by CUDA; the kernels loop over the rest.
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;

// The entry point `<op>_<dtype>_<layout>`, loaded once per process. Layouts: "aligned"
// (pointers 16-byte aligned, d a multiple of 16: wide loads) or "any".
template <typename T>
TritonKernel Load(const char* op, const char* layout) {
  const std::string entry = std::string(op) + "_" + DTypeName<T>() + "_" + layout;
  return TritonKernel(FindTritonKernel(kSiluAndMulTritonKernels, entry));
}

template <typename T>
const TritonKernel& ForwardKernel(bool aligned) {
  static const TritonKernel kernels[] = {Load<T>("silu_and_mul", "any"),
                                         Load<T>("silu_and_mul", "aligned")};
  return kernels[aligned];
}

template <typename T>
const TritonKernel& BackwardKernel(bool aligned) {
  static const TritonKernel kernels[] = {Load<T>("silu_and_mul_backward", "any"),
                                         Load<T>("silu_and_mul_backward", "aligned")};
  return kernels[aligned];
}

bool Aligned(int64_t d, std::initializer_list<const void*> pointers) {
  return d % 16 == 0 && std::all_of(pointers.begin(), pointers.end(),
                                    [](const void* p) { return gpu::IsAligned(p, 16); });
}

tvm::ffi::dim3 Grid(const GateRows& g) {
  const int64_t column_blocks = (g.d + kBlock - 1) / kBlock;
  SCALE_LIB_CHECK(column_blocks <= kMaxGridX, ValueError)
      << "x's last dimension is too large for one kernel launch; got " << 2 * g.d;
  return tvm::ffi::dim3(static_cast<unsigned>(column_blocks),
                        static_cast<unsigned>(std::min(g.rows, kMaxGridY)));
}

}  // namespace

// [triton_launch.begin]
void SiluAndMulCUDA(ffi::TensorView out, ffi::TensorView x) {
  const GateRows g = CheckSiluAndMulArgs(out, x);          // 1. validate
  if (out.numel() == 0) return;
  ffi::CUDADeviceGuard guard(x.device().device_id);        // 2. device guard
  cudaStream_t stream = GetCudaStream(x.device());         // 3. stream
  DispatchFloating(x.dtype(), "x", [&](auto tag) {         // 4. dtype dispatch + launch
    using T = typename decltype(tag)::type;
    void* out_ptr = DataPtr<T>(out);
    void* x_ptr = DataPtr<T>(x);
    const bool aligned = Aligned(g.d, {out_ptr, x_ptr});
    // The kernel's arguments, in order: out_ptr, x_ptr, rows (i64), d (i64). 5. the launch is
    // checked by the launcher.
    ForwardKernel<T>(aligned).Launch(Grid(g), x.device(), stream, out_ptr, x_ptr, g.rows, g.d);
  });
}
// [triton_launch.end]

void SiluAndMulBackwardCUDA(ffi::TensorView grad_x, ffi::TensorView x, ffi::TensorView grad) {
  const GateRows g = CheckSiluAndMulBackwardArgs(grad_x, x, grad);
  if (grad.numel() == 0) return;
  ffi::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = GetCudaStream(x.device());
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    void* grad_x_ptr = DataPtr<T>(grad_x);
    void* grad_ptr = DataPtr<T>(grad);
    void* x_ptr = DataPtr<T>(x);
    const bool aligned = Aligned(g.d, {grad_x_ptr, grad_ptr, x_ptr});
    BackwardKernel<T>(aligned).Launch(Grid(g), x.device(), stream, grad_x_ptr, grad_ptr, x_ptr,
                                      g.rows, g.d);
  });
}

}  // namespace scale_lib
