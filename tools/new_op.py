#!/usr/bin/env python3
"""Scaffold a new op of any signature: every file an op has, as a working op to edit.

    python3 tools/new_op.py NAME [--inputs x,y] [--attrs alpha:float,times:int,flag:bool]
                            [--kind elementwise|rows|scan|custom] [--cuda-only]
                            [--lang cuda|triton] [--scan-op sum|prod|logaddexp] [--like OP]

renders the op's files from the Jinja templates in tools/scaffolds/ (or copies the example OP,
tools/copy_op.py) and registers it; it builds and passes lint and its tests as generated.
docs/adding_an_op.md is the manual.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from op_names import PLACEHOLDER, identifier, library_name, names_beside_arguments, op_name  # noqa: E402
from remove_op import render_op_lists, with_triton_build  # noqa: E402
from update_from_template import format_files, tool_python  # noqa: E402 (the tools' folder first)

ATTR_TYPES = {"float": "double", "int": "int64_t", "bool": "bool"}
EXAMPLE_VALUE = {"float": "1.5", "int": "3", "bool": "True"}
# Triton's signature type of each attribute type, as the launcher passes it (bool as 0/1).
TRITON_ATTR_TYPES = {"float": "fp64", "int": "i64", "bool": "i32"}
KINDS = {
    "elementwise": "an elementwise op",
    "rows": "a row-wise op",
    "scan": "a scan along the last dimension",
    "custom": "an op with kernels of its own",
}
# The attribute the scan kind adds: the direction of the scan (its vjp runs the other way).
REVERSE = "reverse"


# A scan's operator: its C++ operator (kernels/scan.h), its NumPy running form (the tests'
# reference) and its vjp in python/<lib>/_scan_vjp.py (none: the op itself the other way).
class ScanOp(NamedTuple):
    cpp: str
    numpy: str
    vjp: str | None


SCAN_OPS = {
    "sum": ScanOp("ScanSum", "np.add.accumulate", None),
    "prod": ScanOp("ScanProd", "np.multiply.accumulate", "cumprod_vjp"),
    "logaddexp": ScanOp("ScanLogAddExp", "np.logaddexp.accumulate", "logcumsumexp_vjp"),
}


@dataclass(frozen=True)
class Attr:
    name: str
    type: str  # float, int or bool

    cpp = property(lambda a: ATTR_TYPES[a.type])
    example = property(lambda a: "False" if a.name == REVERSE else EXAMPLE_VALUE[a.type])
    triton_type = property(lambda a: TRITON_ATTR_TYPES[a.type])


@dataclass(frozen=True)
class Spec:
    """What the scaffolds are rendered from: the op, its library and its arguments' names."""

    op: str
    lib: str
    inputs: tuple[str, ...]
    attrs: tuple[Attr, ...]
    kind: str
    cuda_only: bool
    lang: str = "cuda"
    scan_op: str = "sum"
    like: str | None = None  # --like: the example op copied instead (tools/copy_op.py)

    camel = property(lambda s: "".join(part.capitalize() for part in s.op.split("_")))
    macro = property(lambda s: s.lib.upper())
    scan = property(lambda s: SCAN_OPS[s.scan_op])
    rows_like = property(lambda s: s.kind in ("rows", "scan"))  # along the last dimension
    abi_names = property(lambda s: ["out", *s.inputs, *(a.name for a in s.attrs)])
    # The shared launchers' header the kind uses (kernels/<launchers>.h, .cuh, _cpu.h).
    launchers = property(lambda s: {"rows": "rowwise", "scan": "scan"}.get(s.kind, "elementwise"))
    # The file of the op's CUDA kernel (a Triton op's: its Triton source).
    cuda_kernel = property(lambda s: f"kernels/{s.op}/{s.op}.{'py' if s.lang == 'triton' else 'cu'}")

    @property
    def math_attrs(self) -> tuple[Attr, ...]:
        """The attributes of the math (a scan's direction is the launcher's)."""
        return tuple(a for a in self.attrs if not (self.kind == "scan" and a.name == REVERSE))

    @property
    def source_files(self) -> list[str]:
        """The op's C++/CUDA/Triton sources: its header first."""
        folder = f"kernels/{self.op}/{self.op}"
        cuda = [f"{folder}.py", f"{folder}.cu"] if self.lang == "triton" else [f"{folder}.cu"]
        return [f"{folder}.h", *cuda, *([] if self.cuda_only else [f"{folder}_cpu.cc"])]

    def cpp_params(self, maybe_unused: bool = False) -> str:
        """The C++ parameters; ``maybe_unused``: all but the first input's marked so (a CUDA-only
        op's binding in a CPU-only build uses only the tensor it routes by)."""
        params = [f"ffi::TensorView {n}" for n in ("out", *self.inputs)]
        params += [f"{a.cpp} {a.name}" for a in self.attrs]
        routed = f"ffi::TensorView {self.inputs[0]}"
        return ", ".join(p if not maybe_unused or p == routed else f"[[maybe_unused]] {p}" for p in params)

    # -- the default math, in C++ and in Python -----------------------------------------------
    def cpp_value(self, load: str = "{}") -> str:
        """The sum of the inputs, each read as ``load`` says (``M::Load({}[i])``)."""
        total = " + ".join(load.format(n) for n in self.inputs)
        return f"({total})" if len(self.inputs) > 1 else total

    py_value = cpp_value  # the sum of the inputs is written alike

    def cpp_scaled(self, v: str, suffix: str = "", python: bool = False) -> str:
        """``v`` times the numeric attributes (named with ``suffix``), negated by the bool ones."""
        expr = " * ".join([v, *(a.name + suffix for a in self.math_attrs if a.type != "bool")])
        for a in self.math_attrs:
            if a.type == "bool":
                expr = f"-({expr}) if {a.name} else {expr}" if python else f"{a.name} ? -({expr}) : {expr}"
        return expr

    def py_scaled(self, v: str) -> str:
        return self.cpp_scaled(v, python=True)

    @property
    def formula(self) -> str:
        v = self.py_value()
        if self.kind == "rows":
            return f"v = {v}; out = {self.py_scaled('v')} / sqrt(mean(v**2, axis=-1) + 1)"
        if self.kind == "scan":
            return f"out = {self.py_scaled(f'{self.scan.numpy}({v}, axis=-1)')}"
        return f"out = {self.py_scaled(v)}"


