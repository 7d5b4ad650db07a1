#!/usr/bin/env python3
"""Turn this checkout into a new kernel library with your name.

    python3 tools/new_library.py my_kernels --dest ../my_kernels

Copies every tracked file to DEST and renames the library everywhere: the distribution
(``my-kernels``), the import package (``my_kernels``), the CMake target and library file
(``libmy_kernels.so``), the C++ namespace and macro prefix (``MY_KERNELS_``), the JAX target
namespace (``my_kernels.<op>``), the PyTorch op namespace (``torch.ops.my_kernels``), the build
switches (``MY_KERNELS_CUDA``) and the docs. Op names (``scale``, ``rms_norm``, ...) stay: they
are the examples you replace. The result builds, imports and passes its own tests as is.
"""

from __future__ import annotations

import argparse
import keyword
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD = "scale_lib"


def spellings(name: str) -> dict[str, str]:
    """The library name as each kind of identifier writes it."""
    return {
        "snake": name,  # package, CMake target, C++ namespace, JAX/torch namespaces
        "dist": name.replace("_", "-"),  # the distribution on PyPI
        "upper": name.upper(),  # macros, header guards, environment variables
    }


def renamer(new: str):
    old, new_s = spellings(OLD), spellings(new)
    pattern = re.compile("|".join(re.escape(old[k]) for k in ("snake", "dist", "upper")))
    table = {old[k]: new_s[k] for k in old}
    return lambda text: pattern.sub(lambda m: table[m.group(0)], text)


def tracked_files(root: Path) -> list[Path]:
    """Files under version control (so no build output, caches or environments)."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True)
    return [Path(p) for p in out.stdout.decode().split("\0") if p]


def check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name) or name == OLD:
        sys.exit(f"error: {name!r} must be a new lowercase Python identifier, such as my_kernels")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the new library's import name, e.g. my_kernels")
    parser.add_argument("--dest", type=Path, required=True, help="directory to create")
    parser.add_argument("--force", action="store_true", help="replace DEST if it exists")
    parser.add_argument("--no-git", action="store_true", help="do not run git init in DEST")
    args = parser.parse_args(argv)
    check_name(args.name)
    dest: Path = args.dest.resolve()
    if dest.exists():
        if not args.force:
            sys.exit(f"error: {dest} exists (pass --force to replace it)")
        shutil.rmtree(dest)
    rename = renamer(args.name)

    for rel in tracked_files(ROOT):
        source = ROOT / rel
        if not source.is_file():
            continue  # deleted in the working tree but not yet in git
        target = dest / rename(rel.as_posix())
        target.parent.mkdir(parents=True, exist_ok=True)
        data = source.read_bytes()
        try:
            target.write_text(rename(data.decode("utf-8")), encoding="utf-8")
        except UnicodeDecodeError:
            target.write_bytes(data)
        shutil.copymode(source, target)

    readme = dest / "README.md"
    title, _, rest = readme.read_text().partition("\n")
    readme.write_text(f"{title}\n\n_Started from the {OLD} template (`tools/new_library.py`)._\n{rest}")

    if not args.no_git and shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(dest)], check=True)
        subprocess.run(["git", "-C", str(dest), "add", "-A"], check=True)
    new = spellings(args.name)
    print(f"created {dest}: package {new['snake']}, distribution {new['dist']}, library lib{new['snake']}.so")
    print(f"next: cd {dest} && python3 tools/dev.py tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
