// SPDX-License-Identifier: Apache-2.0
// Launches a Triton kernel compiled ahead of time (docs/triton.md). Shared by every Triton op.
//
// The build compiles kernels/<op>/<op>.py with tools/triton_aot.py into fatbins embedded in
// the library, and generates <op>_triton.h: k<Op>TritonKernels, one TritonKernelData per entry
// point, with the launch data Triton decided when it compiled. An op's launcher
// (kernels/<op>/<op>.cu) does the usual steps, then:
//
//   static const TritonKernel kernel(FindTritonKernel(kMyOpTritonKernels, "entry_name"));
//   kernel.Launch(grid, x.device(), stream, out_ptr, x_ptr, rows, d);  // the kernel's arguments
//
// Launch passes the arguments in the kernel's order (pointers as void*, integers as the width of
// their Triton type: i32 -> int32_t, i64 -> int64_t; floats as fp32 -> float, fp64 -> double),
// then what Triton appends to every kernel's parameters: a global and a profile scratch pointer
// (null when the kernel needs none; otherwise grid x num_ctas x size bytes from the calling
// framework's allocator, never a hidden cudaMalloc). The block is 32 * num_warps threads (the
// kernel's .reqntid), the dynamic shared memory Triton's `shared` (opted in above 48 KiB), and a
// kernel with num_ctas > 1 is launched as clusters of num_ctas CTAs along x. Errors of the launch
// raise RuntimeError with CUDA's message.
#ifndef SCALE_LIB_TRITON_LAUNCHER_H_
#define SCALE_LIB_TRITON_LAUNCHER_H_

#include <tvm/ffi/extra/cuda/cubin_launcher.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "tvm_ffi_utils.h"

namespace scale_lib {

// One entry point of an embedded fatbin and its launch data, as tools/triton_aot.py records it.
struct TritonKernelData {
  const char* entry;  // the kernel's name in the fatbin
  const char* image;  // the embedded fatbin
  int num_warps;
  int num_ctas;
  int shared_bytes;  // dynamic shared memory
  int64_t global_scratch_bytes;
  int64_t global_scratch_align;
  int64_t profile_scratch_bytes;
  int64_t profile_scratch_align;
};

// The entry point `entry` of `table` (a generated k<Op>TritonKernels); a name that is not there
// is a bug in the op's launcher.
template <size_t N>
const TritonKernelData& FindTritonKernel(const TritonKernelData (&table)[N],
                                         std::string_view entry) {
  for (const TritonKernelData& data : table) {
    if (entry == data.entry) return data;
  }
  TVM_FFI_ICHECK(false) << "no Triton entry point named " << entry << " was compiled";
  TVM_FFI_UNREACHABLE();
}

// A loaded entry point. Construct it once (a function-local static): the fatbin is loaded on
// first use, so CPU-only callers never touch the driver, and the handle is valid on every device.
class TritonKernel {
 public:
  explicit TritonKernel(const TritonKernelData& data)
      : data_(data), module_(data.image), kernel_(Load(module_, data)) {}

  template <typename... Args>
  void Launch(tvm::ffi::dim3 grid, DLDevice device, cudaStream_t stream, Args... args) const {
    const int64_t programs = static_cast<int64_t>(grid.x) * grid.y * grid.z * data_.num_ctas;
    if (programs == 0) return;
    MakeContextCurrent(device.device_id);
    std::optional<ffi::Tensor> global_scratch =
        Scratch(data_.global_scratch_bytes, programs, device);
    std::optional<ffi::Tensor> profile_scratch =
        Scratch(data_.profile_scratch_bytes, programs, device);
    void* global_ptr = global_scratch.has_value() ? global_scratch.value().data_ptr() : nullptr;
    void* profile_ptr = profile_scratch.has_value() ? profile_scratch.value().data_ptr() : nullptr;
    void* params[] = {static_cast<void*>(&args)..., &global_ptr, &profile_ptr};
    const tvm::ffi::dim3 block(32 * data_.num_warps);
    if (data_.num_ctas == 1) {
      TVM_FFI_CHECK_CUBIN_LAUNCHER_CUDA_ERROR(
          kernel_.Launch(params, grid, block, stream, static_cast<uint32_t>(data_.shared_bytes)));
      return;
    }
    namespace api = tvm::ffi::cuda_api;
    api::LaunchConfig config;
    api::LaunchAttrType attribute;
    const tvm::ffi::dim3 clustered(grid.x * data_.num_ctas, grid.y, grid.z);
    TVM_FFI_CHECK_CUBIN_LAUNCHER_CUDA_ERROR(api::ConstructLaunchConfig(
        kernel_.GetHandle(), stream, static_cast<uint32_t>(data_.shared_bytes), clustered, block,
        data_.num_ctas, config, attribute));
    TVM_FFI_CHECK_CUBIN_LAUNCHER_CUDA_ERROR(kernel_.LaunchEx(params, config));
  }

 private:
  static tvm::ffi::CubinKernel Load(tvm::ffi::CubinModule& module, const TritonKernelData& data) {
    constexpr int kDefaultSharedLimit = 48 * 1024;  // more needs the opt-in attribute
    if (data.shared_bytes > kDefaultSharedLimit)
      return module.GetKernelWithMaxDynamicSharedMemory(data.entry, data.shared_bytes);
    return module.GetKernel(data.entry);
  }

  // Scratch memory of `bytes` per program, from the calling framework's allocator (ValueError
  // if it published none).
  static std::optional<ffi::Tensor> Scratch(int64_t bytes, int64_t programs, DLDevice device) {
    if (bytes == 0) return std::nullopt;
    const int64_t total = bytes * programs;
    return AllocFromFramework({total}, DLDataType{kDLUInt, 8, 1}, device);
  }

  TritonKernelData data_;
  tvm::ffi::CubinModule module_;
  mutable tvm::ffi::CubinKernel kernel_;  // launching does not change it
};

}  // namespace scale_lib

#endif  // SCALE_LIB_TRITON_LAUNCHER_H_
