#!/usr/bin/env python3
"""The names an op may take (tools/new_op.py checks them before it writes anything; so does
tools/new_library.py for the library's name): a lowercase identifier that is no C++ keyword, and
that hides nothing the library or its build use (a builtin or standard module the package
imports, a header <NAME.h> that kernels/NAME/NAME.h would shadow, a name the package binds)."""

from __future__ import annotations

import ast
import builtins
import keyword
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def library_name() -> str:
    packages = [p.name for p in (ROOT / "python").iterdir() if (p / "__init__.py").exists()]
    if len(packages) != 1:
        sys.exit(f"error: expected one package under python/, found {packages}")
    return packages[0]


# C++ keywords and alternative tokens: an op's name becomes C++ identifiers too.
CPP_KEYWORDS = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue
    co_await co_return co_yield decltype default delete do double dynamic_cast else enum
    explicit export extern false float for friend goto if inline int long mutable namespace new
    noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires return short signed sizeof static static_assert static_cast struct
    switch template this thread_local throw true try typedef typeid typename union unsigned
    using virtual void volatile wchar_t while xor xor_eq
    """.split()  # noqa: SIM905 (a list of words)
)


def identifier(name: str, what: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name) or keyword.issoftkeyword(name):
        sys.exit(f"error: {what} {name!r} must be a lowercase Python identifier (not a Python keyword)")
    if name in CPP_KEYWORDS:
        sys.exit(f"error: {what} {name!r} is a C++ keyword; the generated C++ code could not use it")
    return name


def bound_names(library: str) -> set[str]:
    """The names an op may not take: what the package, its ``ops`` package and the ops' modules
    or the library's exports already bind (``lib``, ``ops``, ``build_info``, ``register``, an
    export such as ``scale_new``...). The op would be hidden behind them, or clash with them in
    the library or in its own module."""
    package = ROOT / "python" / library
    names = {p.stem for p in package.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    for module in (package / "__init__.py", *(package / "ops").glob("*.py")):
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    for binding in (ROOT / "bindings").glob("*.cc"):
        text = binding.read_text()
        names |= set(re.findall(r"^[A-Z][A-Z0-9_]*_EXPORT\((\w+),", text, re.MULTILINE))
        # <EXPORT>_NEW(op, ...) exports op_new, the op's functional form.
        names |= {
            f"{op}_new" for op in re.findall(r"^[A-Z][A-Z0-9_]*_EXPORT_NEW\((\w+),", text, re.MULTILINE)
        }
    return names


# C's standard headers (C23). An op's sources include its header as "<op>.h", found first in
# their own folder, kernels/<op>/, so the op's header would stand in there for any header of that
# name (the project's own, such as tvm_ffi_utils.h); and a C header's name is often a macro of it
# (errno, assert) that the op's C++ names would expand.
C_HEADERS = frozenset(
    """
    assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal
    stdalign stdarg stdatomic stdbit stdbool stdckdint stddef stdint stdio stdlib stdnoreturn
    string tgmath threads time uchar wchar wctype
    """.split()  # noqa: SIM905 (a list of words)
)


def _include_dirs() -> list[Path]:
    """The system include directories of this machine's C++ compiler and of CUDA, where found."""
    dirs = []
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler:
        probe = subprocess.run(
            [compiler, "-xc++", "-E", "-v", os.devnull], capture_output=True, text=True, check=False
        )
        listed = re.search(r"#include <\.\.\.> search starts here:\n(.*?)\nEnd of search", probe.stderr, re.S)
        dirs += [Path(d.strip()) for d in listed.group(1).splitlines()] if listed else []
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs.append(Path(nvcc).resolve().parent.parent / "include")
    return [d for d in dirs if d.is_dir()]


def shadowed_headers() -> set[str]:
    """The names X for which kernels/X.h would shadow another header: C's standard headers, the
    project's own (include/), every <X.h> its sources include, and the headers at the top of the
    compiler's and CUDA's include directories."""
    names = set(C_HEADERS) | {p.stem for p in (ROOT / "include").glob("*.h")}
    for folder in ("kernels", "bindings", "include"):
        for source in (ROOT / folder).rglob("*"):
            if source.suffix in {".h", ".cuh", ".cu", ".cc"}:
                names |= set(re.findall(r"#\s*include\s*[<\"](\w+)\.h[>\"]", source.read_text()))
    for folder in _include_dirs():
        names |= {p.stem for p in folder.glob("*.h")}
    return names - existing_ops()


