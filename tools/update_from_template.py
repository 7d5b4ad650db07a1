#!/usr/bin/env python3
"""Take a newer template version into this project: python3 tools/update_from_template.py [REF]

Runs `copier update` (https://copier.readthedocs.io) with the answers recorded in
.copier-answers.yml: copier regenerates the version this project came from and the new one (REF:
a tag or commit of the template; default its newest), and merges the template's changes into
your files three ways, keeping your edits. Conflicts are left inline (<<<<<<< markers) for you
to resolve (the tool then exits 1, naming the files); nothing is committed. Start from a clean
working tree, then review with `git diff`.

    python3 tools/update_from_template.py                 # the template's newest version
    python3 tools/update_from_template.py v0.3.0          # a given tag or commit
    python3 tools/update_from_template.py --template ../template   # the template moved

copier, ruff and clang-format (at the versions .pre-commit-config.yaml pins: the update formats
what the rename changes exactly as the lint does) come from a private environment,
.venv-template, made on first use; or from the running Python if it has them all.
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
ANSWERS = ".copier-answers.yml"
COPIER = "copier>=9.4,<10"


def pinned(root: Path) -> dict[str, str]:
    """ruff and clang-format as .pre-commit-config.yaml pins them (name -> version)."""
    config = (root / ".pre-commit-config.yaml").read_text()
    return dict(re.findall(r"\b(ruff|clang-format)==([\w.]+)", config))


def _has_tools(python: Path, versions: dict[str, str]) -> bool:
    bin_dir = python.parent
    try:
        subprocess.run([str(python), "-c", "import copier"], check=True, capture_output=True)
        for name, version in versions.items():
            exe = bin_dir / name if (bin_dir / name).exists() else shutil.which(name)
            out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True).stdout
            if version not in out:
                return False
    except (subprocess.CalledProcessError, FileNotFoundError, TypeError):
        return False
    return True


def tool_python(root: Path) -> Path:
    """A Python with copier and the pinned formatters: this one, or root/.venv-template."""
    versions = pinned(root)
    if _has_tools(Path(sys.executable), versions):
        return Path(sys.executable)
    env = root / ".venv-template"
    python = env / "bin" / "python"
    if not (python.exists() and _has_tools(python, versions)):
        print(f"creating {env.name} with copier, ruff and clang-format", flush=True)
        venv.create(env, with_pip=True, clear=True)
        requirements = [COPIER, *(f"{name}=={version}" for name, version in versions.items())]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
    return python


def _reachable(src: str) -> bool:
    """Whether copier can find the template at src: a URL, or a folder other than this project
    that holds a copier.yml (a relative path is read from this project, as copier reads it)."""
    if re.match(r"^(\w+://|git@|gh:|gl:)", src):
        return True
    folder = (ROOT / src).resolve()
    return folder != ROOT and (folder / "copier.yml").is_file()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", nargs="?", help="template tag or commit (default: the newest)")
    parser.add_argument("--template", help="where the template is now (rewrites _src_path and commits it)")
    args = parser.parse_args(argv)
    answers = ROOT / ANSWERS
    if not answers.is_file():
        sys.exit(f"error: no {ANSWERS}: this project was not generated from the template")
    if args.template:
        text = re.sub(
            r"^_src_path: .*$", f"_src_path: {args.template}", answers.read_text(), flags=re.MULTILINE
        )
        answers.write_text(text)
        subprocess.run(
            ["git", "-C", str(ROOT), "commit", "-q", "-m", "Template moved", "--", ANSWERS], check=True
        )
    source = re.search(r"^_src_path: (.*)$", answers.read_text(), flags=re.MULTILINE)
    if source and not _reachable(source.group(1).strip().strip("'\"")):
        sys.exit(
            f"error: {ANSWERS} records the template as {source.group(1)!r}, a path that is not the "
            "template from here (copier records a relative path as given, such as the '.' of "
            "`copier copy . ../my_kernels`): pass --template /path/to/the/template"
        )
    command = [
        str(tool_python(ROOT)),
        "-m",
        "copier",
        "update",
        "--trust",
        "--defaults",
        "--conflict",
        "inline",
    ]
    if args.ref:
        command += ["--vcs-ref", args.ref]
    before = conflicted()
    result = subprocess.run(command, cwd=ROOT)
    if result.returncode != 0:
        return result.returncode
    # copier leaves a three-way conflict inline and exits 0: the update is not done until they are
    # resolved, so a script that runs this tool must not read success.
    left = sorted(conflicted() - before)
    if left:
        print(
            f"error: the update left conflicts (<<<<<<< blocks) in {', '.join(left)}: resolve them, "
            "run the tests, commit",
            file=sys.stderr,
        )
        return 1
    remove_op = ROOT / "tools" / "remove_op.py"
    if remove_op.is_file():  # the pages' lists of the ops of a kind: the template's and its own
        runpy.run_path(str(remove_op))["render_op_lists"]()
    print("updated: review `git diff`, run the tests, commit")
    return 0


def conflicted() -> set[str]:
    """The files (tracked or new) that hold a conflict's opening marker at the start of a line."""
    grep = ["git", "grep", "--untracked", "-l", "-e", "^<<<<<<< "]
    return set(subprocess.run(grep, cwd=ROOT, capture_output=True, text=True).stdout.split())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
