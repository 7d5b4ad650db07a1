"""The Python package's layering, checked from its sources: imports between its modules point
one way (the graph is acyclic), and every module is on the architecture page."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "scale_lib"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _modules() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PACKAGE.glob("*.py"))}


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's own modules that ``path`` imports, deferred (in-function) imports and
    imports under ``if TYPE_CHECKING`` included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("scale_lib."):
            found.add(node.module.split(".")[1])
    return found & modules


def test_import_graph_is_acyclic() -> None:
    modules = _modules()
    graph = {name: _imports(path, set(modules)) - {name} for name, path in modules.items()}
    state: dict[str, str] = {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = "open"
        for dep in sorted(graph[name]):
            if state.get(dep) == "open":
                cycle = [*stack[stack.index(dep) :], dep] if dep in stack else [name, dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, [*stack, dep])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_the_cycle_check_finds_cycles(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import x\n")
    assert _imports(tmp_path / "a.py", {"a", "b"}) == {"b"}
    assert _imports(tmp_path / "b.py", {"a", "b"}) == {"a"}


@pytest.mark.skipif(not ARCHITECTURE.is_file(), reason="docs/ is not part of this checkout")
def test_every_module_is_on_the_architecture_page() -> None:
    page = ARCHITECTURE.read_text()
    missing = [f"{name}.py" for name in _modules() if f"{name}.py" not in page]
    assert not missing, f"docs/architecture.md does not describe {missing}"
