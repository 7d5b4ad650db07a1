"""Copy an example op under a new name: ``python3 tools/new_op.py NAME --like OP``.

The library's example ops are tested kernels of their kinds, and some are the only starting
point for a pattern the scaffold does not write (a kernel compiled at run time by NVRTC,
docs/nvrtc.md; a kernel of several phases). ``--like`` copies OP's own files (tools/remove_op.py's
rule: the files named for it, its module in ops/, its NVRTC source), renaming the op in
names and text (``op``, ``Op``, ``OP``), and registers the copy (tools/new_op.py). The copy
builds and passes its tests as copied; then change its math, reference and docs page.

What is not copied: the example's measured results, files that hold it together with others
(``op-file:`` files not named for it, such as an example of two ops). A framework's function of
the op's name (``torch.<op>``, ``np.<op>``) keeps its name: it is the reference the copy is
checked against, as a shared test helper is (imported under the copy's name).
"""

from __future__ import annotations

import ast
import re
import runpy
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A name after one of these is a framework's function (torch.<op>), not the op.
FRAMEWORK_PREFIX = re.compile(
    r"\b(?:torch|nn|F|functional|special|np|numpy|jnp|jax|lax|scipy|cp|cupy|paddle)\.$"
)


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def camel_spellings(old: str, texts: list[str]) -> set[str]:
    """How the texts spell ``old`` in CamelCase: ``FooBar`` for foo_bar, and ``ArgWhere`` for
    argwhere (where the words are cannot be told from the snake name)."""
    letters = re.compile(re.escape(old.replace("_", "")), re.IGNORECASE)
    found = {m.group(0) for text in texts for m in letters.finditer(text)}
    return {word for word in found if word[0].isupper() and not word.isupper()} | {camel(old)}


def renamer(old: str, new: str, library: str, texts: list[str]) -> Callable[[str], str]:
    """A function renaming op ``old`` to ``new`` in a text: snake, Camel (as ``texts`` spell it)
    and UPPER spellings, within longer names too (``test_op_gradients``, ``kOpThreads``),
    but not inside the library's own name (``scale`` in ``scale_lib``) nor after a framework's
    module."""
    forms = [(re.compile(rf"(?<![a-z0-9]){re.escape(old)}(?![a-z0-9])"), new)]
    forms += [
        (re.compile(rf"{re.escape(spelling)}(?![a-z])"), camel(new))  # CheckSoftmaxArgs too
        for spelling in sorted(camel_spellings(old, texts), key=len, reverse=True)
    ]
    forms.append((re.compile(rf"(?<![A-Z0-9]){re.escape(old.upper())}(?![A-Z0-9])"), new.upper()))
    shielded = [library, camel(library), library.upper()]

    def rename(text: str) -> str:
        for i, word in enumerate(shielded):  # the library's name never changes
            text = text.replace(word, f"\x00{i}\x00")
        for pattern, replacement in forms:
            text = pattern.sub(
                lambda m, r=replacement: m.group(0) if FRAMEWORK_PREFIX.search(m.string, 0, m.start()) else r,
                text,
            )
        for i, word in enumerate(shielded):
            text = text.replace(f"\x00{i}\x00", word)
        return text

    return rename


def keep_imported_names(original: str, renamed: str, copied_modules: set[str]) -> str:
    """``renamed`` (a copied Python file) importing what the original imported from modules
    that were not copied under their own names, each bound to its new name (``from reference
    import norm_reference as my_norm_reference``): the copy keeps the example's math, and
    names it under its own."""
    before = [n for n in ast.walk(ast.parse(original)) if isinstance(n, ast.ImportFrom)]
    after = [n for n in ast.walk(ast.parse(renamed)) if isinstance(n, ast.ImportFrom)]
    lines = renamed.splitlines(keepends=True)
    for old, new in reversed(list(zip(before, after, strict=True))):
        copied = (new.module or "").rsplit(".", 1)[-1] in copied_modules  # ops.<op>, from a test too
        if copied or [a.name for a in old.names] == [a.name for a in new.names]:
            continue
        pairs = [(a.name, b.asname or b.name) for a, b in zip(old.names, new.names, strict=True)]
        indent = lines[new.lineno - 1][: new.col_offset]
        head = f"{indent}from {'.' * new.level}{new.module or ''} import "
        plain = [name for name, bound in pairs if name == bound]
        # Ruff's import order: the plain names in one statement, then one per renamed name.
        statements = [head + ", ".join(plain) + "\n"] if plain else []
        statements += [f"{head}{name} as {bound}\n" for name, bound in pairs if name != bound]
        lines[new.lineno - 1 : new.end_lineno] = statements
    return "".join(lines)


# A page's passages about the template itself (its measurements): new_library.py drops them from
# a generated library; a copy made in the template checkout drops them too.
TEMPLATE_ONLY = re.compile(r"<!-- template-only -->.*?<!-- /template-only -->\n?", re.DOTALL)


def example_files(old: str, library: str) -> list[Path]:
    """``old``'s own files to copy: those named for it (tools/remove_op.py's ``own_files``),
    without measured results and without files it shares with other ops or suites."""
    remove = runpy.run_path(str(ROOT / "tools" / "remove_op.py"))
    named = re.compile(rf"(?:^|[_/]){re.escape(old)}(?:[._]|$)")
    files = []
    for path in remove["own_files"](old):
        relative = path.relative_to(ROOT).as_posix()
        in_folder = relative.startswith(f"kernels/{old}/")  # the op's folder is its, whatever the names
        if relative.startswith("docs/_static/") or not (
            in_folder or named.search(relative.rsplit("/", 1)[-1])
        ):
            continue
        files.append(path)
    return files


def copy_example(old: str, new: str, library: str) -> list[str]:
    """Copy op ``old``'s files as ``new``'s; returns the files created."""
    remove = runpy.run_path(str(ROOT / "tools" / "remove_op.py"))
    declared = remove["declared_ops"]()
    if old not in declared:
        raise SystemExit(
            f"error: --like {old}: the library has no op {old} (examples here: {', '.join(declared)}); "
            f"if {old} is an example op of the template this library was made from "
            f"(.copier-answers.yml) and was left out, a library generated with --ops {old} has it"
        )
    if old in remove["KEEP"]:  # its tests and docs lean on shared files (tests/reference.py)
        raise SystemExit(f"error: --like {old}: write an elementwise op with new_op.py {new} instead")
    files = example_files(old, library)
    rename = renamer(old, new, library, [path.read_text() for path in files])
    copies, targets = {}, {}
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        target = targets[path] = "/".join(map(rename, relative.split("/")))  # kernels/<op>/ too
        if (ROOT / target).exists():
            raise SystemExit(f"error: {new} exists already ({target})")
        text = path.read_text()
        if path.suffix == ".md":  # the template's measurements of the example are not the copy's
            text = re.sub(r"\n{3,}", "\n\n", TEMPLATE_ONLY.sub("", text))
        copies[target] = rename(text)
    copied_modules = {Path(target).stem for target in copies if target.endswith(".py")}
    for path in files:
        if path.suffix == ".py":
            copies[targets[path]] = keep_imported_names(
                path.read_text(), copies[targets[path]], copied_modules
            )
    for target, body in copies.items():
        (ROOT / target).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / target).write_text(body)
    return list(copies)
