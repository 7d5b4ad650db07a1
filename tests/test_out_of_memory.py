"""Running out of memory inside a CPU kernel is an ordinary error, and the library stays usable.

Every op with a CPU kernel is called on inputs large enough for the thread pool, in a process
whose address space is then capped a few MB above what it uses (so that what a kernel allocates
on its threads, or the threads themselves, cannot be had). The call must raise MemoryError or
RuntimeError, or succeed, never crash or hang; once the cap is lifted, the same call must give
the right answer. Each op runs in a subprocess of its own, with a time limit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cases import declared_cases

resource = pytest.importorskip("resource", reason="RLIMIT_AS is POSIX")

TESTS = Path(__file__).resolve().parent
CASES = declared_cases("cpu")

_CHILD = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from cases import case_of

    case = case_of(sys.argv[2])
    start_pool_first = sys.argv[3] == "pool-started"
    shape = (2, 1 << 22)  # rows of 2**22 float32 values: 16 MB per row buffer
    arrays = [a.astype(np.float32) for a in case.numpy_inputs(0, shape).values()]
    expected = case.reference(*[a.astype(np.float64) for a in arrays])
    out = np.empty_like(np.asarray(expected), dtype=np.float32) if case.has_out else None
    if start_pool_first:
        case.call(*arrays, **({"out": out} if case.has_out else {}))

    def vm_bytes():
        with open("/proc/self/status") as status:
            line = next(l for l in status if l.startswith("VmSize:"))
        return int(line.split()[1]) * 1024

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + (4 << 20), hard))
    try:
        case.call(*arrays, **({"out": out} if case.has_out else {}))
        outcome = "succeeded"
    except (MemoryError, RuntimeError) as err:
        outcome = f"{type(err).__name__}: {err}"
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    for _ in range(3):  # the library is usable again, its pool included
        result = case.call(*arrays, **({"out": out} if case.has_out else {}))
        case.assert_matches(result, [a.astype(np.float64) for a in arrays], 1e-4, 1e-5)
    print("outcome:", outcome.splitlines()[0])
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/self/status")
@pytest.mark.skipif(
    "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="AddressSanitizer reserves terabytes of address space, which RLIMIT_AS cannot bound",
)
@pytest.mark.parametrize("pool", ["pool-started", "pool-not-started"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_out_of_memory_in_a_kernel_is_an_error_and_the_library_stays_usable(case, pool: str) -> None:
    try:
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(TESTS), case.name, pool],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case.name}: a call after an out-of-memory hung")
    assert child.returncode == 0, f"{case.name}: exit {child.returncode}\n{child.stderr[-3000:]}"
    assert "outcome:" in child.stdout
