#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the PyTorch CUDA float32 tests of every op under compute-sanitizer (the largest shapes
# left out, for time; SANITIZE_K picks another selection): memcheck, racecheck, initcheck and
# synccheck by default, or the tools named. Needs a GPU, compute-sanitizer, and scale_lib
# installed with CUDA.
#
#   tools/compute_sanitizer.sh                      # all four tools
#   tools/compute_sanitizer.sh memcheck racecheck
#   SANITIZE_K="torch-cuda" tools/compute_sanitizer.sh   # another pytest -k selection
set -uo pipefail
cd "$(dirname "$0")/.."

tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck initcheck synccheck)
# Exact allocations (no caching allocator), so that any access past an array is caught.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
selection="${SANITIZE_K:-torch-cuda and float32 and not 1048579 and not 1000003 and not 65537}"
# The tests of every declared op (scale_lib.ops.OPS) that has a tests/test_<op>.py.
mapfile -t tests < <(python3 -c '
import os
from scale_lib.ops import OPS
for op in OPS:
    if os.path.isfile(f"tests/test_{op.name}.py"):
        print(f"tests/test_{op.name}.py")
')
[ ${#tests[@]} -eq 0 ] && { echo "no op tests found (is scale_lib installed?)" >&2; exit 2; }

status=0
for tool in "${tools[@]}"; do
  compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
    python3 -m pytest "${tests[@]}" -q -p no:cacheprovider -p no:logging -k "$selection"
  rc=$?
  echo "== compute-sanitizer --tool $tool: exit code $rc"
  [ "$rc" -ne 0 ] && status=1
done
exit "$status"