def created_files(s: Spec) -> dict[str, str]:
    """The new files of op ``s``, by path, and their text (tools/scaffolds/, Jinja)."""
    import jinja2  # see main: this Python's, or the pinned tools' environment's

    loader = jinja2.FileSystemLoader(ROOT / "tools" / "scaffolds")
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.trim_blocks = env.lstrip_blocks = True
    env.filters["each"] = lambda items, pattern: [pattern.format(item) for item in items]
    triton = s.lang == "triton"
    templates = {
        f"kernels/{s.op}/{s.op}.h": "op.h.j2",
        **({f"kernels/{s.op}/{s.op}.py": "triton_op.py.j2"} if triton else {}),
        f"kernels/{s.op}/{s.op}.cu": "triton_op.cu.j2" if triton else "op.cu.j2",
        f"bindings/{s.op}_binding.cc": "binding.cc.j2",
        f"tests/test_{s.op}.py": "test_op.py.j2",
        f"docs/kernels/{s.op}.md": "op.md.j2",
        f"python/{s.lib}/ops/{s.op}.py": "op.py.j2",
        **({} if s.cuda_only else {f"kernels/{s.op}/{s.op}_cpu.cc": "op_cpu.cc.j2"}),
    }
    return {
        path: env.get_template(t).render(s=s, REVERSE=REVERSE, KINDS=KINDS) for path, t in templates.items()
    }


def register_op(ops_init: Path, op: str) -> None:
    """The op's registration line in python/<lib>/ops/__init__.py, among the others by name."""
    text = ops_init.read_text()
    lines = list(re.finditer(r"^from \.(\w+) import .*\n", text, re.MULTILINE))
    if not lines:
        sys.exit(f"error: {ops_init} registers no op (no 'from .<op> import <op> as <op>' line)")
    after = [m for m in lines if m.group(1) < op]
    at = after[-1].end() if after else lines[0].start()
    ops_init.write_text(text[:at] + f"from .{op} import {op} as {op}\n" + text[at:])


