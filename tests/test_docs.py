"""Docs include code by marked regions: every region they name must exist, exactly once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INCLUDE = re.compile(r"```\{literalinclude\} (?P<path>\S+)\n(?P<options>(?::[^\n]*\n)*)", re.MULTILINE)


def _includes():
    for page in sorted(DOCS.rglob("*.md")):
        for m in INCLUDE.finditer(page.read_text()):
            options = dict(re.findall(r':([\w-]+): "?(.*?)"?\n', m.group("options")))
            rel = page.relative_to(DOCS)
            yield pytest.param(page, m.group("path"), options, id=f"{rel}:{m.group('path')}")


@pytest.mark.skipif(not DOCS.is_dir(), reason="docs/ is not part of this checkout")
@pytest.mark.parametrize(("page", "path", "options"), list(_includes()))
def test_literalinclude_regions_exist(page: Path, path: str, options: dict[str, str]) -> None:
    source = (page.parent / path).resolve()
    assert source.is_file(), f"{page.name} includes missing file {path}"
    text = source.read_text()
    for key in ("start-after", "end-before"):
        if key in options:
            assert text.count(options[key]) == 1, f"{path}: marker {options[key]!r} must appear once"
    if "pyobject" in options:
        assert re.search(rf"^(def|class) {options['pyobject']}\b", text, re.MULTILINE), options
    if "start-after" in options and "end-before" in options:
        region = text.split(options["start-after"], 1)[1].split(options["end-before"], 1)[0]
        assert region.strip(), f"{path}: region {options['start-after']} is empty"
