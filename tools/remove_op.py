#!/usr/bin/env python3
"""Remove an op everywhere it lives: python3 tools/remove_op.py NAME [--dry-run]

Deletes the op's own files (named for it, or saying ``op-file: NAME`` in their first lines), its
registration line and its answer; renders the spans that list the ops again (the README's op
table among them; tools/render_docs.py). docs/template.md is the manual.
"""

from __future__ import annotations

import argparse
import contextlib
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
KEEP = {"scale": "the docs (docs/writing_a_kernel.md, docs/architecture.md) walk through its files"}
# Output and environments, never the project's own text (where git cannot tell).
NOT_PROJECT = {".git", "build", "dist", ".nox", "_build", "_generated", "__pycache__"}
FILE_MARK = re.compile(r"(?:#|//|<!--) op-file: (\w+(?:, \w+)*)")
# pyproject.toml's Triton build requirement: needed while an op's folder holds a Triton kernel.
TRITON_BUILD = re.compile(r"^(# \[triton-build\.begin\][^\n]*\n)(.*?)(^# \[triton-build\.end\])", re.S | re.M)
OWN_FILES = [
    "kernels/{0}/**/*", "kernels/{0}.*", "kernels/{0}_*", "kernels/cubin/{0}.*", "kernels/cubin/{0}_*",
    "kernels/triton/{0}.*", "kernels/triton/{0}_*", "bindings/{0}_binding.cc", "tests/test_{0}.py",
    "python/scale_lib/ops/{0}.py", "python/scale_lib/nvrtc_kernels/{0}.cu", "tests/test_{0}_distributed.py",
    "docs/kernels/{0}.md", "benchmarks/bench_{0}.py", "benchmarks/bench_{0}_*.py",
    "benchmarks/report_{0}.py", "benchmarks/overhead/{0}.py", "docs/_static/perf/*/{0}.*",
]  # fmt: skip


def declared_ops() -> list[str]:
    """The ops the library registers, in the order of their lines."""
    return REGISTRATION.findall(REGISTRY.read_text())


def triton_kernels() -> list[Path]:
    return [p for p in ROOT.glob("kernels/*/*.py") if p.parent.name in (p.stem, "triton")]


def own_files(name: str) -> list[Path]:
    """The files only ``name``'s: by their names (kernels/NAME.*: an own op from before op folders),
    not a longer op's (norm_fast's for norm); or marked ``op-file: NAME``."""
    named = {p for pattern in OWN_FILES for p in ROOT.glob(pattern.format(name)) if p.is_file()}
    longer = [op for op in declared_ops() if op.startswith(f"{name}_")]
    named = {p for p in named if not any(re.search(rf"(?:^|[/_]){op}(?:[/._]|$)", p.name) for op in longer)}
    return sorted(named | {p for p, text in project_texts().items() if name in file_owners(text)})


def project_paths() -> list[Path]:
    """The project's files: in a git repository, those git does not ignore; in a copy being
    generated (tools/new_library.py), every file but output and environments."""
    if (ROOT / ".git").exists():
        git = ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        listed = subprocess.run(git, capture_output=True, check=True).stdout.decode()
        return [ROOT / p for p in listed.split("\0") if p]
    parts = (p.relative_to(ROOT).parts for p in ROOT.rglob("*"))
    return [ROOT.joinpath(*q) for q in parts if not (NOT_PROJECT & set(q) or q[0].startswith(".venv"))]


def project_texts() -> dict[Path, str]:
    """The project's text files and their text."""
    texts = {}
    for path in (p for p in project_paths() if p.is_file() and not p.is_symlink()):
        with contextlib.suppress(UnicodeDecodeError):
            texts[path] = path.read_text(encoding="utf-8")
    return texts


def file_owners(text: str) -> set[str]:
    """The ops a file says it belongs to (``op-file: a, b`` in its first ten lines)."""
    head = "\n".join(text.splitlines()[:10])
    return {op for m in FILE_MARK.finditer(head) for op in m.group(1).split(", ")}


