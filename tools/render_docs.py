#!/usr/bin/env python3
"""The numbers the docs state, rendered from where they come from: python3 tools/render_docs.py

A page marks a number it takes from a source with a render span, and this script writes the
number between the marks (``--check``: changes nothing, lists every span that is stale):

    from <!-- render: const kernels/cpu_parallel.h 2 * kMinItemsPerThread -->65,536<!-- /render -->
    PyTorch >= <!-- render: floor torch -->2.13<!-- /render -->

The kinds of span (KINDS below; a fork adds its own the same way):

    const FILE EXPR [| FORMAT]   an expression over constants FILE defines: C++ `NAME = VALUE;`
                                 (constexpr, `int64_t{1} << 15` and the like) or Python `NAME = VALUE`
    json FILE PATH [/ PATH] [| FORMAT]   a value of a JSON file (a benchmark's or a check's
                                 output), or the ratio of two: PATH is keys and indices joined by
                                 dots, `list[key=value,...]` picks the element of a list by its
                                 fields: calls[op=scale,array=numpy cpu].impls[label=x * f].median_us
    archs FILE PATH sass|ptx [| FORMAT]   the GPU architectures this tree builds machine code
                                 (sass) or PTX for, by default, for the CUDA version at PATH.cuda
                                 of FILE (a release summary), as tools/check_wheel.py requires them
    floor DIST                   the lowest release of DIST that pyproject.toml declares (>=X);
                                 noxfile.py's LOWEST must install that release (tests_lowest)
    pin DIST                     the release of DIST the build compiles against (build-system
                                 requires DIST==X)
    python                       the lowest Python, pyproject.toml's requires-python
    ops FACT [FACT ...]          the public ops, by name (`my_op`, `scale`), whose declaration (the OpSpec
                                 in python/<package>/ops/<op>.py, read as source) has every FACT;
                                 `!FACT` negates one; "none" when no op has them. FACTS below
    op-table                     a table of the public ops, in the order of the registry's lines:
                                 each op's signature, the first sentence of its docstring (what it
                                 computes), the first paragraph of its module's (the pattern it shows).
                                 A block: the span starts a line and the table has blank lines
                                 around it

FORMAT: `n` (65,536), `pow2` (2^15), `bytes` (256 KiB, 2.7 MiB), `str`, `sm` (a list of GPU
architectures: sm_75, sm_80), or a Python format spec (`.1f`). The support table's platform rows
(README.md: the NVIDIA driver, GPUs and CPUs) are json spans of docs/_static/release/wheels.json,
which the release sessions' checks write (tools/check_wheel.py --summary) and then check the
pages against, and archs spans: what the tree's kernels build (tools/new_op.py and
tools/remove_op.py render them again), which those checks require of the wheel.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import operator
import re
import runpy
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from check_wheel import default_architectures, expected_architectures, sorted_architectures  # noqa: E402

SPAN = re.compile(r"<!-- render: (?P<spec>.+?) -->(?P<body>.*?)<!-- /render -->", re.DOTALL)


def pages() -> list[Path]:
    """The pages people read: README.md, CONTRIBUTING.md and docs/ (not the docs build's output)."""
    top = [p for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md") if p.is_file()]
    docs = ROOT / "docs"
    return top + sorted(p for p in docs.rglob("*.md") if not {"_build", "_generated"} & set(p.parts))


def renders(page: Path, text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]``, of ``page`` as ``text``, lies in a region this tool renders."""
    return page in pages() and any(s.start("body") <= start and end <= s.end() for s in SPAN.finditer(text))


# -- values --------------------------------------------------------------------------------------
_OPS: dict[type, Callable] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.Pow: operator.pow,
}


def _constants(path: Path) -> dict[str, str]:
    """NAME -> the text of its value, for every `NAME = VALUE;` (C++) or `NAME = VALUE` (Python)."""
    text = path.read_text()
    if path.suffix == ".py":
        found = re.findall(r"^([A-Za-z_]\w*)(?:: [^=\n]+)? = ([^\n#]+)", text, re.MULTILINE)
    else:
        found = re.findall(r"\b([A-Za-z_]\w*) = ([^;{}]+(?:\{[^}]*\}[^;{}]*)*);", text)
    values: dict[str, str] = {}
    for name, value in found:
        values.setdefault(name, value.strip())
    return values


def _evaluate(expr: str, names: dict[str, str], seen: tuple[str, ...] = ()) -> float | int:
    # C++ spellings of a number: int64_t{1}, 1u, 100ull, std::chrono::microseconds(100).
    expr = re.sub(r"\b(?:std::)?\w+_t\{([^}]*)\}", r"(\1)", expr)
    expr = re.sub(r"\bstd::chrono::\w+\(([^)]*)\)", r"(\1)", expr)
    expr = re.sub(r"\b(\d+)(?:[uU]?[lL]{0,2}|[lL]{1,2}[uU]?)\b", r"\1", expr).replace("'", "")

    def value(node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.Name) and node.id in names and node.id not in seen:
            return _evaluate(names[node.id], names, (*seen, node.id))
        raise ValueError(f"cannot evaluate {ast.unparse(node)!r} (in {expr!r})")

    return value(ast.parse(expr, mode="eval").body)


def _format(value: object, fmt: str) -> str:
    if fmt == "str":
        return str(value)
    if fmt == "sm":  # a list of GPU architectures, as CUDA names them
        return ", ".join(f"sm_{arch}" for arch in value)  # type: ignore[attr-defined]
    if fmt == "n":
        return f"{value:,}"
    if fmt == "pow2":
        if not isinstance(value, int) or value <= 0 or value & (value - 1):
            raise ValueError(f"{value} is not a power of two")
        return f"2^{value.bit_length() - 1}"
    if fmt == "bytes":
        size, unit = float(value), "bytes"  # type: ignore[arg-type]
        for bigger in ("KiB", "MiB", "GiB"):
            if size < 1024:
                break
            size, unit = size / 1024, bigger
        return f"{size:.0f} {unit}" if size == int(size) else f"{size:.1f} {unit}"
    return format(value, fmt)


def _split_format(args: str, default: str) -> tuple[str, str]:
    what, _, fmt = args.partition("|")
    return what.strip(), fmt.strip() or default


def render_const(args: str) -> str:
    spec, fmt = _split_format(args, "n")
    file, expr = spec.split(maxsplit=1)
    return _format(_evaluate(expr, _constants(ROOT / file)), fmt)


def _lookup(data: object, path: str) -> object:
    """The value at path: keys and list indices by dots; `name[k=v,k=v]` is the one element of
    the list `name` whose fields k have the values v (calls[op=scale,array=numpy cpu])."""
    for part in re.findall(r"[^.\[]+(?:\[[^\]]*\])?", path):
        name, _, select = part.partition("[")
        if name:
            data = data[int(name)] if isinstance(data, list) else data[name]  # type: ignore[index]
        if select:
            pairs = re.split(r",\s*(?=[\w.]+=)", select.rstrip("]"))  # a value may hold ", "
            wanted = dict(kv.split("=", 1) for kv in pairs)
            found = [
                item
                for item in data  # type: ignore[union-attr]
                if all(str(_lookup(item, k.strip())) == v.strip() for k, v in wanted.items())
            ]
            if len(found) != 1:
                raise KeyError(f"{len(found)} elements match [{select}")
            data = found[0]
    return data


def render_json(args: str) -> str:
    spec, fmt = _split_format(args, "str")
    file, paths = spec.split(maxsplit=1)
    data = json.loads((ROOT / file).read_text())
    values = [
        float(path) if re.fullmatch(r"\s*[\d.]+\s*", path) else _lookup(data, path.strip())
        for path in paths.split(" / ")
    ]
    value = values[0] if len(values) == 1 else values[0] / values[1]  # type: ignore[operator]
    return _format(value, fmt)


def render_archs(args: str) -> str:
    spec, fmt = _split_format(args, "sm")
    file, path, kind = spec.split()
    cuda = _lookup(json.loads((ROOT / file).read_text()), f"{path}.cuda")
    sass, ptx = expected_architectures(default_architectures(str(cuda)))
    return _format(sorted_architectures({"sass": sass, "ptx": ptx}[kind]), fmt)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _lowest() -> dict[str, str]:
    """noxfile.py's LOWEST: what tests_lowest installs."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "LOWEST" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError("noxfile.py defines no LOWEST")


def _release(version: str) -> tuple[str, ...]:
    """A release without its trailing zeros: 2.13 and 2.13.0 are one release."""
    parts = version.split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return tuple(parts)


def render_floor(args: str) -> str:
    dist = args.strip()
    project = _pyproject()["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    floors = {
        m.group(1): m.group(2)
        for r in requirements
        if (m := re.match(r"([A-Za-z0-9_.-]+)\s*(?:\[[^\]]*\])?\s*>=\s*([\w.]+)", r))
    }
    if dist not in floors:
        raise ValueError(f"pyproject.toml declares no floor (>=) for {dist}")
    lowest = _lowest()
    if dist in lowest and _release(lowest[dist]) != _release(floors[dist]):
        raise ValueError(
            f"pyproject.toml's floor of {dist} is {floors[dist]}, but tests_lowest (noxfile.py LOWEST) "
            f"installs {lowest[dist]}: the floor stated would not be the one tested"
        )
    return floors[dist]


def render_pin(args: str) -> str:
    dist = args.strip()
    for requirement in _pyproject()["build-system"]["requires"]:
        m = re.fullmatch(rf"{re.escape(dist)}\s*==\s*([\w.]+)", requirement.strip())
        if m:
            return m.group(1)
    raise ValueError(f"pyproject.toml's build requirements pin no release (==) of {dist}")


def render_python(args: str) -> str:
    requires = _pyproject()["project"]["requires-python"]
    m = re.fullmatch(r">=\s*([\w.]+)", requires.strip())
    if not m:
        raise ValueError(f"requires-python {requires!r} is not a floor")
    return m.group(1)


# What a page may say about the declared ops, each read from the OpSpec call's keywords.
FACTS: dict[str, Callable[[dict[str, ast.expr]], bool]] = {
    "all": lambda kw: True,
    "gradient": lambda kw: _set(kw.get("vjp")),  # differentiable (reverse mode)
    "forward": lambda kw: _set(kw.get("jvp")) or _true(kw.get("linear")),  # forward mode too
    "linear": lambda kw: _true(kw.get("linear")),
    "data-sized": lambda kw: _keyword_true(kw.get("output"), "allocated_by_library"),  # no jit
    "rows": lambda kw: any(_keyword_true(i, "rows") for i in _items(kw.get("inputs"))),
    "ndim": lambda kw: any(_keyword_positive(i, "min_ndim") for i in _items(kw.get("inputs"))[:1]),
    "workspace": lambda kw: _set(kw.get("workspace")),
    "triton": lambda kw: _true(kw.get("triton")),
    "cpu": lambda kw: "devices" not in kw or "cpu" in _literal_of(kw["devices"], "devices"),
    "sharded": lambda kw: _set(kw.get("sharding")),
    "elementwise": lambda kw: _literal(kw.get("sharding")) == "elementwise",
    "rowwise": lambda kw: _literal(kw.get("sharding")) == "rows",
    "reduction": lambda kw: _literal(kw.get("sharding")) == "reduction",
}


def _literal(node: ast.expr | None) -> object:
    try:
        return None if node is None else ast.literal_eval(node)
    except ValueError:
        return node  # not a literal: a function, a name


def _set(node: ast.expr | None) -> bool:
    return node is not None and _literal(node) is not None


def _true(node: ast.expr | None) -> bool:
    return _literal(node) is True


def _keyword_true(call: ast.expr | None, name: str) -> bool:
    return isinstance(call, ast.Call) and any(k.arg == name and _true(k.value) for k in call.keywords)


def _keyword_positive(call: ast.expr | None, name: str) -> bool:
    if not isinstance(call, ast.Call):
        return False
    return any(k.arg == name and _literal_of(k.value, name) > 0 for k in call.keywords)


def _literal_of(node: ast.expr, what: str) -> Any:
    """The literal value of ``node``; a ValueError naming ``what`` if it is not one."""
    value = _literal(node)
    if isinstance(value, ast.AST):
        raise ValueError(f"{what}={ast.unparse(value)} is not a literal this script can read")
    return value


def _items(node: ast.expr | None) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, (ast.Tuple, ast.List)) else []


class _Resolve(ast.NodeTransformer):
    """Replaces each module-level name by the expression assigned to it."""

    def __init__(self, names: dict[str, ast.expr]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.names.get(node.id, node)


@functools.cache  # one run reads the ops' modules once
def op_modules() -> dict[str, ast.Module]:
    """module name -> its parsed source, for every op module the registry registers, in the
    order of its lines (tools/remove_op.py reads the registry)."""
    remove_op = runpy.run_path(str(ROOT / "tools" / "remove_op.py"))
    package = remove_op["REGISTRY"].parent
    return {m: ast.parse((package / f"{m}.py").read_text()) for m in remove_op["declared_ops"]()}


@functools.cache  # one run reads the declarations once
def declarations() -> dict[str, tuple[str, dict[str, ast.expr]]]:
    """name -> (its module, the keywords of its OpSpec call), for every public op of a module the
    registry registers. A module-level name (`_WEIGHT`) is replaced by its value. An OpSpec this
    cannot read as written is a ValueError saying which."""
    ops: dict[str, tuple[str, dict[str, ast.expr]]] = {}
    for module, tree in op_modules().items():
        resolve = _Resolve(
            {
                t.id: node.value
                for node in tree.body
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Name)
            }
        )
        calls = [
            call
            for call in ast.walk(tree)
            if isinstance(call, ast.Call)
            and (getattr(call.func, "id", None) or getattr(call.func, "attr", None)) == "OpSpec"
        ]
        if not calls:
            raise ValueError(f"ops/{module}.py: no OpSpec(...) call to read")
        for call in calls:
            keywords = {k.arg: resolve.visit(k.value) for k in call.keywords if k.arg}
            name = keywords.pop("name", None) or (resolve.visit(call.args[0]) if call.args else None)
            where = f"ops/{module}.py:{call.lineno}"
            if not isinstance(_literal(name), str):
                raise ValueError(f"{where}: the OpSpec's name is not a string literal this script can read")
            if _literal(keywords.get("public")) is not False:
                ops[_literal(name)] = (module, keywords)
    return ops


def declared_ops() -> dict[str, dict[str, ast.expr]]:
    """name -> the keywords of its OpSpec call (declarations() without the modules)."""
    return {name: keywords for name, (_, keywords) in declarations().items()}


def render_ops(args: str) -> str:
    wanted = args.split()
    for fact in wanted:
        if fact.lstrip("!") not in FACTS:
            raise ValueError(f"unknown op fact {fact!r} (known: {', '.join(FACTS)})")
    names = sorted(
        name
        for name, keywords in declared_ops().items()
        if all(FACTS[f.lstrip("!")](keywords) != f.startswith("!") for f in wanted)
    )
    return ", ".join(f"`{n}`" for n in names) or "none"


def _markdown(docstring: str) -> str:
    """A docstring's paragraph as one line of a Markdown table's cell (``code`` -> `code`)."""
    return " ".join(docstring.split()).replace("``", "`").replace("|", "\\|")


def render_op_table(args: str) -> str:
    rows = []
    for name, (module, _) in declarations().items():
        tree = op_modules()[module]
        fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if fn is None:
            raise ValueError(f"ops/{module}.py declares {name} but defines no function {name}()")
        signature = copy.deepcopy(fn.args)
        for arg in ast.walk(signature):  # every parameter, *args and **kwargs included
            if isinstance(arg, ast.arg):
                arg.annotation = None
        summary = _markdown((ast.get_docstring(fn) or "?").split("\n\n")[0])
        computes = re.split(r"(?<=\.)\s+(?=[A-Z])", summary, maxsplit=1)[0]  # its first sentence
        pattern = _markdown((ast.get_docstring(tree) or "?").split("\n\n")[0]).rstrip(".")
        rows.append(f"| `{name}({ast.unparse(signature)})` | {computes} | {pattern} |\n")
    return "\n\n| op | computes | the pattern it shows |\n| --- | --- | --- |\n" + "".join(rows) + "\n"


KINDS: dict[str, Callable[[str], str]] = {
    "ops": render_ops,
    "op-table": render_op_table,
    "const": render_const,
    "json": render_json,
    "archs": render_archs,
    "floor": render_floor,
    "pin": render_pin,
    "python": render_python,
}


def render(spec: str) -> str:
    kind, _, args = spec.partition(" ")
    if kind not in KINDS:
        raise ValueError(f"unknown render kind {kind!r} (known: {', '.join(KINDS)})")
    return KINDS[kind](args)


def stale(text: str) -> list[tuple[int, str, str, str]]:
    """(line, spec, shown, rendered) of every span whose text is not what its source gives now."""
    out = []
    for m in SPAN.finditer(text):
        line_before = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
        try:
            value = render(m.group("spec"))
        except (OSError, ValueError, KeyError, IndexError, SyntaxError) as error:
            value = f"<error: {error}>"
        if line_before.count("`") % 2:  # Markdown shows a comment inside `code` as it is
            value = "<error: the span is inside a `code` span; put it outside the backticks>"
        elif not line_before.strip(" ") and not value.startswith("\n\n"):  # raw HTML, unless a block
            value = "<error: the span starts a line, which Markdown then reads as raw HTML>"
        if value != m.group("body"):
            out.append((text.count("\n", 0, m.start()) + 1, m.group("spec"), m.group("body"), value))
    return out


def rendered(text: str, kinds: set[str] | None = None) -> str:
    """``text`` with its spans rendered anew (those of ``kinds`` only, when given)."""

    def span(m: re.Match[str]) -> str:
        spec = m.group("spec")
        if kinds is not None and spec.partition(" ")[0] not in kinds:
            return m.group(0)
        return f"<!-- render: {spec} -->{render(spec)}<!-- /render -->"

    return SPAN.sub(span, text)


def render_ops_spans() -> list[Path]:
    """Render the ``ops``, ``op-table`` and ``archs`` spans of every page again: tools/new_op.py
    and tools/remove_op.py call this after changing the declared ops (a Triton kernel changes the
    architectures; the other spans need the library's build or results).
    Returns the pages it changed; where a declaration cannot be read, says so and changes none
    (the change to the ops is made; `python3 tools/render_docs.py` renders them once it reads)."""
    changed = []
    try:
        for page in pages():
            text = page.read_text()
            if (new := rendered(text, {"ops", "op-table", "archs"})) != text:
                changed.append((page, new))
    except (OSError, ValueError, KeyError, SyntaxError) as error:
        print(f"note: the pages' lists of ops were not rendered: {error}", file=sys.stderr)
        return []
    for page, new in changed:
        page.write_text(new)
    return [page for page, _ in changed]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    problems = 0
    for page in pages():
        text = page.read_text()
        for line, spec, shown, value in stale(text):
            problems += 1
            print(f"{page.relative_to(ROOT)}:{line}: {spec}: shows {shown!r}, the source gives {value!r}")
        if not check and SPAN.search(text):
            new = rendered(text)
            if new != text:
                page.write_text(new)
    if check and problems:
        print("stale: run python3 tools/render_docs.py")
    return 1 if check and problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