def parse(argv: list[str]) -> tuple[Spec, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("name", help="the op's name, a lowercase identifier such as fused_add")
    add("--inputs", default="x", help="its array arguments, comma-separated (default: x)")
    add("--attrs", default="", help="its scalar arguments, NAME:float|int|bool, comma-separated")
    add("--kind", choices=KINDS, default="elementwise", help="its pattern (default: elementwise)")
    add("--cuda-only", action="store_true", help="a CUDA implementation only (no CPU twin)")
    add("--lang", choices=("cuda", "triton"), default="cuda", help="the CUDA kernel's language")
    add("--scan-op", choices=SCAN_OPS, default="sum", help="a scan's operator (default: sum)")
    add("--like", metavar="OP", help="copy the example op OP under NAME instead (tools/copy_op.py)")
    add("--no-format", action="store_true", help="do not run clang-format and ruff format")
    args = parser.parse_args(argv)
    shaped = {"--inputs": "inputs", "--attrs": "attrs", "--kind": "kind", "--cuda-only": "cuda_only"}
    shaped |= {"--lang": "lang", "--scan-op": "scan_op"}
    if args.like and any(getattr(args, dest) != parser.get_default(dest) for dest in shaped.values()):
        sys.exit(f"error: --like copies {args.like} as it is; it takes none of {', '.join(shaped)}")
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
    library = library_name()
    op = op_name(args.name, library)
    if args.kind == "scan":
        if any(a.name == REVERSE for a in attrs):
            sys.exit(f"error: the scan kind adds the attribute {REVERSE!r} itself; name yours otherwise")
        attrs.append(Attr(REVERSE, "bool"))
    if args.lang == "triton" and args.kind != "elementwise":
        sys.exit("error: --lang triton scaffolds elementwise ops; write other patterns from docs/triton.md")
    if args.scan_op != "sum" and args.kind != "scan":
        sys.exit("error: --scan-op is the operator of a scan: use it with --kind scan")
    rest = (args.kind, args.cuda_only, args.lang, args.scan_op, args.like)
    return Spec(op, library, inputs, tuple(attrs), *rest), not args.no_format


def check_argument_names(s: Spec) -> None:
    """Exits where an input or attribute would take a name the generated code uses beside it."""
    stand_in = [f"{PLACEHOLDER}{i}" for i in range(len(s.inputs) + len(s.attrs))]
    attrs = tuple(
        a if a.name == REVERSE and s.kind == "scan" else Attr(name, a.type)
        for a, name in zip(s.attrs, stand_in[len(s.inputs) :], strict=True)
    )
    trial = dataclasses.replace(s, inputs=tuple(stand_in[: len(s.inputs)]), attrs=attrs)
    used = names_beside_arguments(created_files(trial))
    for name in [*s.inputs, *(a.name for a in s.attrs if a not in attrs)]:
        if name in used:
            sys.exit(
                f"error: {name!r} is a name the generated code uses beside the op's arguments "
                f"(in {used[name]}); name the input or attribute otherwise"
            )


def write(s: Spec) -> tuple[list[str], list[str], str]:
    """The op's files rendered and registered: (files created, files edited, what to do next)."""
    if importlib.util.find_spec("jinja2") is None:  # the scaffolds are Jinja templates
        python = tool_python(ROOT)
        os.execv(python, [str(python), __file__, *sys.argv[1:]])
    check_argument_names(s)
    created = created_files(s)
    existing = [p for p in created if (ROOT / p).exists()]
    if existing:
        sys.exit(f"error: {s.op} exists already ({', '.join(existing)})")
    for path, text in created.items():
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(text)
    math = f"kernels/{s.op}/{s.op}.h"
    math += f" and kernels/{s.op}/{s.op}.py (the CUDA kernel's)" if s.lang == "triton" else ""
    hint = (
        f"next: write the math in {math}\n      and the reference in tests/test_{s.op}.py, then\n"
        f"      python3 tools/dev.py loop -- tests/test_{s.op}.py (docs/adding_an_op.md)"
    )
    return list(created), [], hint


def copy_like(s: Spec) -> tuple[list[str], list[str], str]:
    """``--like OP``: the example OP copied under the new name (tools/copy_op.py)."""
    from copy_op import copy_example

    created = copy_example(s.like, s.op, s.lib)
    hint = (
        f"next: change {s.op}'s math in every kernel file above, its reference in tests/test_{s.op}.py\n"
        f"      and its page docs/kernels/{s.op}.md; python3 tools/dev.py loop -- tests/test_{s.op}.py"
    )
    return created, [], hint


def main(argv: list[str]) -> int:
    s, run_formatters = parse(argv)
    created, edited, hint = copy_like(s) if s.like else write(s)
    registry = ROOT / "python" / s.lib / "ops" / "__init__.py"
    register_op(registry, s.op)
    edited.append(f"python/{s.lib}/ops/__init__.py")
    # pyproject.toml's Triton build requirement, commented out while the library had no Triton kernel.
    pyproject = ROOT / "pyproject.toml"
    if any(p.startswith("kernels/") and p.endswith(".py") for p in created):
        text = pyproject.read_text()
        if text != (new := with_triton_build(text, needed=True)):
            pyproject.write_text(new)
            edited.append("pyproject.toml")
    if run_formatters:
        try:
            format_files([*(ROOT / p for p in created), registry])
        except (OSError, subprocess.CalledProcessError) as error:  # no network for the tools, say
            print(f"note: the new files are not formatted ({error}); run `pre-commit run --all-files`")
    if (ROOT / ".git").exists():  # intent to add: pre-commit and `git diff` see the new files
        subprocess.run(["git", "add", "--intent-to-add", *created], cwd=ROOT, check=False)
    edited += [p.relative_to(ROOT).as_posix() for p in render_op_lists()]
    print(f"created {', '.join(created)}\nedited  {', '.join(edited)}")
    print(hint)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