def without_answer(text: str, name: str) -> str:
    """.copier-answers.yml without ``name`` among the template ops the library keeps."""

    def drop(match: re.Match[str]) -> str:
        return match.group(1) + ",".join(
            op for op in match.group(2).split(",") if op.strip() not in ("", name)
        )

    return re.sub(r"^(ops: ?)([\w,]*)$", drop, text, count=1, flags=re.MULTILINE)


def with_triton_build(text: str, needed: bool) -> str:
    """pyproject.toml's text with the Triton build requirement in force (``needed``) or
    commented out (a library with no Triton kernel needs no Triton to build)."""

    def toggle(match: re.Match[str]) -> str:
        lines = match.group(2).splitlines(keepends=True)
        body = (line[2:] if line.startswith("# ") else line for line in lines)
        if not needed:
            body = (line if line.startswith("# ") else "# " + line for line in lines)
        return match.group(1) + "".join(body) + match.group(3)

    return TRITON_BUILD.sub(toggle, text)


def plan(name: str) -> tuple[list[Path], dict[Path, str]]:
    """What removing ``name`` deletes, and the new text of every file it edits."""
    files, edits = own_files(name), {}
    for path, text in project_texts().items():
        new = text
        if path == REGISTRY:
            new = REGISTRATION.sub(lambda m: "" if m.group(1) == name else m.group(0), text)
        elif path == ANSWERS:
            new = without_answer(text, name)
        elif path == ROOT / "pyproject.toml":
            new = with_triton_build(text, needed=any(p not in files for p in triton_kernels()))
        if new != text and path not in files:
            edits[path] = new
    return files, edits


def apply(files: list[Path], edits: dict[Path, str]) -> list[Path]:
    """Delete ``files``, write ``edits``; the pages whose lists of the ops it rendered again."""
    for path in files:
        path.unlink()
    for folder in sorted({p.parent for p in files}, key=lambda p: len(p.parts), reverse=True):
        if folder != ROOT and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # what deleting the files emptied: kernels/<op>/ and its cubin/
    for path, text in edits.items():
        path.write_text(text, encoding="utf-8")
    return render_op_lists()


def render_op_lists() -> list[Path]:
    """Render the pages' lists of the ops of a kind for the ops declared now; the pages changed."""
    render_docs = ROOT / "tools" / "render_docs.py"
    return runpy.run_path(str(render_docs))["render_ops_spans"]() if render_docs.is_file() else []


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the op to remove, as registered in ops/__init__.py")
    parser.add_argument("--dry-run", action="store_true", help="list what would change, change nothing")
    args = parser.parse_args(argv)
    name, found = args.name, declared_ops()
    if name not in found:
        known = ", ".join(found) or "none"
        where = f"{REGISTRY.relative_to(ROOT)} registers no op {name!r} (no 'from .{name} import' line)"
        sys.exit(f"error: {where}; ops: {known}")
    if name in KEEP:
        sys.exit(f"error: {name} stays: {KEEP[name]}")
    uses = re.compile(rf"^\s*from \.{re.escape(name)} import ", re.MULTILINE)
    users = [op for op in found if op != name and uses.search((REGISTRY.parent / f"{op}.py").read_text())]
    if users:
        sys.exit(f"error: the modules of {', '.join(users)} import {name}: remove or rewrite them first")
    files, edits = plan(name)
    for verb, paths in (("delete", files), ("edit  ", edits)):
        print("".join(f"{verb} {p.relative_to(ROOT)}\n" for p in paths), end="")
    if args.dry_run:
        print("render the pages that list the ops (README.md's op table among them)")
    else:
        print("".join(f"render {p.relative_to(ROOT)}\n" for p in apply(files, edits)), end="")
        print(f"removed {name}: rebuild (pip install -e . or nox) and run the tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
