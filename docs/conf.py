"""Sphinx configuration. Build: nox -s docs (warnings are errors)."""

from __future__ import annotations

import runpy
from pathlib import Path

import scale_lib

DOCS = Path(__file__).resolve().parent

project = "scale_lib"
copyright = "the scale_lib developers, Apache-2.0"  # noqa: A001 - Sphinx's name
release = version = scale_lib.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_generated"]

# The public API's docstrings are Google style; type hints go into the descriptions.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_typehints = "description"
autodoc_member_order = "bysource"

html_theme = "furo"
html_title = f"scale_lib {version}"
html_static_path = ["_static"]


def _write_performance_tables() -> None:
    """docs/_generated/performance_<gpu>.md from the measured JSON in docs/_static/perf/<gpu>/,
    by the report script that prints the same tables after a benchmark run: the page shows exactly
    what was measured, and every target is checked against those numbers."""
    render = runpy.run_path(str(DOCS.parent / "benchmarks" / "report.py"))["render"]
    generated = DOCS / "_generated"
    generated.mkdir(exist_ok=True)
    for folder in sorted((DOCS / "_static" / "perf").iterdir()):
        images = f"_static/perf/{folder.name}"  # as the performance page finds them
        (generated / f"performance_{folder.name}.md").write_text(render(folder, images))


_write_performance_tables()