def python_names_used(library: str) -> set[str]:
    """Builtins (len, max, ...) and the standard library modules the package uses: an op's
    function in its module and the package namespace would hide them."""
    used = set(dir(builtins))
    for module in (ROOT / "python" / library).rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                used |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                used.add(node.module.split(".")[0])
    return {n for n in used if n in sys.stdlib_module_names or n in dir(builtins)}


def op_name(name: str, library: str) -> str:
    identifier(name, "op name")
    if name in python_names_used(library):
        sys.exit(
            f"error: op name {name!r} would shadow the Python builtin or standard module {library} uses; "
            "choose another name"
        )
    if name in shadowed_headers():
        sys.exit(
            f"error: op name {name!r} would make kernels/{name}/{name}.h shadow the header <{name}.h> "
            "(or clash with its macros); choose another name"
        )
    remover = _remover()
    existing = set(remover["declared_ops"]())
    bound = bound_names(library) - existing
    if name in bound:
        sys.exit(
            f"error: op name {name!r} is already bound by {library} (its package, its ops or its "
            "exported functions); the op would be hidden behind it. Choose another name"
        )
    own_forms = {f"{op}_new" for op in existing}  # the existing ops' functional forms
    if name not in existing and (f"{name}_new" in existing or f"{name}_new" in bound - own_forms):
        sys.exit(
            f"error: op {name!r} would export {name}_new, its functional form, a name {library} "
            "already binds; choose another name"
        )
    if name not in existing and (claimed := remover["own_files"](name)):
        shown = ", ".join(p.relative_to(ROOT).as_posix() for p in claimed[:4])
        sys.exit(
            f"error: op name {name!r} would make files that are not its own look like its files "
            f"({shown}), which tools/remove_op.py would delete with it; choose another name"
        )
    return name


def _remover() -> dict:
    return runpy.run_path(str(ROOT / "tools" / "remove_op.py"))


def existing_ops() -> set[str]:
    """The ops the library registers (tools/remove_op.py reads them)."""
    return set(_remover()["declared_ops"]())


# -- names the generated code uses beside an op's inputs and attributes -------------------------
PLACEHOLDER = "zzarg"  # stands for the op's inputs and attributes in a trial rendering


def names_beside_arguments(files: dict[str, str]) -> dict[str, str]:
    """name -> a file where it is used in a function that also takes one of the op's inputs or
    attributes (the files rendered with PLACEHOLDER names for them): an input or attribute of
    that name would collide with it (a C++ local such as ``n`` redeclared, a Python parameter
    given twice, a module such as ``np`` hidden in a test)."""
    used: dict[str, str] = {}
    for path, text in files.items():
        if path.endswith(".py"):
            found = _python_names_beside(text)
        elif path.endswith((".cc", ".cu", ".h")):
            found = _cpp_names_beside(text)
        else:
            continue
        for name in found:
            if PLACEHOLDER not in name:
                used.setdefault(name, path)
    return used


def _python_names_beside(text: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
            if any(PLACEHOLDER in p for p in params):
                names |= params | {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return names


def _cpp_names_beside(text: str) -> set[str]:
    """Identifiers (not members, not after ::) of each function whose parameters or body name a
    placeholder: its parameter list and body, found by matching brackets."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"", " ", text, flags=re.DOTALL)
    names: set[str] = set()
    for head in re.finditer(r"\)\s*(?:const\s*)?(?:->\s*[\w:<>]+\s*)?\{", code):
        start = _matching(code, head.start(), "(", ")", -1)
        end = _matching(code, head.end() - 1, "{", "}", 1)
        if start is None or end is None:
            continue
        function = code[start : end + 1]
        if PLACEHOLDER in function:
            names |= set(re.findall(r"(?<![.\w>:])([a-z_][a-z0-9_]*)\b", function))
    return names


def _matching(code: str, at: int, opening: str, closing: str, step: int) -> int | None:
    """The index of the bracket matching the one at ``at``, searching forward (step 1) or back."""
    depth, i = 0, at
    while 0 <= i < len(code):
        depth += {opening: step, closing: -step}.get(code[i], 0)
        if depth == 0:
            return i
        i += step
    return None
