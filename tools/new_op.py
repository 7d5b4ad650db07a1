#!/usr/bin/env python3
"""Scaffold a new op of any signature: every file an op touches, as a working op to edit.

    python3 tools/new_op.py NAME [--inputs x,y] [--attrs alpha:float,times:int,flag:bool]
                            [--kind elementwise|rows|scan|custom] [--cuda-only]
                            [--lang cuda|triton] [--scan-op sum|prod|logaddexp]

writes the op's folder kernels/NAME/ (NAME.h: the math, the argument checks; NAME.cu; NAME_cpu.cc,
none with --cuda-only), bindings/NAME_binding.cc, python/<lib>/ops/NAME.py (the declaration and the
typed function), tests/test_NAME.py and docs/kernels/NAME.md, each rendered from its Jinja
template in tools/scaffolds/ (docs/adding_an_op.md), and adds NAME's registration line to
python/<lib>/ops/__init__.py, its export to __init__.py and its README row. The generated op
builds, passes lint and passes its tests as generated. Its math until you change it:

    elementwise  out = (x + y + ...) * alpha * ...   (the shared elementwise launchers)
    rows         v = x + y + ...; out = v * alpha / sqrt(mean(v**2, last axis) + 1)
                 (the shared row-wise launchers: one block per row on CUDA)
    scan         out = running sum(x + y + ..., last axis) * alpha * ..., from the end of each row
                 (a running product or log-sum-exp with --scan-op prod|logaddexp)
                 with reverse=True, a keyword the kind adds (the shared scan launchers:
                 a scheme per shape on CUDA, the CPU pool on the host; docs/scan.md)
    custom       out = (x + y + ...) * alpha * ...   (written as plain kernels of its own)

--lang triton (elementwise ops) writes the CUDA kernel in Triton instead (docs/triton.md):
kernels/NAME/NAME.py (the @triton.jit kernel and the specialisations the build compiles), and
kernels/NAME/NAME.cu is its launcher; the CPU twin stays C++.

Integer attributes multiply like floats; a bool attribute negates the result when true. An input
or attribute may not take a name the generated code uses beside it (``n``, ``rows``, ``grad``,
``np``, ...: tools/op_names.py finds them in a trial rendering); the error says where.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
import runpy
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
ATTR_TYPES = {"float": "double", "int": "int64_t", "bool": "bool"}
EXAMPLE_VALUE = {"float": "1.5", "int": "3", "bool": "True"}
KINDS = ("elementwise", "rows", "scan", "custom")


# A scan's operator (--scan-op): its C++ operator (kernels/scan.h), its NumPy running form (the
# tests' float64 reference) and its vjp in python/<lib>/_scan_vjp.py (none: the op itself the
# other way, as for a sum).
class ScanOp(NamedTuple):
    cpp: str
    numpy: str
    vjp: str | None


SCAN_OPS = {
    "sum": ScanOp("ScanSum", "np.add.accumulate", None),
    "prod": ScanOp("ScanProd", "np.multiply.accumulate", "cumprod_vjp"),
    "logaddexp": ScanOp("ScanLogAddExp", "np.logaddexp.accumulate", "logcumsumexp_vjp"),
}
# The attribute the scan kind adds: the direction of the scan (its vjp runs the other way).
REVERSE = "reverse"
LANGS = ("cuda", "triton")
# Triton's signature type of each attribute type, as the launcher passes it (bool as 0/1).
TRITON_ATTR_TYPES = {"float": "fp64", "int": "i64", "bool": "i32"}


@dataclass(frozen=True)
class Attr:
    name: str
    type: str  # float, int or bool

    @property
    def cpp(self) -> str:
        return ATTR_TYPES[self.type]

    @property
    def example(self) -> str:
        return "False" if self.name == REVERSE else EXAMPLE_VALUE[self.type]

    @property
    def triton_type(self) -> str:
        return TRITON_ATTR_TYPES[self.type]


@dataclass(frozen=True)
class Spec:
    op: str
    lib: str
    inputs: tuple[str, ...]
    attrs: tuple[Attr, ...]
    kind: str
    cuda_only: bool
    lang: str = "cuda"
    scan_op: str = "sum"
    like: str | None = None  # --like: the example op copied instead (tools/copy_op.py)

    # -- names --------------------------------------------------------------------------------
    @property
    def camel(self) -> str:
        return "".join(part.capitalize() for part in self.op.split("_"))

    @property
    def macro(self) -> str:
        return self.lib.upper()

    @property
    def math_attrs(self) -> tuple[Attr, ...]:
        """The attributes of the math (a scan's direction is the launcher's)."""
        return tuple(a for a in self.attrs if not (self.kind == "scan" and a.name == REVERSE))

    @property
    def cuda_kernel(self) -> str:
        """The file of the op's CUDA kernel (a Triton op's: its Triton source)."""
        return f"kernels/{self.op}/{self.op}.{'py' if self.lang == 'triton' else 'cu'}"

    @property
    def source_files(self) -> list[str]:
        """The op's C++/CUDA/Triton sources: its header first."""
        folder = f"kernels/{self.op}/{self.op}"
        cuda = [f"{folder}.py", f"{folder}.cu"] if self.lang == "triton" else [f"{folder}.cu"]
        return [f"{folder}.h", *cuda, *([] if self.cuda_only else [f"{folder}_cpu.cc"])]

    @property
    def launchers(self) -> str:
        """The shared launchers' header the kind uses (kernels/<launchers>.h, .cuh, _cpu.h)."""
        return {"rows": "rowwise", "scan": "scan"}.get(self.kind, "elementwise")

    @property
    def scan(self) -> ScanOp:
        return SCAN_OPS[self.scan_op]

    @property
    def rows_like(self) -> bool:
        """Whether the op works along the last dimension (rows of 1 or more dimensions)."""
        return self.kind in ("rows", "scan")

    @property
    def abi_names(self) -> list[str]:
        return ["out", *self.inputs, *(a.name for a in self.attrs)]

    def cpp_params(self, maybe_unused: bool = False) -> str:
        """The C++ parameters; ``maybe_unused``: all but the first input's marked so (a CUDA-only
        op's binding in a CPU-only build uses only the tensor it routes by)."""
        tensors = [f"ffi::TensorView {n}" for n in ("out", *self.inputs)]
        params = tensors + [f"{a.cpp} {a.name}" for a in self.attrs]
        routed = f"ffi::TensorView {self.inputs[0]}"
        return ", ".join(p if not maybe_unused or p == routed else f"[[maybe_unused]] {p}" for p in params)

    # -- the default math, in C++ and in Python -----------------------------------------------
    def cpp_value(self, load: str = "{}") -> str:
        """The sum of the inputs, each read as ``load`` says (``M::Load({}[i])``)."""
        total = " + ".join(load.format(n) for n in self.inputs)
        return f"({total})" if len(self.inputs) > 1 else total

    def cpp_scaled(self, v: str, suffix: str = "") -> str:
        """``v`` times the numeric attributes (named with ``suffix``), negated by the bool ones."""
        factors = [a.name + suffix for a in self.math_attrs if a.type != "bool"]
        expr = " * ".join([v, *factors])
        for a in self.math_attrs:
            if a.type == "bool":
                expr = f"{a.name} ? -({expr}) : {expr}"
        return expr

    py_value = cpp_value  # the sum of the inputs is written alike

    def py_scaled(self, v: str) -> str:
        expr = " * ".join([v, *(a.name for a in self.math_attrs if a.type != "bool")])
        for a in self.math_attrs:
            if a.type == "bool":
                expr = f"-({expr}) if {a.name} else {expr}"
        return expr

    @property
    def formula(self) -> str:
        v = self.py_value()
        if self.kind == "rows":
            return f"v = {v}; out = {self.py_scaled('v')} / sqrt(mean(v**2, axis=-1) + 1)"
        if self.kind == "scan":
            return f"out = {self.py_scaled(f'{self.scan.numpy}({v}, axis=-1)')}"
        return f"out = {self.py_scaled(v)}"


