// SPDX-License-Identifier: Apache-2.0
// build_info(): how this copy of the library was built, for scale_lib.build_info() and bug reports.
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/string.h>

#include "tvm_ffi_utils.h"

namespace scale_lib {

ffi::Map<ffi::String, ffi::Any> BuildInfo() {
  ffi::Map<ffi::String, ffi::Any> info;
  info.Set("version", ffi::String(SCALE_LIB_VERSION));
#if defined(SCALE_LIB_WITH_CUDA)
  info.Set("cuda", true);
  info.Set("cuda_architectures", ffi::String(SCALE_LIB_CUDA_ARCHITECTURES));
  info.Set("cuda_version", ffi::String(SCALE_LIB_CUDA_VERSION));
#else
  info.Set("cuda", false);
#endif
  return info;
}

}  // namespace scale_lib

SCALE_LIB_EXPORT(build_info, scale_lib::BuildInfo, "", "", "");
