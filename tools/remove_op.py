#!/usr/bin/env python3
"""Remove an op everywhere it lives: python3 tools/remove_op.py NAME [--dry-run]

Deletes the op's own files (its folder kernels/NAME/, and kernels/NAME*, kernels/cubin/NAME*,
kernels/triton/NAME* where a library made before ops had folders keeps them,
bindings/NAME_binding.cc, python/scale_lib/ops/NAME.py and nvrtc_kernels/NAME.cu, tests/test_NAME.py
and test_NAME_distributed.py, docs/kernels/NAME.md,
benchmarks/bench_NAME.py, report_NAME.py and overhead/NAME.py, measured results
docs/_static/perf/*/NAME.*), its registration line in python/scale_lib/ops/__init__.py, its
export from the package's __init__.py and its name in .copier-answers.yml; a file shared by
several ops says so in a comment of its first ten lines (``op-file: NAME[, ...]``) and goes with
any of them; Markdown table rows whose first cell starts with the op's name in backquotes
(``| `NAME` |``, ``| `NAME(x)` |``) go too. Shared pages name no example op: they list the ops
of a kind with a render span (``<!-- render: ops linear -->``, tools/render_docs.py), rendered
again here.

When no Triton kernel is left, pyproject.toml's Triton build requirement is commented out.

Everything else (the suites that run every op, the API docs, the benchmark report, the sanitizer
list, the workflows) follows the declared ops by itself.
"""

from __future__ import annotations

import argparse
import re
import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "scale_lib"
# The ops: one module each, registered by one line (``from .NAME import NAME as NAME``) here.
REGISTRY = PACKAGE / "ops" / "__init__.py"
REGISTRATION = re.compile(r"^from \.(\w+) import \1 as \1\n", re.MULTILINE)
ANSWERS = ROOT / ".copier-answers.yml"
# scale is the worked example of the shared docs (writing a kernel, the architecture).
KEEP = {"scale": "the docs (docs/writing_a_kernel.md, docs/architecture.md) walk through its files"}
# Output and environments, never the project's own text (where git cannot tell).
NOT_PROJECT = {".git", "build", "dist", ".nox", "_build", "_generated", "__pycache__"}
FILE_MARK = re.compile(r"(?:#|//|<!--) op-file: (\w+(?:, \w+)*)")
# pyproject.toml's Triton build requirement: needed while an op's folder holds a Triton kernel.
PYPROJECT = ROOT / "pyproject.toml"
TRITON_BUILD = re.compile(
    r"^(# \[triton-build\.begin\][^\n]*\n)(.*?)(^# \[triton-build\.end\])", re.DOTALL | re.MULTILINE
)


def declared_ops() -> list[str]:
    """The ops the library registers, in the order of their lines."""
    return REGISTRATION.findall(REGISTRY.read_text())


def triton_kernels() -> list[Path]:
    """The Triton kernels: kernels/<op>/<op>.py (and kernels/triton/<op>.py, an older layout)."""
    return [p for p in ROOT.glob("kernels/*/*.py") if p.parent.name in (p.stem, "triton")]


def own_files(name: str) -> list[Path]:
    """The files that are only ``name``'s: by their names, or marked ``op-file: NAME``."""
    patterns = [
        f"kernels/{name}.*",
        f"kernels/{name}_*",
        f"kernels/{name}/**/*",
        f"kernels/cubin/{name}.*",
        f"kernels/cubin/{name}_*",
        f"kernels/triton/{name}.*",
        f"kernels/triton/{name}_*",
        f"bindings/{name}_binding.cc",
        f"{PACKAGE.relative_to(ROOT).as_posix()}/ops/{name}.py",
        f"{PACKAGE.relative_to(ROOT).as_posix()}/nvrtc_kernels/{name}.cu",
        f"tests/test_{name}.py",
        f"tests/test_{name}_distributed.py",
        f"docs/kernels/{name}.md",
        f"benchmarks/bench_{name}.py",
        f"benchmarks/bench_{name}_*.py",
        f"benchmarks/report_{name}.py",
        f"benchmarks/overhead/{name}.py",
        f"docs/_static/perf/*/{name}.*",
    ]
    named = {p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()}
    # NAME_* patterns also match an op whose name starts with NAME_ (norm_fast's files for
    # norm): those are the other op's.
    longer = [op for op in declared_ops() if op.startswith(f"{name}_")]
    named = {p for p in named if not any(re.search(rf"(?:^|[/_]){op}(?:[/._]|$)", p.name) for op in longer)}
    marked = {p for p, text in project_texts().items() if name in file_owners(text)}
    return sorted(named | marked)


def project_paths() -> list[Path]:
    """The project's files: in a git repository, those git does not ignore; in a copy being
    generated (the template's tools/new_library.py), every file but output and environments."""
    if (ROOT / ".git").exists():
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout.decode()
        return [ROOT / p for p in listed.split("\0") if p]
    return [
        p
        for p in ROOT.rglob("*")
        if not (
            NOT_PROJECT & set(p.relative_to(ROOT).parts) or p.relative_to(ROOT).parts[0].startswith(".venv")
        )
    ]


def project_texts() -> dict[Path, str]:
    """The project's text files (see :func:`project_paths`) and their text."""
    paths = project_paths()
    texts = {}
    for path in paths:
        if path.is_file() and not path.is_symlink():
            try:
                texts[path] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return texts


def file_owners(text: str) -> set[str]:
    """The ops a file says it belongs to (``op-file: a, b`` in its first ten lines)."""
    head = "\n".join(text.splitlines()[:10])
    return {op for m in FILE_MARK.finditer(head) for op in m.group(1).split(", ")}