# ---------------------------------------------------------------------------------------------
# The files, rendered from tools/scaffolds/ (Jinja)
# ---------------------------------------------------------------------------------------------
SCAFFOLDS = ROOT / "tools" / "scaffolds"


def render(template: str, s: Spec) -> str:
    """tools/scaffolds/``template`` rendered for ``s``."""
    import jinja2  # see main: this Python's, or the pinned tools' environment's

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(SCAFFOLDS),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["each"] = lambda items, pattern: [pattern.format(item) for item in items]
    return env.get_template(template).render(s=s, REVERSE=REVERSE)


def created_files(s: Spec) -> dict[str, str]:
    """The new files of op ``s``, by path, and their text."""
    templates = {f"kernels/{s.op}/{s.op}.h": "op.h.j2"}
    if s.lang == "triton":
        templates[f"kernels/{s.op}/{s.op}.py"] = "triton_op.py.j2"
        templates[f"kernels/{s.op}/{s.op}.cu"] = "triton_op.cu.j2"
    else:
        templates[f"kernels/{s.op}/{s.op}.cu"] = "op.cu.j2"
    templates[f"bindings/{s.op}_binding.cc"] = "binding.cc.j2"
    templates[f"tests/test_{s.op}.py"] = "test_op.py.j2"
    templates[f"docs/kernels/{s.op}.md"] = "op.md.j2"
    templates[f"python/{s.lib}/ops/{s.op}.py"] = "op.py.j2"
    if not s.cuda_only:
        templates[f"kernels/{s.op}/{s.op}_cpu.cc"] = "op_cpu.cc.j2"
    return {path: render(template, s) for path, template in templates.items()}


