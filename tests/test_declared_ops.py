"""Every op declared in scale_lib.ops.OPS is wired everywhere the cross-cutting suites, the docs
and the README look for it, so that adding or removing an op is a change to its own files only."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
from cases import case_of, public_op_names

import scale_lib
from scale_lib.ops import OPS

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = public_op_names()


def test_ops_are_declared() -> None:
    assert PUBLIC, "scale_lib.ops.OPS declares no public op"
    names = [op.name for op in OPS]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_op_has_a_function_a_case_and_a_property_test(name: str) -> None:
    assert callable(getattr(scale_lib, name, None)), f"scale_lib.{name} is missing"
    assert name in scale_lib.__all__, f"{name} is missing from scale_lib.__all__"
    case_of(name)  # raises, naming what is missing
    module = importlib.import_module(f"test_{name}")
    assert any(n.endswith("_property") for n in dir(module)), f"tests/test_{name}.py has no property test"


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_op_has_a_docs_page(name: str) -> None:
    pages = list((ROOT / "docs" / "kernels").glob("*.md"))
    assert any(f"scale_lib.{name}" in p.read_text() or p.stem == name for p in pages), (
        f"no page in docs/kernels/ documents {name}"
    )


def test_readme_table_shows_each_public_op_as_its_function_is() -> None:
    """The op table (rendered from the ops' sources, tools/render_docs.py) against the live
    functions: each public op once, with its signature and its docstring's first sentence."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The ops", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)(\(.*?\))` \| (.*?) \| (.*) \|$", section, re.M)
    listed = [name for name, *_ in rows]
    assert sorted(listed) == sorted(PUBLIC), (
        f"README's op table lists {listed}; scale_lib.ops.OPS declares {PUBLIC}"
    )
    assert len(set(listed)) == len(listed), f"README's op table lists an op twice: {listed}"
    for name, shown, computes, pattern in rows:
        fn = getattr(scale_lib, name)
        signature = inspect.signature(fn)
        bare = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        assert shown == str(bare), f"README: {name}{shown}; the function: {name}{bare}"
        first = " ".join((fn.__doc__ or "").split()).replace("``", "`")
        assert first.startswith(computes.replace("\\|", "|")), (
            f"README: {name} computes {computes!r}; its docstring: {first[:120]!r}"
        )
        assert pattern and pattern != "?", f"README: {name} shows no pattern (its module's docstring)"
