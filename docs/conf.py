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
html_static_path = ["_static"] if (DOCS / "_static").is_dir() else []


def _write_performance_tables() -> None:
    """docs/_generated/performance_<gpu>.md from the measured JSON in docs/_static/perf/<gpu>/,
    by the report script that prints the same tables after a benchmark run: the page shows exactly
    what was measured, and every target is checked against those numbers."""
    render = runpy.run_path(str(DOCS.parent / "benchmarks" / "report.py"))["render"]
    generated = DOCS / "_generated"
    generated.mkdir(exist_ok=True)
    perf = DOCS / "_static" / "perf"
    for folder in sorted(perf.iterdir()) if perf.is_dir() else []:
        images = f"_static/perf/{folder.name}"  # as the performance page finds them
        (generated / f"performance_{folder.name}.md").write_text(render(folder, images))


_write_performance_tables()


def _attr_name(attr: object) -> str:
    return attr[0] if isinstance(attr, tuple) else str(attr.name)  # type: ignore[attr-defined]


def _write_op_pages() -> None:
    """The op lists of the docs, from the declared ops (scale_lib.ops.OPS): adding or removing
    an op changes its own files only. docs/_generated/ops_table.md (name, summary, its page),
    api_ops.md (autodoc of each public function), abi.md (each exported signature)."""
    from scale_lib.ops import OPS

    generated = DOCS / "_generated"
    generated.mkdir(exist_ok=True)
    rows = ["| op | computes | shows how to |", "| --- | --- | --- |"]
    api = ["```{eval-rst}"]
    for op in OPS:
        if not op.public:
            continue
        doc = (getattr(scale_lib, op.name).__doc__ or "").strip()
        summary = " ".join(doc.split("\n\n", 1)[0].split())
        page = DOCS / "kernels" / f"{op.name}.md"
        title = page.read_text().split("\n", 1)[0].lstrip("# ") if page.is_file() else ""
        link = f"[{title}](kernels/{op.name}.md)" if title else ""
        rows.append(f"| {{func}}`scale_lib.{op.name}` | {summary} | {link} |")
        api.append(f".. autofunction:: scale_lib.{op.name}")
    api.append("```")
    abi = []
    for op in OPS:
        names = [i.name for i in op.inputs] + [_attr_name(a) for a in op.attrs]
        if op.output.allocated_by_library:
            abi.append(f"- `{op.name}({', '.join(names)}) -> out`")
        else:
            abi.append(f"- `{op.name}({', '.join(['out', *names])})`")
    for name, lines in (("ops_table", rows), ("api_ops", api), ("abi", abi)):
        text = "\n".join(lines) + "\n"
        target = generated / f"{name}.md"
        if not target.is_file() or target.read_text() != text:  # unchanged: no rebuild
            target.write_text(text)


_write_op_pages()
