#!/usr/bin/env python3
"""Take a newer template version into this project: python3 tools/update_from_template.py [REF]

`copier update` with the answers in .copier-answers.yml: the template's changes since the version
this project came from (REF: a tag or commit; default the newest) merged three ways into your
files. Conflicts are left inline (<<<<<<< markers; exit 1 naming the files) but where the template
derives what you wrote by hand; nothing is committed. `--template PATH_OR_URL`: it moved.
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
    """The files (tracked or new) with a line that opens or closes a conflict."""
    grep = ["git", "grep", "-z", "-I", "--untracked", "-l", "-e", "^<<<<<<< ", "-e", "^>>>>>>> "]
    return {*subprocess.run(grep, cwd=ROOT, capture_output=True, text=True).stdout.split("\0")} - {""}


# A conflict as git merge-file writes it: ours, the base (diff3 style; optional), theirs.
CONFLICT = re.compile(r"^<{7} .*?\n(.*?)(?:^\|{7}.*?\n.*?)?^={7}\n(.*?)^>{7} .*?(?:\n|\Z)", re.M | re.S)


def derived(conflict: re.Match[str], path: Path, tools: dict[str, dict]) -> bool:
    """Whether the template derives what our side wrote by hand: a page's rendered region, or, in
    the package's __init__.py, our side lists only our ops and the template's side names none."""
    ours, theirs, start = *conflict.groups(), conflict.start()
    whole = conflict.string[:start] + theirs + conflict.string[conflict.end() :]
    unmarked = "<!-- render:" not in ours + theirs and "<!-- /render -->" not in ours
    rendered = unmarked and tools["render_docs"]["renders"](path, whole, start, start + len(theirs.rstrip()))
    ops = {*tools["remove_op"]["declared_ops"]()}
    names = [{*re.findall(r"\w+", side)} - {"from", "import", "ops"} for side in (ours, theirs)]
    exports = path == tools["remove_op"]["PACKAGE"] / "__init__.py"
    return rendered or (exports and bool(names[0]) and names[0] <= ops and not names[1] & ops)


def resolve_derived() -> list[str]:
    """The template's side of each derived conflict, the pages rendered anew; the files left with no
    conflict. copier runs it after an update's merge (copier.yml: _migrations), whatever the tool."""
    tools = {n: runpy.run_path(str(ROOT / "tools" / f"{n}.py")) for n in ("render_docs", "remove_op")}
    resolved = []
    for name in sorted(conflicted()):
        text = (ROOT / name).read_bytes().decode()  # as it is, line endings included
        merged = CONFLICT.sub(lambda c, path=ROOT / name: c[2] if derived(c, path, tools) else c[0], text)
        (ROOT / name).write_bytes(merged.encode())
        resolved += [] if re.search(r"^(<{7}|>{7}) ", merged, re.M) else [name]  # as conflicted() finds
    if resolved:  # marked resolved in git's index, where copier recorded the conflicts
        subprocess.run(["git", "add", "--", *resolved], cwd=ROOT, check=True)
    if not conflicted():  # a conflict left in a rendered region is the author's to resolve first
        tools["render_docs"]["main"]([])
    return resolved


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", nargs="?", help="template tag or commit (default: the newest)")
    parser.add_argument("--template", help="where the template is now (rewrites _src_path and commits it)")
    parser.add_argument("--resolve-derived", action="store_true", help=argparse.SUPPRESS)  # copier's
    args = parser.parse_args(argv)
    if args.resolve_derived:  # never fails the update: what it leaves, the update reports
        try:
            print("".join(f"{name}: took the template's side (derived)\n" for name in resolve_derived()))
        except Exception as error:  # noqa: BLE001
            print(f"note: no conflict resolved: {error!r}")
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
    if code := subprocess.run(command + (["--vcs-ref", args.ref] if args.ref else []), cwd=ROOT).returncode:
        return code
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
