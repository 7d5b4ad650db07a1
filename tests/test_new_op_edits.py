"""The edits the op tools make: the registration lines of ops/__init__.py stay sorted and
remove_op.py finds each; copy_op.py renames the op and nothing else."""

from __future__ import annotations

import ast
import importlib.util
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEW_OP = ROOT / "tools" / "new_op.py"

pytestmark = pytest.mark.skipif(not NEW_OP.is_file(), reason="tools/new_op.py is not part of this checkout")


def _new_op():
    spec = importlib.util.spec_from_file_location("new_op_under_test", NEW_OP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


REGISTRY = """from scale_lib._dispatch import registered_specs

from .beta import beta as beta
from .delta import delta as delta

OPS = registered_specs()
"""


def test_registration_lines_stay_sorted_and_removable(tmp_path: Path) -> None:
    registry = tmp_path / "__init__.py"
    registry.write_text(REGISTRY)
    for op in ("gamma", "alpha", "epsilon"):  # before, between and after the others
        _new_op().register_op(registry, op)
    text = registry.read_text()
    names = [node.module for node in ast.parse(text).body if isinstance(node, ast.ImportFrom) and node.level]
    assert names == ["alpha", "beta", "delta", "epsilon", "gamma"]
    assert text.endswith("\nOPS = registered_specs()\n")
    remove = _tool("remove_op")
    kept = remove["REGISTRATION"].sub(lambda m: "" if m.group(1) == "delta" else m.group(0), text)
    assert remove["REGISTRATION"].findall(kept) == ["alpha", "beta", "epsilon", "gamma"]


def _tool(name: str) -> dict:
    return runpy.run_path(str(ROOT / "tools" / f"{name}.py"))


@pytest.mark.skipif(not (ROOT / "tools" / "copy_op.py").is_file(), reason="no tools/copy_op.py")
def test_copy_renames_the_op_and_nothing_else() -> None:
    copy_op = _tool("copy_op")
    source = "\n".join(
        [
            "// CheckArgWhereArgs, ArgWhereCPU and SCALE_LIB_KERNELS_ARGWHERE_H_",
            "y = scale_lib.argwhere(x); z = np.argwhere(x); w = numpy.argwhere(x)",
            "def test_argwhere_matches(): bench('argwhere')",
        ]
    )
    rename = copy_op["renamer"]("argwhere", "nz_index", "scale_lib", [source])
    assert rename(source).splitlines() == [
        "// CheckNzIndexArgs, NzIndexCPU and SCALE_LIB_KERNELS_NZ_INDEX_H_",
        "y = scale_lib.nz_index(x); z = np.argwhere(x); w = numpy.argwhere(x)",  # the reference
        "def test_nz_index_matches(): bench('nz_index')",
    ]
    # The library's own name holds the op's: scale_lib and SCALE_LIB stay.
    rename = copy_op["renamer"]("scale", "gain", "scale_lib", [])
    assert rename("scale_lib.scale(x) SCALE_LIB_SCALE") == "scale_lib.gain(x) SCALE_LIB_GAIN"


@pytest.mark.skipif(not (ROOT / "tools" / "copy_op.py").is_file(), reason="no tools/copy_op.py")
def test_copy_binds_shared_references_to_new_names() -> None:
    keep = _tool("copy_op")["keep_imported_names"]
    original = "from reference import assert_close, norm_reference\nfrom test_norm_cases import CASES\n"
    renamed = "from reference import assert_close, my_norm_reference\nfrom test_my_norm_cases import CASES\n"
    assert keep(original, renamed, {"test_my_norm_cases"}) == (
        "from reference import assert_close\n"
        "from reference import norm_reference as my_norm_reference\n"
        "from test_my_norm_cases import CASES\n"
    )
