// The CUDA driver API functions that TVM-FFI's CUBIN launcher calls when it is compiled with a
// CUDA runtime older than 12.8 (tvm/ffi/extra/cuda/internal/unified_api.h uses the runtime's
// cudaLibrary* API from 12.8 on, the driver's cuLibrary* API before). The library does not link
// libcuda (a CPU-only machine must still load it), so each function here forwards to the
// driver's, found through the statically linked CUDA runtime's cudaGetDriverEntryPoint on first
// use. Without this, those calls are undefined symbols and the first CUBIN launch kills the
// process with "symbol lookup error"; tools/check_wheel.py fails any library that leaves a CUDA
// symbol undefined.
#include <cuda.h>
#include <cuda_runtime.h>

#if CUDART_VERSION < 12080

namespace {

void* DriverEntryPoint(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPoint(name, &function, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return function;
}

}  // namespace

// Defines `name` with the signature cuda.h declares (the compiler checks the two agree); the
// driver's function is looked up once, thread-safely.
#define SCALE_LIB_DRIVER_FORWARD(name, params, args)                \
  extern "C" CUresult CUDAAPI name params {                         \
    static const auto driver_function =                             \
        reinterpret_cast<decltype(&name)>(DriverEntryPoint(#name)); \
    if (driver_function == nullptr) return CUDA_ERROR_NOT_FOUND;    \
    return driver_function args;                                    \
  }

// The error strings must never come back null: the launcher streams them into its message.
#define SCALE_LIB_DRIVER_FORWARD_STRING(name)                                         \
  extern "C" CUresult CUDAAPI name(CUresult error, const char** text) {               \
    static const auto driver_function =                                               \
        reinterpret_cast<decltype(&name)>(DriverEntryPoint(#name));                   \
    if (driver_function == nullptr || driver_function(error, text) != CUDA_SUCCESS || \
        *text == nullptr) {                                                           \
      *text = "unknown CUDA driver error";                                            \
    }                                                                                 \
    return CUDA_SUCCESS;                                                              \
  }

SCALE_LIB_DRIVER_FORWARD_STRING(cuGetErrorName)
SCALE_LIB_DRIVER_FORWARD_STRING(cuGetErrorString)
SCALE_LIB_DRIVER_FORWARD(cuDeviceGet, (CUdevice * device, int ordinal), (device, ordinal))
SCALE_LIB_DRIVER_FORWARD(cuDeviceGetCount, (int* count), (count))
SCALE_LIB_DRIVER_FORWARD(cuDeviceGetAttribute,
                         (int* value, CUdevice_attribute attribute, CUdevice device),
                         (value, attribute, device))
SCALE_LIB_DRIVER_FORWARD(cuLibraryLoadData,
                         (CUlibrary * library, const void* code, CUjit_option* jit_options,
                          void** jit_option_values, unsigned int num_jit_options,
                          CUlibraryOption* library_options, void** library_option_values,
                          unsigned int num_library_options),
                         (library, code, jit_options, jit_option_values, num_jit_options,
                          library_options, library_option_values, num_library_options))
SCALE_LIB_DRIVER_FORWARD(cuLibraryUnload, (CUlibrary library), (library))
SCALE_LIB_DRIVER_FORWARD(cuLibraryGetKernel,
                         (CUkernel * kernel, CUlibrary library, const char* name),
                         (kernel, library, name))
SCALE_LIB_DRIVER_FORWARD(cuKernelGetAttribute,
                         (int* value, CUfunction_attribute attribute, CUkernel kernel,
                          CUdevice device),
                         (value, attribute, kernel, device))
SCALE_LIB_DRIVER_FORWARD(cuKernelSetAttribute,
                         (CUfunction_attribute attribute, int value, CUkernel kernel,
                          CUdevice device),
                         (attribute, value, kernel, device))
SCALE_LIB_DRIVER_FORWARD(cuLaunchKernel,
                         (CUfunction function, unsigned int grid_x, unsigned int grid_y,
                          unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                          unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                          void** params, void** extra),
                         (function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
                          stream, params, extra))
SCALE_LIB_DRIVER_FORWARD(cuLaunchKernelEx,
                         (const CUlaunchConfig* config, CUfunction function, void** params,
                          void** extra),
                         (config, function, params, extra))

#undef SCALE_LIB_DRIVER_FORWARD
#undef SCALE_LIB_DRIVER_FORWARD_STRING

#endif  // CUDART_VERSION < 12080
