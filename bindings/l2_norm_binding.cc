// ABI of l2_norm: l2_norm(out, x), l2_norm_with_workspace(out, workspace, x) and
// l2_norm_workspace_bytes(numel). Routing only; the math is in kernels/.
#include "l2_norm.h"

namespace scale_lib {

void L2Norm(ffi::TensorView out, ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, L2NormCPU(out, x),
                            L2NormCUDA(out, x, ffi::Optional<ffi::TensorView>()));
}

void L2NormWithWorkspace(ffi::TensorView out, ffi::TensorView workspace, ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, L2NormCPU(out, x), L2NormCUDA(out, x, workspace));
}

}  // namespace scale_lib

TVM_FFI_DLL_EXPORT_TYPED_FUNC(l2_norm, scale_lib::L2Norm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(l2_norm_with_workspace, scale_lib::L2NormWithWorkspace);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(l2_norm_workspace_bytes, scale_lib::L2NormWorkspaceBytes);
