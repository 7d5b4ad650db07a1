#!/usr/bin/env python3
"""Make a new kernel library from this template: a project of its own, ready to build and update.

    python3 tools/new_library.py my_kernels --dest ../my_kernels [--ops rms_norm,flatnonzero]

Runs `copier copy` on this checkout's last commit (copier.yml), whose task is this script's
``--apply`` in the new project: keep the chosen ops, rename the library, format, commit. An update
replays it (tools/update_from_template.py). docs/template.md is the manual.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

AUTHOR_NOTE = "TODO(author)"  # followed by a colon: what the lint's scaffold-notes hook finds
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import remove_op  # noqa: E402 (the tools' folder first)
from op_names import identifier  # noqa: E402
from update_from_template import format_files, tool_python  # noqa: E402

OLD = "scale_lib"
ALWAYS = "scale"  # the worked example of the docs: every library keeps it
ANSWERS = ".copier-answers.yml"
# Markdown blocks only the template has, and blocks (commented out) only a generated library has.
TEMPLATE_ONLY = re.compile(
    r"<!-- template-only -->.*?<!-- /template-only -->\n?"
    r"|^[ \t]*# template-only:begin.*?^[ \t]*# template-only:end[^\n]*\n",
    re.DOTALL | re.MULTILINE,
)
FORK_ONLY = re.compile(r"<!-- fork-only\n(.*?)-->\n", re.DOTALL)


def spellings(name: str) -> dict[str, str]:
    """The library name as the package, the distribution and macros write it."""
    return {"snake": name, "dist": name.replace("_", "-"), "upper": name.upper()}


# The template's library name in any of its spellings.
OLD_NAMES = re.compile("|".join(re.escape(spelling) for spelling in spellings(OLD).values()))


def renamer(new: str):
    old, new_s = spellings(OLD), spellings(new)
    table = {old[k]: new_s[k] for k in old}
    return lambda text: OLD_NAMES.sub(lambda m: table[m.group(0)], text)


# Modules a library must not shadow: what it and its users import by these names.
TAKEN = {"tvm_ffi", "jax_tvm_ffi", "numpy", "torch", "jax", "jaxlib", "paddle", "cupy", "triton"}


def check_name(name: str) -> None:
    """The op names' rule (the name is a C++ namespace too), and no module it would shadow."""
    identifier(name, "library name")
    if name == OLD:
        sys.exit(f"error: {name!r} is the template's own name; choose a new one, such as my_kernels")
    if name in sys.stdlib_module_names or name in TAKEN:
        sys.exit(f"error: {name!r} is the name of a module Python code imports; the library would shadow it")


# -- inside the new project (copier's task) ---------------------------------------------------
def prune_ops(keep: set[str]) -> None:
    """Remove every example op not in ``keep``, as tools/remove_op.py does."""
    declared = remove_op.declared_ops()
    unknown = sorted(keep - set(declared))
    if unknown:
        sys.exit(f"error: no example op {', '.join(unknown)}; the template's ops: {', '.join(declared)}")
    for op in reversed(declared):  # users of an op (axpby calls scale) go first
        if op not in keep:
            remove_op.apply(*remove_op.plan(op))


def without_template_only(text: str) -> str:
    """``text`` without its template-only blocks, one blank line left where a block stood between two
    (a paragraph, a workflow's job); atomic, so that a block never grows to a later block's end."""
    return re.sub(
        rf"(?<=\n\n)(?>(?:{TEMPLATE_ONLY.pattern}))\n|{TEMPLATE_ONLY.pattern}", "", text, flags=re.S | re.M
    )


