"""Sphinx configuration. Build: nox -s docs (warnings are errors)."""

from __future__ import annotations

import scale_lib

project = "scale_lib"
copyright = "the scale_lib developers, Apache-2.0"  # noqa: A001 - Sphinx's name
release = version = scale_lib.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]

# The public API's docstrings are Google style; type hints go into the descriptions.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_typehints = "description"
autodoc_member_order = "bysource"

html_theme = "furo"
html_title = f"scale_lib {version}"
html_static_path = ["_static"]
