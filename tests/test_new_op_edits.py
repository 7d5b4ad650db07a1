"""tools/new_op.py's edits of the package's import statements hold whatever shape the formatter
left them in: one line, or wrapped in parentheses over several once the list of ops outgrew the
line (a library with many ops, or a long name, gets there after a few ``new_op.py`` calls)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEW_OP = ROOT / "tools" / "new_op.py"

pytestmark = pytest.mark.skipif(not NEW_OP.is_file(), reason="tools/new_op.py is not part of this checkout")

INIT = """from ._lib import LIB
{imports}

__all__ = [
    "alpha",
    "beta",
]
"""

ONE_LINE = "from .ops import alpha, beta"
WRAPPED = "from .ops import (\n    alpha,\n    beta,\n)"


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


def _imported(text: str, module: str) -> list[str]:
    (statement,) = [
        node
        for node in ast.parse(text).body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == module
    ]
    return [alias.name for alias in statement.names]


@pytest.mark.parametrize("imports", [ONE_LINE, WRAPPED], ids=["one_line", "wrapped"])
def test_add_to_init_keeps_every_op(tmp_path: Path, imports: str) -> None:
    init = tmp_path / "__init__.py"
    init.write_text(INIT.format(imports=imports))
    new_op = _new_op()
    new_op.add_to_init(init, "gamma")
    new_op.add_to_init(init, "delta")
    text = init.read_text()
    assert _imported(text, "ops") == ["alpha", "beta", "delta", "gamma"]
    listed = ast.literal_eval(text.split("__all__ = ", 1)[1])
    assert listed == ["alpha", "beta", "delta", "gamma"]


@pytest.mark.parametrize(
    "imports",
    ["from ._spec import Input, OpSpec", "from ._spec import (\n    Input,\n    OpSpec,\n)"],
    ids=["one_line", "wrapped"],
)
def test_ops_module_import_keeps_every_name(imports: str) -> None:
    text = f"from __future__ import annotations\n\n{imports}\n\nx = 1\n"
    added = _new_op()._import(text, "._spec", "Attr")
    assert _imported(added, "_spec") == ["Attr", "Input", "OpSpec"]
