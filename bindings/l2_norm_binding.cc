// SPDX-License-Identifier: Apache-2.0
// ABI of l2_norm: l2_norm(out, x), l2_norm_with_workspace(out, workspace, x) and
// l2_norm_workspace_bytes(numel). Routing only; the math is in kernels/.
#include "l2_norm.h"

namespace scale_lib {

void L2Norm(ffi::TensorView out, ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, L2NormCPU(out, x),
                            L2NormCUDA(out, x, ffi::Optional<ffi::TensorView>()));
}

void L2NormWithWorkspace(ffi::TensorView out, [[maybe_unused]] ffi::TensorView workspace,
                         ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, L2NormCPU(out, x), L2NormCUDA(out, x, workspace));
}

}  // namespace scale_lib

SCALE_LIB_EXPORT(l2_norm, scale_lib::L2Norm, "out", "x", "");
SCALE_LIB_EXPORT(l2_norm_with_workspace, scale_lib::L2NormWithWorkspace, "out, workspace", "x", "");
SCALE_LIB_EXPORT(l2_norm_workspace_bytes, scale_lib::L2NormWorkspaceBytes, "", "numel, groups", "");
