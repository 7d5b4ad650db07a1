// SPDX-License-Identifier: Apache-2.0
// build_info(): how this copy of the library was built, for scale_lib.build_info() and bug reports.
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/string.h>

#include <string>

#include "cuda_driver.h"
#include "tvm_ffi_utils.h"

namespace scale_lib {
#if defined(SCALE_LIB_WITH_CUDA)
namespace {

std::string CudaVersionString(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace
#endif

ffi::Map<ffi::String, ffi::Any> BuildInfo() {
  ffi::Map<ffi::String, ffi::Any> info;
  info.Set("version", ffi::String(SCALE_LIB_VERSION));
  // The apache-tvm-ffi release this library was compiled against (its Python version string),
  // the version its TVM-FFI headers declare, and the libtvm_ffi loaded now. The Python package
  // refuses a runtime older than the headers, or of another minor version: the headers' inline
  // code is ABI.
  info.Set("apache_tvm_ffi_compiled", ffi::String(SCALE_LIB_TVM_FFI_PACKAGE_VERSION));
  info.Set("tvm_ffi_compiled", ffi::String(std::to_string(TVM_FFI_VERSION_MAJOR) + "." +
                                           std::to_string(TVM_FFI_VERSION_MINOR) + "." +
                                           std::to_string(TVM_FFI_VERSION_PATCH)));
  TVMFFIVersion runtime{};
  TVMFFIGetVersion(&runtime);
  info.Set("tvm_ffi_runtime",
           ffi::String(std::to_string(runtime.major) + "." + std::to_string(runtime.minor) + "." +
                       std::to_string(runtime.patch)));
#if defined(SCALE_LIB_WITH_CUDA)
  info.Set("cuda", true);
  info.Set("cuda_architectures", ffi::String(SCALE_LIB_CUDA_ARCHITECTURES));
  info.Set("cuda_version", ffi::String(SCALE_LIB_CUDA_VERSION));
  // The CUDA runtime linked in, the oldest driver it runs on, and the installed driver ("" when
  // there is none), each as the CUDA version X.Y.
  info.Set("cuda_runtime_version", ffi::String(CudaVersionString(CudaRuntimeVersion())));
  info.Set("cuda_driver_minimum", ffi::String(CudaVersionString(MinimumCudaDriverVersion())));
  const int driver = CudaDriverVersion();
  info.Set("cuda_driver_version", ffi::String(driver ? CudaVersionString(driver) : ""));
#else
  info.Set("cuda", false);
#endif
  // The Triton release that compiled the Triton kernels ("" when they were not built: their ops
  // then have no CUDA kernel).
#if defined(SCALE_LIB_WITH_TRITON)
  info.Set("triton", ffi::String(SCALE_LIB_TRITON_VERSION));
#else
  info.Set("triton", ffi::String(""));
#endif
  return info;
}

}  // namespace scale_lib

SCALE_LIB_EXPORT(build_info, scale_lib::BuildInfo, "", "", "");