def own_project(name: str) -> None:
    """The new project's own history, version and wording: no template results or changelog."""
    shutil.rmtree(ROOT / "docs" / "_static" / "perf", ignore_errors=True)
    changelog = "Notable changes, newest first (see CONTRIBUTING.md, releasing)."
    (ROOT / "CHANGELOG.md").write_text(f"# Changelog\n\n{changelog}\n\n## Unreleased\n")
    pages = ["README.md", "CONTRIBUTING.md", "noxfile.py", ".ci/run", ".github/workflows/*.yml"]
    for page in [p for pattern in [*pages, "docs/**/*.md", "tests/*.py"] for p in sorted(ROOT.glob(pattern))]:
        text = page.read_text()
        new = FORK_ONLY.sub(lambda m: m.group(1), without_template_only(text)).rstrip("\n") + "\n"
        if new != text:
            page.write_text(new)
    init = ROOT / "python" / OLD / "__init__.py"
    init.write_text(re.sub(r'^__version__ = ".*"$', '__version__ = "0.1.0"', init.read_text(), flags=re.M))


def rename_tree(name: str) -> list[Path]:
    """Rename the library in every path and file; returns the files whose text changed."""
    rename, changed, most_per_line = renamer(name), [], 0  # the most mentions on a line of Python
    for path in sorted(remove_op.project_paths(), key=lambda p: len(p.parts), reverse=True):
        rel = path.relative_to(ROOT)
        if rel.as_posix() == ANSWERS or not path.is_file() or path.is_symlink():
            continue
        target = ROOT / rename(rel.as_posix())
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            text = None
        if target != path:
            target.parent.mkdir(parents=True, exist_ok=True)
            path.replace(target)  # an update writes the new template next to the renamed files
        if text is not None and rename(text) != text:
            target.write_text(rename(text), encoding="utf-8")
            changed.append(target)
            if target.suffix in (".py", ".pyi"):
                mentions = (len(OLD_NAMES.findall(line)) for line in text.splitlines())
                most_per_line = max(most_per_line, *mentions)
    for path in sorted(ROOT.glob(f"**/*{OLD}*/"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    # The lint's limit on line length grows by what the rename added to a line (pyproject.toml).
    extra, pyproject = most_per_line * (len(name) - len(OLD)), ROOT / "pyproject.toml"
    if extra > 0:
        limit = re.compile(r"^(max-line-length = )(\d+)$", re.M)
        pyproject.write_text(limit.sub(lambda m: f"{m[1]}{int(m[2]) + extra}", pyproject.read_text(), 1))
    return changed


def initial_commit(name: str) -> None:
    git = ["git", "-C", str(ROOT)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    if subprocess.run([*git, "config", "user.email"], capture_output=True).returncode != 0:
        git += ["-c", f"user.name={name} developers", "-c", f"user.email={name}@localhost"]
    message = f"{name} 0.1.0, from the kernel-library template"
    subprocess.run([*git, "commit", "-q", "--no-verify", "-m", message], check=True)


# -- an update across a change of layout (copier drops a file the new version moved) -----------
LEGACY_SECTION = re.compile(r"^# ===== (?:op: (\w+)|end of ops) =====\n", re.MULTILINE)


def legacy_sections(text: str) -> tuple[str, dict[str, str]]:
    """The old ops.py's header (its imports) and each op's section."""
    parts = LEGACY_SECTION.split(text)
    sections = {parts[i]: parts[i + 1].strip("\n") + "\n" for i in range(1, len(parts) - 1, 2) if parts[i]}
    return parts[0], sections


def came_from() -> str | None:
    """The template commit the library was made or last updated from (its committed answers)."""
    show = subprocess.run(["git", "show", f"HEAD:./{ANSWERS}"], cwd=ROOT, capture_output=True, text=True)
    found = re.search(r"^_commit: (\S+)", show.stdout, re.MULTILINE)
    return found.group(1) if found else None


def template_file(src: str, commit: str, path: str, name: str) -> str | None:
    """``path`` of the template at ``commit``, renamed for the library (None if not found)."""
    shown = subprocess.run(["git", "-C", src, "show", f"{commit}:{path}"], capture_output=True, text=True)
    return renamer(name)(shown.stdout) if shown.returncode == 0 else None


def merge_into(target: Path, ours: str, base: str) -> None:
    """``target`` (the new version) merged three ways with ``ours`` (the library's), from their
    common ``base``; a clash is left inline, labelled as copier labels its own."""
    with tempfile.TemporaryDirectory() as tmp:
        mine, common = Path(tmp, "ours"), Path(tmp, "base")
        mine.write_text(ours)
        common.write_text(base)
        labels = ["-L", "before updating", "-L", "last update", "-L", "after updating"]
        subprocess.run(["git", "merge-file", *labels, mine, common, target], check=False)
        target.write_text(mine.read_text())


def migrate_moved_files(name: str, src: str, commit: str) -> None:
    """Every file the template moved since ``commit`` (git's rename detection) that the library
    edited: its edits merged into the file's new place."""
    diff = ["git", "-C", src, "diff", "--name-status", "-M", commit, "HEAD"]
    diff, rename = subprocess.run(diff, capture_output=True, text=True), renamer(name)
    if diff.returncode != 0:  # copier would drop the moved files the library edited: stop
        sys.exit(f"error: cannot compare the template at {commit} with the new version: {diff.stderr}")
    for old, new in re.findall(r"^R\d*\t(\S+)\t(\S+)$", diff.stdout, re.MULTILINE):
        before, after = ROOT / rename(old), ROOT / rename(new)
        base = template_file(src, commit, old, name)
        if before.is_file() and after.is_file() and base is not None and before.read_text() != base:
            merge_into(after, before.read_text(), base)


def module_head(text: str) -> str:
    """A module's text up to the end of its imports and the blank lines after them."""
    lines = text.splitlines(keepends=True)
    imports = [n.end_lineno or 0 for n in ast.parse(text).body if isinstance(n, ast.Import | ast.ImportFrom)]
    end = max(imports, default=0)
    while end < len(lines) and not lines[end].strip():
        end += 1
    return "".join(lines[:end])


def migrate_ops_py(name: str, src: str, commit: str) -> None:
    """A library made before ops were modules keeps its ops: each section of its
    python/<name>/ops.py becomes python/<name>/ops/<op>.py. Its own ops move as they are
    (registered in ops/__init__.py); an example op's new module is merged three ways with the
    library's section and the section of the template version it came from."""
    legacy, package = ROOT / "python" / name / "ops.py", ROOT / "python" / name / "ops"
    if not (legacy.is_file() and LEGACY_SECTION.search(legacy.read_text())):
        return
    old = template_file(src, commit, f"python/{OLD}/ops.py", name)
    if old is None:  # copier would drop ops.py and the library's ops with it: stop
        sys.exit(f"error: no python/{OLD}/ops.py in the template at {commit} to merge the library's with")
    header, ours = legacy_sections(legacy.read_text())
    base = legacy_sections(old)[1]
    absolute = re.compile(r"^(\s*)from \.(_\w+) import", re.MULTILINE)

    def absolute_imports(text: str) -> str:  # modules of ops/ import the package's by its name
        return absolute.sub(rf"\1from {name}.\2 import", text)

    # The header's imports, one statement each however they were wrapped.
    imports = [
        ast.unparse(node)
        for node in ast.parse(absolute_imports(header)).body
        if isinstance(node, ast.Import | ast.ImportFrom) and getattr(node, "module", "") != "__future__"
    ]
    registry = package / "__init__.py"
    from new_op import register_op

    created = []
    for op, section in ours.items():
        module = package / f"{op}.py"
        if op not in base:  # the library's own op
            others = [o for o in ours if o != op and re.search(rf"(?<![\w.]){o}\(", section)]
            lines = [*imports, f"from {name}._spec import ArrayT", *(f"from .{o} import {o}" for o in others)]
            # The pattern it shows: the README's op table reads it; the lint flags the note.
            doc = f'"""{AUTHOR_NOTE}: the pattern it shows.\n\nThe declaration of {op} and its function."""'
            head = ["# SPDX-License-Identifier: Apache-2.0", doc, "", "from __future__ import annotations"]
            module.write_text("\n".join([*head, "", *lines, "", "", absolute_imports(section)]))
            register_op(registry, op)
            created.append(module)
        elif not module.is_file():
            print(f"note: {op}: the library's section of an example op it no longer has is left out")
        elif section != base[op]:
            head = module_head(module.read_text())
            merge_into(module, head + absolute_imports(section), head + absolute_imports(base[op]))
    legacy.unlink()
    if created:  # the old header's imports that an op does not use go
        format_files([*created, registry], fix="F401,I001", python=Path(sys.executable))


def apply(name: str, ops: list[str], commit: bool, template_src: str | None = None) -> int:
    check_name(name)
    if not (ROOT / "python" / OLD / "ops" / "__init__.py").is_file():
        sys.exit(f"error: --apply runs inside a copy of the template (no python/{OLD}/ops/ here)")
    prune_ops({ALWAYS, *ops})
    own_project(name)
    shutil.rmtree(ROOT / "tools" / "template_check")  # the template's own machinery
    for machinery in ("check_template.py", "new_library.py"):
        (ROOT / "tools" / machinery).unlink()
    format_files(rename_tree(name), python=Path(sys.executable))
    old = None if commit else came_from()
    if template_src and old:  # an update (copier passes its checkout of the template)
        migrate_moved_files(name, template_src, old)
        migrate_ops_py(name, template_src, old)
    if commit:
        initial_commit(name)
    return 0


# -- in the template checkout ---------------------------------------------------------------
def generate(name: str, dest: Path, ops: list[str], force: bool, vcs_ref: str | None) -> int:
    check_name(name)
    if dest.exists() and any(dest.iterdir()):
        if not force:
            sys.exit(f"error: {dest} exists (pass --force to replace it)")
        shutil.rmtree(dest)
    if not vcs_ref:
        # The committed template, never uncommitted or git-ignored files of this checkout (copier
        # would add those for "HEAD"), so that .copier-answers.yml names a commit updates can find.
        git = ["git", "-C", str(ROOT)]
        vcs_ref = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout.strip():
            print(f"note: uncommitted changes in {ROOT} are not used; generating from commit {vcs_ref[:12]}")
    kept = ",".join([ALWAYS, *(o for o in ops if o != ALWAYS)])
    answers = ["--data", f"name={name}", "--data", f"ops={kept}"]
    command = [tool_python(ROOT), "-m", "copier", "copy", "--trust", "--defaults", "--quiet", *answers]
    if subprocess.run([*command, "--vcs-ref", vcs_ref, ROOT, dest]).returncode != 0:
        return 1
    new = spellings(name)
    print(f"created {dest}: package {new['snake']}, distribution {new['dist']}, library lib{new['snake']}.so")
    print(f"next: cd {dest} && python3 tools/dev.py tests")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the new library's import name, e.g. my_kernels")
    parser.add_argument("--dest", type=Path, help="directory to create")
    parser.add_argument("--ops", default="", help="example ops to keep besides scale, e.g. rms_norm,l2_norm")
    parser.add_argument("--force", action="store_true", help="replace DEST if it exists")
    parser.add_argument("--vcs-ref", help="the template commit or tag to use (default: this checkout's HEAD)")
    for hidden in ("--apply", "--initial-commit", "--no-commit"):  # copier's task (copier.yml)
        parser.add_argument(hidden, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--template-src", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    if args.apply:
        return apply(args.name, ops, commit=args.initial_commit, template_src=args.template_src)
    if args.dest is None:
        parser.error("--dest is required")
    return generate(args.name, args.dest.resolve(), ops, args.force, args.vcs_ref)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