def register_op(ops_init: Path, op: str) -> None:
    """The op's registration line in python/<lib>/ops/__init__.py, among the others by name."""
    text = ops_init.read_text()
    line = f"from .{op} import {op} as {op}\n"
    lines = list(re.finditer(r"^from \.(\w+) import .*\n", text, re.MULTILINE))
    if not lines:
        sys.exit(f"error: {ops_init} registers no op (no 'from .<op> import <op> as <op>' line)")
    after = [m for m in lines if m.group(1) < op]
    at = after[-1].end() if after else lines[0].start()
    ops_init.write_text(text[:at] + line + text[at:])


def _import_statement(text: str, module: str) -> re.Match[str] | None:
    """``from <module> import ...`` in ``text``, on one line or in parentheses over several (as
    the formatter wraps a long one)."""
    return re.search(rf"^from {re.escape(module)} import (?:\(([^)]*)\)|(.+))$", text, re.MULTILINE)


def _imported_names(statement: re.Match[str]) -> list[str]:
    listed = statement.group(1) if statement.group(1) is not None else statement.group(2)
    return [n.strip() for n in listed.split(",") if n.strip()]


def add_to_init(init: Path, op: str) -> None:
    text = init.read_text()
    imports = _import_statement(text, ".ops")
    assert imports is not None, f"{init}: no 'from .ops import' statement"
    names = sorted({*_imported_names(imports), op})
    statement = runpy.run_path(str(ROOT / "tools" / "remove_op.py"))["import_statement"]
    text = text.replace(imports.group(0), statement("from .ops import ", names).rstrip("\n"))
    listing = re.search(r"__all__ = \[(.*?)\]", text, re.DOTALL)
    assert listing is not None, f"{init}: no __all__"
    # Ruff's order for __all__ (RUF022): constants, then classes, then the rest, each by name.
    exported = sorted(
        {*re.findall(r'"([^"]+)"', listing.group(1)), op},
        key=lambda n: (0 if n.isupper() else 1 if n[:1].isupper() else 2, n),
    )
    body = "".join(f'    "{name}",\n' for name in exported)
    init.write_text(text.replace(listing.group(0), f"__all__ = [\n{body}]"))


