#!/usr/bin/env python3
"""Remove an op everywhere it lives: python3 tools/remove_op.py NAME [--dry-run]

Deletes the op's own files (kernels/NAME*, kernels/cubin/NAME*, kernels/triton/NAME*,
bindings/NAME_binding.cc, tests/test_NAME.py, docs/kernels/NAME.md, benchmarks/bench_NAME.py and
report_NAME.py, measured results docs/_static/perf/*/NAME.*), its section of
python/scale_lib/ops.py (from its ``# ===== op: NAME =====`` line to the next op's), its export
from the package's __init__.py, its row of the README's op table, and the blocks of the docs that
show its code, marked ``<!-- op: NAME -->`` ... ``<!-- /op: NAME -->`` (a shared page keeps its
general part). Everything else (the suites that run every op, the API docs, the benchmark
report, the sanitizer list, the workflows) follows the declared ops by itself.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "scale_lib"
OPS_PY = PACKAGE / "ops.py"
SECTION = re.compile(r"^# ===== (?:op: (\w+)|end of ops) =====$", re.MULTILINE)
# scale is the worked example of the shared docs (writing a kernel, the architecture).
KEEP = {"scale": "the docs (docs/writing_a_kernel.md, docs/architecture.md) walk through its files"}


def sections(text: str) -> dict[str, tuple[int, int]]:
    """Each op's section of ops.py as (start, end) character offsets."""
    marks = list(SECTION.finditer(text))
    return {m.group(1): (m.start(), nxt.start()) for m, nxt in itertools.pairwise(marks) if m.group(1)}


def own_files(name: str) -> list[Path]:
    patterns = [
        f"kernels/{name}.*",
        f"kernels/{name}_*",
        f"kernels/cubin/{name}.*",
        f"kernels/cubin/{name}_*",
        f"kernels/triton/{name}.*",
        f"kernels/triton/{name}_*",
        f"bindings/{name}_binding.cc",
        f"tests/test_{name}.py",
        f"docs/kernels/{name}.md",
        f"benchmarks/bench_{name}.py",
        f"benchmarks/bench_{name}_*.py",
        f"benchmarks/report_{name}.py",
        f"docs/_static/perf/*/{name}.*",
    ]
    return sorted({p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()})


def remove_empty_folders(files: list[Path]) -> None:
    """The folders that deleting ``files`` emptied (kernels/cubin/ without its last kernel)."""
    for folder in sorted({p.parent for p in files}, key=lambda p: len(p.parts), reverse=True):
        if folder != ROOT and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def doc_pages() -> list[Path]:
    """The Markdown pages that may hold op blocks."""
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def without_op_blocks(text: str, name: str) -> str:
    """``text`` without the blocks marked as showing op ``name``'s code."""
    block = rf"<!-- op: {re.escape(name)} -->.*?<!-- /op: {re.escape(name)} -->\n?"
    return re.sub(block, "", text, flags=re.DOTALL)


def without_export(text: str, name: str) -> str:
    """__init__.py without ``name`` in ``from .ops import ...`` and in ``__all__``."""

    def drop(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(2).replace("(", "").replace(")", "").split(",")]
        kept = [n for n in names if n and n != name]
        return f"{match.group(1)}{', '.join(kept)}\n" if kept else ""

    text = re.sub(r"^(from \.ops import )(\([^)]*\)|[^\n]*)\n", drop, text, flags=re.MULTILINE)
    return re.sub(rf'^\s*"{re.escape(name)}",\n', "", text, flags=re.MULTILINE)


def without_unused_imports(text: str) -> str:
    """ops.py without the names its header imports that no section uses any more."""
    first = SECTION.search(text)
    header_end = first.start() if first else len(text)
    header, body = text[:header_end], text[header_end:]

    def used(name: str, line: str) -> bool:
        rest = text.replace(line, "", 1)
        return re.search(rf"(?<![\w.]){re.escape(name)}\b", rest) is not None

    def from_import(match: re.Match[str]) -> str:
        if match.group(1) == "from __future__ import ":
            return match.group(0)
        names = [n.strip() for n in match.group(2).split(",")]
        kept = [n for n in names if used(n.split(" as ")[-1], match.group(0))]
        return f"{match.group(1)}{', '.join(kept)}\n" if kept else ""

    def plain_import(match: re.Match[str]) -> str:
        return match.group(0) if used(match.group(1), match.group(0)) else ""

    header = re.sub(r"^(from [\w.]+ import )([\w, ]+)\n", from_import, header, flags=re.MULTILINE)
    header = re.sub(r"^import (\w+)\n", plain_import, header, flags=re.MULTILINE)
    return header + body


def dependents(text: str, name: str) -> list[str]:
    """Other ops whose sections call the public function ``name``."""
    call = re.compile(rf"(?<![\w.]){re.escape(name)}\(")
    return [
        other
        for other, (start, end) in sections(text).items()
        if other != name and call.search(text[start:end])
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the op to remove, as declared in ops.py")
    parser.add_argument("--dry-run", action="store_true", help="list what would change, change nothing")
    args = parser.parse_args(argv)
    name: str = args.name

    text = OPS_PY.read_text()
    found = sections(text)
    if name not in found:
        known = ", ".join(found) or "none"
        sys.exit(f"error: ops.py declares no op {name!r} (no '# ===== op: {name} =====' line); ops: {known}")
    if name in KEEP:
        sys.exit(f"error: {name} stays: {KEEP[name]}")
    users = dependents(text, name)
    if users:
        sys.exit(f"error: {', '.join(users)} call(s) {name} in ops.py: remove or rewrite them first")

    files = own_files(name)
    start, end = found[name]
    new_ops = without_unused_imports(text[:start] + text[end:])
    init = PACKAGE / "__init__.py"
    new_init = without_export(init.read_text(), name)
    readme = ROOT / "README.md"
    readme_text = readme.read_text()
    new_readme = re.sub(rf"^\| `{re.escape(name)}\(.*\n", "", readme_text, flags=re.MULTILINE)

    new_readme = without_op_blocks(new_readme, name)
    pages = {p: without_op_blocks(p.read_text(), name) for p in doc_pages() if p.is_file() and p != readme}
    pages = {p: new for p, new in pages.items() if new != p.read_text()}
    changed = [
        p
        for p, old, new in ((init, init.read_text(), new_init), (readme, readme_text, new_readme))
        if old != new
    ] + list(pages)
    for path in files:
        print(f"delete {path.relative_to(ROOT)}")
    print(f"edit   {OPS_PY.relative_to(ROOT)} (its section, {text.count(chr(10), start, end)} lines)")
    for path in changed:
        print(f"edit   {path.relative_to(ROOT)}")
    if args.dry_run:
        return 0
    for path in files:
        path.unlink()
    remove_empty_folders(files)
    OPS_PY.write_text(new_ops)
    init.write_text(new_init)
    readme.write_text(new_readme)
    for path, new in pages.items():
        path.write_text(new)
    print(f"removed {name}: rebuild (pip install -e . or nox) and run the tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
