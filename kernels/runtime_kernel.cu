// SPDX-License-Identifier: Apache-2.0
// RuntimeKernel() (kernels/runtime_kernel.h): the process-wide table of loaded runtime-compiled
// kernels, filled through the Python function scale_lib.nvrtc_cubin (python/scale_lib/_nvrtc.py).
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime_kernel.h"
#include "tvm_ffi_utils.h"

namespace scale_lib {
namespace {

struct Loaded {
  ffi::Bytes cubin;
  std::unique_ptr<tvm::ffi::CubinModule> module;
  std::unique_ptr<tvm::ffi::CubinKernel> kernel;  // null: no runtime compilation for this key
};

std::mutex table_mutex;
// Entries are never removed: the pointers handed out stay valid for the process.
std::unordered_map<std::string, std::unique_ptr<Loaded>>& Table() {
  static auto* table = new std::unordered_map<std::string, std::unique_ptr<Loaded>>();
  return *table;
}

// The compute capability of a device as major * 10 + minor, asked once per device.
int Architecture(int device_id) {
  static std::array<std::atomic<int>, 256> known{};
  if (device_id >= 0 && device_id < static_cast<int>(known.size())) {
    if (const int arch = known[device_id].load(std::memory_order_relaxed)) return arch;
  }
  int major = 0, minor = 0;
  TVM_FFI_CHECK_CUDA_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id));
  TVM_FFI_CHECK_CUDA_ERROR(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_id));
  const int arch = major * 10 + minor;
  if (device_id >= 0 && device_id < static_cast<int>(known.size())) {
    known[device_id].store(arch, std::memory_order_relaxed);
  }
  return arch;
}

// Whether `stream` (or, for the legacy default stream, any stream in a global-mode capture) is
// being captured into a CUDA graph. Asks without synchronising anything.
bool IsCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t error = cudaStreamIsCapturing(stream, &status);
  if (error == cudaErrorStreamCaptureImplicit) {
    (void)cudaGetLastError();  // the legacy stream while another stream captures: capture too
    return true;
  }
  TVM_FFI_CHECK_CUDA_ERROR(error);
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

// [runtime_kernel.begin]
tvm::ffi::CubinKernel* RuntimeKernel(const char* op, const char* kernel,
                                     const std::vector<std::string>& defines, int device_id,
                                     cudaStream_t stream) {
  const int arch = Architecture(device_id);
  std::string key = std::string(op) + "/" + kernel + "/sm" + std::to_string(arch);
  for (const std::string& d : defines) key += "/" + d;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto found = Table().find(key);
    if (found != Table().end()) return found->second->kernel.get();
  }
  // Not loaded yet. Neither the lock nor anything else is held while Python compiles (another
  // thread may hold the interpreter and wait for this lock).
  std::optional<ffi::Function> compile = ffi::Function::GetGlobal("scale_lib.nvrtc_cubin");
  auto loaded = std::make_unique<Loaded>();
  if (compile.has_value()) {
    ffi::Array<ffi::String> values;
    for (const std::string& d : defines) values.push_back(ffi::String(d));
    // Compiling touches no GPU (NVRTC, the disk cache): allowed during capture. None: no NVRTC.
    ffi::Any cubin = (*compile)(ffi::String(op), values, arch);
    if (auto bytes = cubin.as<ffi::Bytes>()) {
      if (IsCapturing(stream)) {
        TVM_FFI_THROW(RuntimeError)
            << op << ": its CUDA kernel is compiled for each new shape, dtype and GPU at the "
            << "first call, and this first call came during CUDA graph capture, where loading a "
            << "kernel is not allowed. Call " << op << " once with the same arguments before "
            << "capturing (a warm-up run)";
      }
      loaded->cubin = *bytes;
      loaded->module = std::make_unique<tvm::ffi::CubinModule>(loaded->cubin);
      loaded->kernel = std::make_unique<tvm::ffi::CubinKernel>(loaded->module->GetKernel(kernel));
    }
  }
  std::lock_guard<std::mutex> lock(table_mutex);
  // Another thread may have loaded the same key meanwhile: the first one stays.
  auto inserted = Table().emplace(key, std::move(loaded));
  return inserted.first->second->kernel.get();
}
// [runtime_kernel.end]

}  // namespace scale_lib