def add_readme_row(readme: Path, s: Spec) -> None:
    attrs = [a.name if a in s.math_attrs else f"{a.name}=False" for a in s.attrs]  # as declared
    signature = ", ".join([*s.inputs, *attrs, "*", "out=None"])
    pattern = {
        "elementwise": "an elementwise op",
        "rows": "a row-wise op",
        "scan": "a scan along the last dimension",
        "custom": "an op with kernels of its own",
    }
    where = " (CUDA only)" if s.cuda_only else ""
    where += ", in Triton" if s.lang == "triton" else ""
    append_readme_row(
        readme, f"| `{s.op}({signature})` | `{s.formula}` | {pattern[s.kind]}{where} (scaffolded) |\n"
    )


def append_readme_row(readme: Path, row: str) -> bool:
    """``row`` at the end of the README's op table (the order of the ops' registration); False if none."""
    text = readme.read_text()
    head, sep, rest = text.partition("## The ops")
    table_rows = list(re.finditer(r"^\| `\w+\(.*\n", rest, re.MULTILINE))
    if not sep or not table_rows:
        return False
    at = table_rows[-1].end()
    readme.write_text(head + sep + rest[:at] + row + rest[at:])
    return True


# ---------------------------------------------------------------------------------------------
def parse(argv: list[str]) -> tuple[Spec, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the op's name, a lowercase identifier such as fused_add")
    parser.add_argument("--inputs", default="x", help="its array arguments, comma-separated (default: x)")
    parser.add_argument(
        "--attrs", default="", help="its scalar arguments, NAME:float|int|bool, comma-separated"
    )
    parser.add_argument(
        "--kind", choices=KINDS, default="elementwise", help="its pattern (default: elementwise)"
    )
    parser.add_argument("--cuda-only", action="store_true", help="a CUDA implementation only (no CPU twin)")
    parser.add_argument(
        "--lang",
        choices=LANGS,
        default="cuda",
        help="the CUDA kernel's language (default: cuda; triton: elementwise only)",
    )
    parser.add_argument(
        "--scan-op",
        choices=tuple(SCAN_OPS),
        default="sum",
        help="a scan's operator (default: sum): the kernels' operator, the reference and the vjp",
    )
    parser.add_argument(
        "--like",
        metavar="OP",
        help="copy the example op OP under NAME instead (tools/copy_op.py): its kernels, tests, docs page",
    )
    parser.add_argument("--no-format", action="store_true", help="do not run clang-format and ruff format")
    args = parser.parse_args(argv)
    shaped = {"--inputs": "inputs", "--attrs": "attrs", "--kind": "kind", "--cuda-only": "cuda_only"}
    shaped |= {"--lang": "lang", "--scan-op": "scan_op"}
    if args.like and any(getattr(args, dest) != parser.get_default(dest) for dest in shaped.values()):
        sys.exit(f"error: --like copies {args.like} as it is; it takes none of {', '.join(shaped)}")
    names_rules = runpy.run_path(str(ROOT / "tools" / "op_names.py"))
    identifier = names_rules["identifier"]
    inputs = tuple(identifier(n.strip(), "input") for n in args.inputs.split(",") if n.strip())
    attrs = []
    for item in filter(None, (a.strip() for a in args.attrs.split(","))):
        name, _, kind = item.partition(":")
        if kind not in ATTR_TYPES:
            sys.exit(f"error: attribute {item!r}: write NAME:TYPE with TYPE one of {', '.join(ATTR_TYPES)}")
        attrs.append(Attr(identifier(name, "attribute"), kind))
    names = [*inputs, *(a.name for a in attrs), "out"]
    if not inputs or len(set(names)) != len(names):
        sys.exit(f"error: inputs and attributes need distinct names other than 'out'; got {names[:-1]}")
    library = names_rules["library_name"]()
    op = names_rules["op_name"](args.name, library)
    if args.kind == "scan":
        if any(a.name == REVERSE for a in attrs):
            sys.exit(f"error: the scan kind adds the attribute {REVERSE!r} itself; name yours otherwise")
        attrs.append(Attr(REVERSE, "bool"))
    if args.lang == "triton" and args.kind != "elementwise":
        sys.exit("error: --lang triton scaffolds elementwise ops; write other patterns from docs/triton.md")
    if args.scan_op != "sum" and args.kind != "scan":
        sys.exit("error: --scan-op is the operator of a scan: use it with --kind scan")
    spec = Spec(
        op, library, inputs, tuple(attrs), args.kind, args.cuda_only, args.lang, args.scan_op, args.like
    )
    return spec, not args.no_format


def _formatters() -> dict[str, str]:
    """ruff and clang-format at the versions .pre-commit-config.yaml pins, so that the new files
    pass the lint as written: this Python's (or PATH's) where those are the pinned versions, else
    from a private environment made once from their PyPI wheels (.venv-template, shared with
    tools/update_from_template.py)."""
    bin_dir = tools_python().parent
    found = {name: bin_dir / name for name in ("ruff", "clang-format")}
    return {name: str(exe) if exe.exists() else (shutil.which(name) or name) for name, exe in found.items()}


def tools_python() -> Path:
    """A Python with copier (and so Jinja) and the pinned formatters: this one, or the private
    environment tools/update_from_template.py makes once (.venv-template)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from update_from_template import tool_python

    return tool_python(ROOT)


def format_files(paths: list[Path]) -> None:
    """Format what was written with the project's pinned formatters."""
    cpp = [str(p) for p in paths if p.suffix in (".h", ".cu", ".cc", ".cuh")]
    py = [str(p) for p in paths if p.suffix == ".py"]
    try:
        tools = _formatters()
        # clang-format twice: its alignment of trailing comments can settle only on a second pass
        # (a renamed copy's longer lines), and the lint runs it once.
        for tool, files, cmd in (
            ("clang-format", cpp, ["-i"]),
            ("clang-format", cpp, ["-i"]),
            ("ruff", py, ["format", "-q"]),
        ):
            if files:
                subprocess.run([tools[tool], *cmd, *files], check=True, cwd=ROOT)
    except (OSError, subprocess.CalledProcessError) as error:  # no network for the wheels, say
        print(f"note: the new files are not formatted ({error}); run `pre-commit run --all-files`")


def require_triton_to_build(pyproject: Path) -> bool:
    """Restore pyproject.toml's Triton build requirement where a library without Triton kernels
    had it commented out (tools/remove_op.py); True if the file changed."""
    toggle = runpy.run_path(str(ROOT / "tools" / "remove_op.py"))["with_triton_build"]
    text = pyproject.read_text()
    new = toggle(text, needed=True)
    if new != text:
        pyproject.write_text(new)
    return new != text


def track(paths: list[Path]) -> None:
    """Tell git about the new files (intent to add): pre-commit and `git diff` see only tracked
    files, so the lint checks them on its first run."""
    if (ROOT / ".git").exists():
        subprocess.run(["git", "add", "--intent-to-add", *map(str, paths)], cwd=ROOT, check=False)


def copy_like(s: Spec, run_formatters: bool) -> int:
    """``--like OP``: the example OP copied under the new name (tools/copy_op.py)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from copy_op import copy_example, readme_row

    created, edited = copy_example(s.like, s.op, s.lib), []
    row = readme_row(s.like, s.op, s.lib, ROOT / "README.md")
    if row is not None and append_readme_row(ROOT / "README.md", row):
        edited.append("README.md")
    package = ROOT / "python" / s.lib
    register_op(package / "ops" / "__init__.py", s.op)
    add_to_init(package / "__init__.py", s.op)
    edited += [f"python/{s.lib}/ops/__init__.py", f"python/{s.lib}/__init__.py"]
    if any(p.startswith("kernels/") and p.endswith(".py") for p in created) and require_triton_to_build(
        ROOT / "pyproject.toml"
    ):
        edited.append("pyproject.toml")
    hint = (
        f"next: change {s.op}'s math in every kernel file above, its reference in tests/test_{s.op}.py\n"
        f"      and its page docs/kernels/{s.op}.md; python3 tools/dev.py loop -- tests/test_{s.op}.py"
    )
    return finish(list(created), edited, package, run_formatters, hint)


def finish(created: list[str], edited: list[str], package: Path, run_formatters: bool, hint: str) -> int:
    """Format and track the new files, and say what was written and what to do next."""
    if run_formatters:
        format_files([ROOT / p for p in created] + [package / "ops" / "__init__.py", package / "__init__.py"])
    track([ROOT / p for p in created])
    pages = runpy.run_path(str(ROOT / "tools" / "remove_op.py"))["render_op_lists"]()
    edited = edited + [p.relative_to(ROOT).as_posix() for p in pages]
    print(f"created {', '.join(created)}")
    print(f"edited  {', '.join(edited)}")
    print(hint)
    return 0


def check_argument_names(s: Spec) -> None:
    """Exits where an input or attribute would take a name the generated code uses beside it."""
    names = runpy.run_path(str(ROOT / "tools" / "op_names.py"))
    stand_in = [f"{names['PLACEHOLDER']}{i}" for i in range(len(s.inputs) + len(s.attrs))]
    attrs = tuple(
        a if a.name == REVERSE and s.kind == "scan" else Attr(name, a.type)
        for a, name in zip(s.attrs, stand_in[len(s.inputs) :], strict=True)
    )
    trial = dataclasses.replace(s, inputs=tuple(stand_in[: len(s.inputs)]), attrs=attrs)
    used = names["names_beside_arguments"](created_files(trial))
    for name in [*s.inputs, *(a.name for a in s.attrs if a not in attrs)]:
        if name in used:
            sys.exit(
                f"error: {name!r} is a name the generated code uses beside the op's arguments "
                f"(in {used[name]}); name the input or attribute otherwise"
            )


def main(argv: list[str]) -> int:
    s, run_formatters = parse(argv)
    if s.like:
        return copy_like(s, run_formatters)
    if importlib.util.find_spec("jinja2") is None:  # the scaffolds are Jinja templates
        python = tools_python()
        os.execv(python, [str(python), __file__, *argv])
    check_argument_names(s)
    created = created_files(s)
    package = ROOT / "python" / s.lib
    existing = [p for p in created if (ROOT / p).exists()]
    if existing:
        sys.exit(f"error: {s.op} exists already ({', '.join(existing)})")
    for path, text in created.items():
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(text)
    register_op(package / "ops" / "__init__.py", s.op)
    add_to_init(package / "__init__.py", s.op)
    add_readme_row(ROOT / "README.md", s)
    edited = [f"python/{s.lib}/ops/__init__.py", f"python/{s.lib}/__init__.py", "README.md"]
    if s.lang == "triton" and require_triton_to_build(ROOT / "pyproject.toml"):
        edited.append("pyproject.toml")
    math = f"kernels/{s.op}/{s.op}.h"
    if s.lang == "triton":
        math += f" and kernels/{s.op}/{s.op}.py (the CUDA kernel's)"
    hint = (
        f"next: write the math in {math}\n"
        f"      and the reference in tests/test_{s.op}.py, then\n"
        f"      python3 tools/dev.py loop -- tests/test_{s.op}.py (docs/adding_an_op.md)"
    )
    return finish(list(created), edited, package, run_formatters, hint)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
