// SPDX-License-Identifier: Apache-2.0
// ABI of l2_norm: l2_norm(out, x), l2_norm_with_workspace(out, workspace, x) and
// l2_norm_workspace_bytes(numel). Routing only; the math is in kernels/.
#include "functional.h"
#include "l2_norm/l2_norm.h"

namespace scale_lib {

void L2Norm(ffi::TensorView out, ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, L2NormCPU(out, x),
                            L2NormCUDA(out, x, ffi::Optional<ffi::TensorView>()));
}

void L2NormWithWorkspace(ffi::TensorView out, [[maybe_unused]] ffi::TensorView workspace,
                         ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, L2NormCPU(out, x), L2NormCUDA(out, x, workspace));
}

// l2_norm_new(x): the functional form, returning a new 0-d output (functional.h); on CUDA the
// workspace comes from the same framework allocator.
ffi::Tensor L2NormNew(ffi::TensorView x) { return CallNew<&L2Norm>(ffi::ShapeView(), x); }

}  // namespace scale_lib

SCALE_LIB_EXPORT(l2_norm, scale_lib::L2Norm, "out", "x", "");
SCALE_LIB_EXPORT(l2_norm_new, scale_lib::L2NormNew, "", "x", "");
SCALE_LIB_EXPORT(l2_norm_with_workspace, scale_lib::L2NormWithWorkspace, "out, workspace", "x", "");
SCALE_LIB_EXPORT(l2_norm_workspace_bytes, scale_lib::L2NormWorkspaceBytes, "", "numel, groups", "");