def without_table_rows(text: str, name: str) -> str:
    """Markdown ``text`` without the table rows about ``name`` (first cell: `NAME` or `NAME(...)`)."""
    return re.sub(rf"^\|[ \t]*`{re.escape(name)}[`(][^\n]*\n", "", text, flags=re.MULTILINE)


def import_statement(head: str, names: list[str], line_length: int = 110) -> str:
    """``head`` (``from .ops import ``) and ``names`` as ruff formats them at pyproject.toml's
    line length: one line where it fits, else one name a line in parentheses."""
    line = f"{head}{', '.join(names)}\n"
    if len(line) - 1 <= line_length:
        return line
    return head + "(\n" + "".join(f"    {n},\n" for n in names) + ")\n"


def without_export(text: str, name: str) -> str:
    """__init__.py without ``name`` in ``from .ops import ...`` and in ``__all__``."""

    def drop(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(2).replace("(", "").replace(")", "").split(",")]
        kept = [n for n in names if n and n != name]
        return import_statement(match.group(1), kept) if kept else ""

    text = re.sub(r"^(from \.ops import )(\([^)]*\)|[^\n]*)\n", drop, text, flags=re.MULTILINE)
    return re.sub(rf'^\s*"{re.escape(name)}",\n', "", text, flags=re.MULTILINE)


def without_answer(text: str, name: str) -> str:
    """.copier-answers.yml without ``name`` among the template ops the library keeps."""

    def drop(match: re.Match[str]) -> str:
        kept = [op for op in match.group(2).split(",") if op.strip() and op.strip() != name]
        return match.group(1) + ",".join(kept)

    return re.sub(r"^(ops: ?)([\w,]*)$", drop, text, count=1, flags=re.MULTILINE)


def with_triton_build(text: str, needed: bool) -> str:
    """pyproject.toml's text with the Triton build requirement in force (``needed``) or
    commented out (a library with no Triton kernel needs no Triton to build)."""

    def toggle(match: re.Match[str]) -> str:
        lines = match.group(2).splitlines(keepends=True)
        if needed:
            body = "".join(line[2:] if line.startswith("# ") else line for line in lines)
        else:
            body = "".join(line if line.startswith("# ") else "# " + line for line in lines)
        return match.group(1) + body + match.group(3)

    return TRITON_BUILD.sub(toggle, text)


def dependents(name: str) -> list[str]:
    """Other ops whose modules import op ``name``'s (``from .NAME import``)."""
    uses = re.compile(rf"^\s*from \.{re.escape(name)} import ", re.MULTILINE)
    return [
        op for op in declared_ops() if op != name and uses.search((REGISTRY.parent / f"{op}.py").read_text())
    ]


def plan(name: str) -> tuple[list[Path], dict[Path, str]]:
    """What removing ``name`` deletes, and the new text of every file it edits."""
    files = own_files(name)
    edits: dict[Path, str] = {}
    for path, text in project_texts().items():
        if path in files:
            continue
        new = text
        if path == REGISTRY:
            new = REGISTRATION.sub(lambda m: "" if m.group(1) == name else m.group(0), text)
        elif path == PACKAGE / "__init__.py":
            new = without_export(text, name)
        elif path == ANSWERS:
            new = without_answer(text, name)
        elif path == PYPROJECT:
            triton_left = [p for p in triton_kernels() if p not in files]
            new = with_triton_build(text, needed=bool(triton_left))
        if path.suffix == ".md":
            new = without_table_rows(new, name)
        if new != text:
            edits[path] = new
    return files, edits


def remove_empty_folders(files: list[Path]) -> None:
    """The folders that deleting ``files`` emptied (an op's kernels/<op>/ and its cubin/)."""
    for folder in sorted({p.parent for p in files}, key=lambda p: len(p.parts), reverse=True):
        if folder != ROOT and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def apply(files: list[Path], edits: dict[Path, str]) -> None:
    for path in files:
        path.unlink()
    remove_empty_folders(files)
    for path, text in edits.items():
        path.write_text(text, encoding="utf-8")
    render_op_lists()


def render_op_lists() -> list[Path]:
    """Render the pages' lists of the ops of a kind (``<!-- render: ops ... -->``) for the ops
    declared now; the pages changed. tools/new_op.py and tools/update_from_template.py call it too."""
    render_docs = ROOT / "tools" / "render_docs.py"
    return runpy.run_path(str(render_docs))["render_ops_spans"]() if render_docs.is_file() else []


def check_removable(name: str) -> None:
    """Exits with the reason when ``name`` cannot be removed."""
    found = declared_ops()
    if name not in found:
        known = ", ".join(found) or "none"
        where = REGISTRY.relative_to(ROOT)
        sys.exit(f"error: {where} registers no op {name!r} (no 'from .{name} import' line); ops: {known}")
    if name in KEEP:
        sys.exit(f"error: {name} stays: {KEEP[name]}")
    users = dependents(name)
    if users:
        sys.exit(f"error: the modules of {', '.join(users)} import {name}: remove or rewrite them first")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the op to remove, as registered in ops/__init__.py")
    parser.add_argument("--dry-run", action="store_true", help="list what would change, change nothing")
    args = parser.parse_args(argv)
    name: str = args.name
    check_removable(name)
    files, edits = plan(name)
    for path in files:
        print(f"delete {path.relative_to(ROOT)}")
    for path in edits:
        print(f"edit   {path.relative_to(ROOT)}")
    if args.dry_run:
        return 0
    apply(files, edits)
    print(f"removed {name}: rebuild (pip install -e . or nox) and run the tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
