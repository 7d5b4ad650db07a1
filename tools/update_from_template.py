#!/usr/bin/env python3
"""Take a newer template version into this project: python3 tools/update_from_template.py [REF]

`copier update` with the answers in .copier-answers.yml: the template's changes since the version
this project came from (REF: a tag or commit; default the newest) merged three ways into your
files. Conflicts are left inline (<<<<<<< markers; the tool exits 1 naming the files) but where
the template derives what you wrote by hand (resolve_derived); nothing is committed.
`--template PATH_OR_URL`: the template moved. docs/template.md is the manual.
"""

from __future__ import annotations

import argparse
import re
import runpy
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ANSWERS = ROOT / ".copier-answers.yml"


def _has_tools(python: Path, versions: dict[str, str]) -> bool:
    try:
        subprocess.run([str(python), "-c", "import copier"], check=True, capture_output=True)
        for name, version in versions.items():
            exe = python.parent / name if (python.parent / name).exists() else shutil.which(name)
            out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True).stdout
            if version not in out:
                return False
    except (subprocess.CalledProcessError, FileNotFoundError, TypeError):
        return False
    return True


def tool_python(root: Path) -> Path:
    """A Python with copier (and Jinja) and ruff and clang-format at the versions
    .pre-commit-config.yaml pins: this one, or root/.venv-template, made once."""
    config = (root / ".pre-commit-config.yaml").read_text()
    versions = dict(re.findall(r"\b(ruff|clang-format)==([\w.]+)", config))
    if _has_tools(Path(sys.executable), versions):
        return Path(sys.executable)
    python = root / ".venv-template" / "bin" / "python"
    if not (python.exists() and _has_tools(python, versions)):
        print("creating .venv-template with copier, ruff and clang-format", flush=True)
        venv.create(root / ".venv-template", with_pip=True, clear=True)
        requirements = ["copier>=9.4,<10", *(f"{name}=={version}" for name, version in versions.items())]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
    return python


def format_files(paths: list[Path], fix: str = "I", python: Path | None = None) -> None:
    """Format ``paths`` as the lint does (ruff's fixes of the rules ``fix``, ruff format, clang-format
    twice: its trailing comments settle on a second pass) with the pinned tools, those beside
    ``python`` if it has them (copier's task: it may run from the environment tool_python remakes)."""
    bin_dir = python.parent if python and (python.parent / "ruff").exists() else tool_python(ROOT).parent
    ruff, clang = (str(bin_dir / n) if (bin_dir / n).exists() else n for n in ("ruff", "clang-format"))
    sources = [str(p) for p in paths if p.suffix in (".py", ".pyi")]
    cpp = [str(p) for p in paths if p.suffix in (".h", ".cc", ".cu", ".cuh", ".cpp", ".hpp")]
    if sources:
        subprocess.run([ruff, "check", "-q", "--fix", "--select", fix, *sources], cwd=ROOT, check=False)
        subprocess.run([ruff, "format", "-q", *sources], cwd=ROOT, check=True)
    for _ in range(2 if cpp else 0):
        subprocess.run([clang, "-i", "--style=file", *cpp], cwd=ROOT, check=True)


def conflicted() -> set[str]:
    """The files (tracked or new) that hold a conflict's opening marker at the start of a line."""
    grep = ["git", "grep", "--untracked", "-l", "-e", "^<<<<<<< "]
    return set(subprocess.run(grep, cwd=ROOT, capture_output=True, text=True).stdout.split())


CONFLICT = re.compile(r"^<<<<<<< .*?\n(.*?)^=======\n(.*?)^>>>>>>> .*?\n", re.M | re.S)


def resolve_derived() -> list[str]:
    """Take the template's side of each conflict where it now derives what this project wrote by
    hand (a rendered region, <!-- render: -->; a list of this project's ops where the template's
    side names none), render the pages anew; the files resolved. copier runs it after an update's
    merge (copier.yml: _migrations), whichever copy of this tool started the update."""
    ops = set(runpy.run_path(str(ROOT / "tools" / "remove_op.py"))["declared_ops"]())

    def take(conflict: re.Match[str]) -> str:
        before = conflict.string[: conflict.start()]
        ours, theirs = ({*re.findall(r"\w+", side)} - {"from", "import", "ops"} for side in conflict.groups())
        listed = bool(ours) and ours <= ops and not theirs & ops
        rendered = before.rfind("<!-- render:") > before.rfind("<!-- /render -->")
        return conflict[2] if listed or rendered else conflict[0]

    resolved = []
    for name in sorted(conflicted()):
        text = (ROOT / name).read_text()
        if (merged := CONFLICT.sub(take, text)) != text:
            (ROOT / name).write_text(merged)
            resolved.append(name)
    if resolved:  # marked resolved in git's index, where copier recorded the conflicts
        subprocess.run(["git", "add", "--", *resolved], cwd=ROOT, check=True)
        subprocess.run([sys.executable, ROOT / "tools" / "render_docs.py"], cwd=ROOT, check=True)
    return resolved


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", nargs="?", help="template tag or commit (default: the newest)")
    parser.add_argument("--template", help="where the template is now (rewrites _src_path and commits it)")
    parser.add_argument("--resolve-derived", action="store_true", help=argparse.SUPPRESS)  # copier's
    args = parser.parse_args(argv)
    if args.resolve_derived:
        for name in resolve_derived():
            print(f"{name}: took the template's side, where it derives the list of ops")
        return 0
    if not ANSWERS.is_file():
        sys.exit(f"error: no {ANSWERS.name}: this project was not generated from the template")
    if args.template:
        moved = re.sub(r"^_src_path: .*$", f"_src_path: {args.template}", ANSWERS.read_text(), flags=re.M)
        ANSWERS.write_text(moved)
        subprocess.run(["git", "-C", ROOT, "commit", "-q", "-m", "Template moved", "--", ANSWERS], check=True)
    source = re.search(r"^_src_path: (.*)$", ANSWERS.read_text(), flags=re.MULTILINE)
    src = source.group(1).strip().strip("'\"") if source else ""
    # copier must find the template there: a URL, or a folder other than this project with a copier.yml.
    if source and not re.match(r"^(\w+://|git@|gh:|gl:)", src):
        folder = (ROOT / src).resolve()
        if folder == ROOT or not (folder / "copier.yml").is_file():
            sys.exit(
                f"error: {ANSWERS.name} records the template as {source.group(1)!r}, a path that is not "
                "the template from here (copier records a relative path as given, such as the '.' of "
                "`copier copy . ../my_kernels`): pass --template /path/to/the/template"
            )
    command = [tool_python(ROOT), "-m", "copier", "update", "--trust", "--defaults", "--conflict", "inline"]
    before = conflicted()
    result = subprocess.run(command + (["--vcs-ref", args.ref] if args.ref else []), cwd=ROOT)
    if result.returncode != 0:
        return result.returncode
    # copier leaves a conflict inline and exits 0: the update is not done until they are resolved.
    if left := sorted(conflicted() - before):
        where = f"conflicts (<<<<<<< blocks) in {', '.join(left)}"
        print(f"error: the update left {where}: resolve them, run the tests, commit", file=sys.stderr)
        return 1
    if (ROOT / "tools" / "remove_op.py").is_file():  # the pages' lists of the ops of a kind
        runpy.run_path(str(ROOT / "tools" / "remove_op.py"))["render_op_lists"]()
    print("updated: review `git diff`, run the tests, commit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
