"""tools/update_from_template.py refuses, before it runs copier, a template path that is not the
template from the project: copier records a relative path as given, so `copier copy . ../lib`
leaves ``_src_path: .``, which read from the project is the project itself (copier then fails
with an unknown revision). After copier, conflicts it left inline fail the tool."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "update_from_template.py"


needs_tool = pytest.mark.skipif(
    not TOOL.is_file(), reason="tools/update_from_template.py is not part of this checkout"
)


def _project(tmp_path: Path, src: str | None = None) -> Path:
    """A project holding the tool, generated (``.copier-answers.yml``) from a template folder
    under tmp_path, recorded as ``src`` (default: that folder's absolute path)."""
    project = tmp_path / "lib"
    (project / "tools").mkdir(parents=True)
    shutil.copy(TOOL, project / "tools")
    template = tmp_path / "template"
    template.mkdir()
    (template / "copier.yml").write_text("_subdirectory: .\n")
    (project / ".copier-answers.yml").write_text(f"_commit: abc\n_src_path: {src or template}\n")
    return project


def _run_tool(project: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(project / "tools" / "update_from_template.py")],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


@needs_tool
@pytest.mark.parametrize(
    ("src", "refused"), [(".", True), ("../no_such_template", True), ("TEMPLATE", False)]
)
def test_a_relative_template_path_is_refused(tmp_path: Path, src: str, refused: bool) -> None:
    project = _project(tmp_path, None if src == "TEMPLATE" else src)
    # No .pre-commit-config.yaml: past the check the tool stops at reading it (no copier run).
    child = _run_tool(project)
    assert child.returncode != 0
    assert ("pass --template" in child.stderr) == refused, child.stderr


# A stand-in for copier: `python -m copier update ...` writes what the test asks into the project.
FAKE_COPIER = """
import os, pathlib, sys
assert sys.argv[1] == "update", sys.argv
for name, text in {writes!r}.items():
    pathlib.Path(name).write_text(text)
"""


@needs_tool
@pytest.mark.parametrize("conflict", [False, True], ids=["merged", "conflict"])
def test_conflicts_left_by_the_update_fail_the_tool(tmp_path: Path, conflict: bool) -> None:
    """copier exits 0 after leaving a three-way conflict inline; the tool exits 1 and names the
    files (a conflict marker the project had before the update is not one of them)."""
    project = _project(tmp_path)
    (project / ".pre-commit-config.yaml").write_text("repos: []\n")  # no formatter pins
    (project / "kept.md").write_text("<<<<<<< a marker the project holds on purpose\n")
    (project / "kernel.cu").write_text("// before\n")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    merged = "<<<<<<< before updating\n// ours\n=======\n// theirs\n>>>>>>> after updating\n"
    writes = {"kernel.cu": merged if conflict else "// after\n"}
    fake = tmp_path / "fake" / "copier"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FAKE_COPIER.format(writes=writes))
    child = _run_tool(project, PYTHONPATH=str(fake.parent))
    assert child.returncode == (1 if conflict else 0), child.stderr
    named = re.search(r"conflicts \(<<<<<<< blocks\) in (.*): resolve", child.stderr)
    assert (named.group(1) if named else None) == ("kernel.cu" if conflict else None), child.stderr
