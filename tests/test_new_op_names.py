"""tools/new_op.py refuses an op name that would break the library, saying why, before it
writes anything: a Python or C++ keyword, a name the package, its ``ops`` module or the
library's exports already bind (the op would be hidden behind it), a builtin or standard module
the package uses, or a header its ``kernels/<op>/<op>.h`` would shadow in the op's own sources
(``tvm_ffi_utils``), or a C header whose macros the op's C++ names would expand (``errno``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEW_OP = ROOT / "tools" / "new_op.py"


def _status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout


@pytest.mark.skipif(not NEW_OP.is_file(), reason="tools/new_op.py is not part of this checkout")
@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("lib", "already bound"),
        ("ops", "already bound"),
        ("build_info", "already bound"),
        ("scale_new", "already bound"),  # an export of the scale op
        ("class", "keyword"),
        ("match", "keyword"),
        ("union", "C\\+\\+ keyword"),
        ("Fused", "lowercase"),
        ("errno", "shadow the header <errno.h>"),  # C's standard headers
        ("stdint", "shadow the header <stdint.h>"),
        ("tvm_ffi_utils", "shadow the header"),  # the project's own include/
        ("len", "builtin"),  # the op's module would call the op for len()
        ("ctypes", "standard module"),  # a module the package imports
        ("cpu", "not its own"),  # benchmarks/bench_cpu.py would look like its benchmark
    ],
)
def test_new_op_refuses_names_that_would_break_the_library(name: str, why: str) -> None:
    before = _status()
    child = subprocess.run(
        [sys.executable, str(NEW_OP), name, "--no-format"], cwd=ROOT, capture_output=True, text=True
    )
    assert child.returncode != 0
    assert name in child.stderr
    assert re.search(why, child.stderr), child.stderr
    assert _status() == before, "new_op.py wrote files before refusing"


@pytest.mark.skipif(not (ROOT / "tools" / "op_names.py").is_file(), reason="no tools/op_names.py here")
def test_argument_names_the_generated_code_uses_are_found() -> None:
    # new_op.py renders the scaffolds with stand-ins for the inputs and attributes and refuses a
    # name used in a function beside them (a C++ local, a vjp's parameter, a test's module).
    import runpy

    names = runpy.run_path(str(ROOT / "tools" / "op_names.py"))
    arg = names["PLACEHOLDER"]
    files = {
        "kernels/f/f.cu": (
            f"// count: n\nvoid FCPU(TensorView out, TensorView {arg}0, double {arg}1) {{\n"
            f'  const int64_t n = {arg}0.numel();  // rows\n  auto note = "cols";\n  x.stride(0);\n}}\n'
            "void Other(int rows) {}\n"
        ),
        "python/lib/ops/f.py": (
            f"vjp = lambda grad, out, {arg}0: (grad,)\n\ndef unrelated(np):\n    return np\n"
        ),
        "tests/test_f.py": f"def test_f({arg}0):\n    assert np.all({arg}0)\n",
        "docs/kernels/f.md": f"`{arg}0` and `weight`\n",
    }
    used = names["names_beside_arguments"](files)
    assert {"n", "out", "grad", "np", "note"} <= set(used), used
    assert not {"rows", "cols", "stride", "unrelated", "weight"} & set(used), used
    assert not [n for n in used if arg in n]


# template-only:begin

NEW_LIBRARY = ROOT / "tools" / "new_library.py"


@pytest.mark.skipif(not NEW_LIBRARY.is_file(), reason="tools/new_library.py is the template's")
@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("numpy", "shadow"),  # a framework the library's users import
        ("json", "shadow"),  # the standard library
        ("class", "keyword"),
        ("union", "C\\+\\+ keyword"),
        ("My_kernels", "lowercase"),
        ("scale_lib", "the template's own name"),
    ],
)
def test_new_library_refuses_names_that_would_break_it(tmp_path: Path, name: str, why: str) -> None:
    dest = tmp_path / "lib"
    child = subprocess.run(
        [sys.executable, str(NEW_LIBRARY), name, "--dest", str(dest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert child.returncode != 0
    assert name in child.stderr
    assert re.search(why, child.stderr), child.stderr
    assert not dest.exists(), "new_library.py wrote files before refusing"


# template-only:end
