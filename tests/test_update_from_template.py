"""tools/update_from_template.py refuses, before it runs copier, a template path that is not the
template from the project: copier records a relative path as given, so `copier copy . ../lib`
leaves ``_src_path: .``, which read from the project is the project itself (copier then fails
with an unknown revision)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "update_from_template.py"


@pytest.mark.skipif(not TOOL.is_file(), reason="tools/update_from_template.py is not part of this checkout")
@pytest.mark.parametrize(
    ("src", "refused"), [(".", True), ("../no_such_template", True), ("TEMPLATE", False)]
)
def test_a_relative_template_path_is_refused(tmp_path: Path, src: str, refused: bool) -> None:
    project = tmp_path / "lib"
    (project / "tools").mkdir(parents=True)
    shutil.copy(TOOL, project / "tools")
    template = tmp_path / "template"
    template.mkdir()
    (template / "copier.yml").write_text("_subdirectory: .\n")
    src = str(template) if src == "TEMPLATE" else src
    (project / ".copier-answers.yml").write_text(f"_commit: abc\n_src_path: {src}\n")
    # No .pre-commit-config.yaml: past the check the tool stops at reading it (no copier run).
    child = subprocess.run(
        [sys.executable, str(project / "tools" / "update_from_template.py")],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode != 0
    assert ("pass --template" in child.stderr) == refused, child.stderr
