// CheckCudaDriver() and the versions behind it (include/cuda_driver.h).
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "cuda_driver.h"
#include "tvm_ffi_utils.h"

#define SCALE_LIB_STRINGIFY_(x) #x
#define SCALE_LIB_STRINGIFY(x) SCALE_LIB_STRINGIFY_(x)

// Which CUDA runtime the library links, readable without loading it (tools/check_wheel.py).
// External linkage keeps it (and hidden visibility keeps it out of the exported symbols).
extern "C" [[gnu::used]] const char scale_lib_cudart_tag[] =
    "scale_lib:cudart=" SCALE_LIB_STRINGIFY(CUDART_VERSION);

namespace scale_lib {
namespace {

std::string VersionString(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The first Linux driver branch that supports each CUDA major version, for the error message.
const char* DriverBranchFor(int cuda_version) {
  switch (cuda_version / 1000) {
    case 11:
      return "R450";
    case 12:
      return "R525";
    case 13:
      return "R580";
    default:
      return nullptr;
  }
}

int QueryDriverVersion() {
  if (const char* fake = std::getenv("SCALE_LIB_FAKE_CUDA_DRIVER_VERSION")) {
    return std::atoi(fake);
  }
  int version = 0;
  // Succeeds with 0 when no driver is installed; initializes nothing.
  if (cudaDriverGetVersion(&version) != cudaSuccess) return 0;
  return version;
}

}  // namespace

int CudaRuntimeVersion() { return CUDART_VERSION; }

int MinimumCudaDriverVersion() { return CUDART_VERSION / 1000 * 1000; }

int CudaDriverVersion() {
  static const int version = QueryDriverVersion();  // thread-safe, once per process
  return version;
}

void CheckCudaDriver() {
  const int driver = CudaDriverVersion();
  const int needed = MinimumCudaDriverVersion();
  if (driver == 0 || driver >= needed) return;
  const char* branch = DriverBranchFor(needed);
  TVM_FFI_THROW(RuntimeError) << "the NVIDIA driver is too old for scale_lib's CUDA kernels: it "
                              << "supports CUDA " << VersionString(driver)
                              << ", and this build (CUDA runtime "
                              << VersionString(CudaRuntimeVersion()) << ") needs a driver for CUDA "
                              << VersionString(needed) << " or newer"
                              << (branch ? std::string(" (") + branch + "+)" : std::string())
                              << ". Update the driver, or pass CPU arrays";
}

}  // namespace scale_lib
